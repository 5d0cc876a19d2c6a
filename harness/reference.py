"""Moved to `harness.scenario.reference`; this import path stays for one release."""

from harness._moved import alias

alias(__name__, "harness.scenario.reference")
