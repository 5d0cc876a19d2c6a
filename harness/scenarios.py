"""Moved to `harness.scenario.library`; this import path stays for one release."""

from harness._moved import alias

alias(__name__, "harness.scenario.library")
