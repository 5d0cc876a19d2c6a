"""Moved to `harness.report.plots`; this import path stays for one release."""

from harness._moved import alias

alias(__name__, "harness.report.plots")
