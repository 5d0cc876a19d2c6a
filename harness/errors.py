"""Errors the harness raises for bad input or a broken environment.

Each one carries a message that says what was wrong and what to do, because these reach users
as the only line of a failed test or a session that refused to start.
"""


class HarnessError(Exception):
    """Base class: something the user can fix (input, environment, configuration)."""


class ConfigError(HarnessError):
    """A device config, known-issues file or option is invalid."""


class ModelError(HarnessError):
    """A model, its `.pte` file or its compilation is unusable."""


class SdkError(HarnessError):
    """The QNN SDK (or the simulator libraries standing in for it) is missing or unusable."""


class DeviceError(HarnessError):
    """A device is unreachable, offline, or failed its preflight."""


class UnsafeFileError(HarnessError):
    """A file a command would copy or push that it must not: a symbolic link, not a regular
    file, or outside the directories that command may read (harness.storage.confined_file)."""
