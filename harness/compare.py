"""Moved to `harness.results.compare`; this import path stays for one release."""

from harness._moved import alias

alias(__name__, "harness.results.compare")
