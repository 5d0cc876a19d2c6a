"""Moved to `harness.devices.state`; this import path stays for one release."""

from harness._moved import alias

alias(__name__, "harness.devices.state")
