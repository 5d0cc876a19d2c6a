"""Moved to `harness.qnn.dsp_heap`; this import path stays for one release."""

from harness._moved import alias

alias(__name__, "harness.qnn.dsp_heap")
