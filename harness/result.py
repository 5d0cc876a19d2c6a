"""Moved to `harness.results.run`; this import path stays for one release."""

from harness._moved import alias

alias(__name__, "harness.results.run")
