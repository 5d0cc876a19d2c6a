"""Moved to `harness.report.html`; this import path stays for one release."""

from harness._moved import alias

alias(__name__, "harness.report.html")
