"""Moved to `harness.programs.pte`; this import path stays for one release."""

from harness._moved import alias

alias(__name__, "harness.programs.pte")
