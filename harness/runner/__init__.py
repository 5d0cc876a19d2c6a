"""Lifecycle runners: processes that execute one scenario and stream one event per step.

The contract is harness/protocol/ (explained in docs/runner-protocol.md); `python_runner` and
the native runner implement it.
"""
