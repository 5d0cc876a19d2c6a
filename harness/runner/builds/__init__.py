"""Building the native lifecycle runner (`harness/runner/native`) for the host, arm64 Linux
and Android, and the QNN interposer with the device builds."""
