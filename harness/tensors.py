"""Moved to `harness.protocol.tensors`; this import path stays for one release."""

from harness._moved import alias

alias(__name__, "harness.protocol.tensors")
