"""Moved to `harness.protocol.memory`; this import path stays for one release."""

from harness._moved import alias

alias(__name__, "harness.protocol.memory")
