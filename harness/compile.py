"""Moved to `harness.programs.compile`; this import path stays for one release."""

from harness._moved import alias

alias(__name__, "harness.programs.compile")
