"""A runner process without some of root's capabilities, so a root host meets the permission
checks a runner that is not root meets (an Android app never has them).

The runtime, the runner and the programs live under the harness's cache, which on a root host
is under /root (mode 0700): a process of another user cannot reach them. The process therefore
keeps uid 0 and starts without the capabilities that let root bypass file permissions
(util-linux `setpriv --bounding-set`, the kernel's own mechanism: capabilities(7)): without
CAP_DAC_OVERRIDE and CAP_DAC_READ_SEARCH, open(2) of a file in a directory another user owns
and it cannot write fails with EACCES, as for any user.
"""

from __future__ import annotations

import re

from harness.errors import HarnessError
from harness.runner.launch import Launch, command_prefix

_CAPABILITY = re.compile(r"^[a-z_]+$")


def without_capabilities(capabilities: list[str] | tuple[str, ...]) -> Launch:
    """The launch (`setpriv --bounding-set -CAP,... --`) that starts a process without
    `capabilities` (names as setpriv spells them: "dac_override")."""
    bad = [c for c in capabilities if not _CAPABILITY.match(c)] or \
        ([] if capabilities else ["(none)"])
    if bad:
        raise HarnessError(f"capability names {bad!r}: spell them as setpriv does, e.g. "
                           "'dac_override'")
    return Launch("setpriv", ("--bounding-set", ",".join(f"-{c}" for c in capabilities), "--"))


def capabilities_dropped(capabilities: list[str] | tuple[str, ...]) -> list[str]:
    """The host command prefix that starts a process without `capabilities`; [] for none."""
    return command_prefix([without_capabilities(capabilities)]) if capabilities else []
