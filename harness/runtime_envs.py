"""Moved to `harness.runtime.envs`; this import path stays for one release."""

from harness._moved import alias

alias(__name__, "harness.runtime.envs")
