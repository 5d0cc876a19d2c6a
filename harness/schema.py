"""Moved to `harness.config.schema`; this import path stays for one release."""

from harness._moved import alias

alias(__name__, "harness.config.schema")
