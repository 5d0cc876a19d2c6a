"""Numbers read from environment variables: a bad value is one ConfigError that names the
variable, read where it is used (the output cap, the device reacquire window), so a typo in a
farm's environment fails at start-up instead of silently taking a default."""

from __future__ import annotations

import os

from harness.errors import ConfigError


def env_positive(name: str, unit: str) -> float | None:
    """A positive number from environment variable `name` (None when unset or empty); a value
    that is not one is a ConfigError naming the variable and the `unit` it counts."""
    value = os.environ.get(name)
    if not value:
        return None
    try:
        number = float(value)
    except ValueError:
        number = -1.0
    if number <= 0:
        raise ConfigError(f"{name} must be a number of {unit} > 0, got {value!r}")
    return number

