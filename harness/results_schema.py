"""Moved to `harness.results.schema`; this import path stays for one release."""

from harness._moved import alias

alias(__name__, "harness.results.schema")
