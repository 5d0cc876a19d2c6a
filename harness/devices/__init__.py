"""Devices a scenario can run on: the host HTP simulator and Android devices over adb.

Tests and fixtures use the `Device` interface only; they never branch on the kind.
"""
