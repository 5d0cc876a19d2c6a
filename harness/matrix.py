"""Moved to `harness.runtime.matrix`; this import path stays for one release."""

from harness._moved import alias

alias(__name__, "harness.runtime.matrix")
