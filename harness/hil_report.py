"""Moved to `harness.report.plugin`; this import path stays for one release."""

from harness._moved import alias

alias(__name__, "harness.report.plugin")
