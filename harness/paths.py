"""Moved to `harness.config.paths`; this import path stays for one release."""

from harness._moved import alias

alias(__name__, "harness.config.paths")
