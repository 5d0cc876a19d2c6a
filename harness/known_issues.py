"""Moved to `harness.results.known_issues`; this import path stays for one release."""

from harness._moved import alias

alias(__name__, "harness.results.known_issues")
