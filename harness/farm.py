"""Moved to `harness.devices.farm`; this import path stays for one release."""

from harness._moved import alias

alias(__name__, "harness.devices.farm")
