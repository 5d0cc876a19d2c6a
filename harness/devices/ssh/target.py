"""`ssh://[user@]host[:port]`: a Linux board's --device value, checked before anything runs.

The host may be an alias of the user's ssh config: it is handed to ssh as it is, and ssh
resolves its address, user, port and key (`ssh -G` shows what it resolved); nothing here
reads an ssh config. Every part is untrusted, so a part that ssh could take for an option
(a leading `-`) or that holds whitespace or shell characters is refused here, and commands
quote every argument anyway.
"""

from __future__ import annotations

import dataclasses
import re

from harness.errors import ConfigError

SCHEME = "ssh://"
_HOST = re.compile(r"^(?:[A-Za-z0-9_][A-Za-z0-9._%-]*|\[[0-9A-Fa-f:.%]+\])$")
_USER = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9._-]*$")
FORMS = "ssh://[user@]host[:port] (host may be a Host alias of your ssh config)"


@dataclasses.dataclass(frozen=True)
class SshTarget:
    """A parsed target; `user` and `port` are None when ssh (or its config) decides them."""

    host: str
    user: str | None = None
    port: int | None = None

    @property
    def text(self) -> str:
        """The target as the user would write it (and as `replay_args` gives it back)."""
        user = f"{self.user}@" if self.user else ""
        port = f":{self.port}" if self.port else ""
        return f"{SCHEME}{user}{self.host}{port}"

    @property
    def ssh_host(self) -> str:
        """The host argument for ssh (an IPv6 literal without its brackets)."""
        return self.host[1:-1] if self.host.startswith("[") else self.host

    def ssh_args(self) -> list[str]:
        """`-l USER -p PORT` where the target gives them (else the ssh config's)."""
        args = ["-l", self.user] if self.user else []
        return args + (["-p", str(self.port)] if self.port else [])


def claims(target: str) -> bool:
    return target.startswith(SCHEME)


def parse_target(target: str) -> SshTarget:
    """`target` as an SshTarget, or a ConfigError naming what is wrong and the forms."""
    if not claims(target):
        raise ConfigError(f"--device {target!r} is not an ssh target: write {FORMS}")
    rest = target[len(SCHEME):]
    if rest.endswith("/"):
        rest = rest[:-1]
    if not rest:
        raise ConfigError(f"--device {target!r} names no host: write {FORMS}")
    user, at, hostport = rest.rpartition("@")
    if at and not _USER.match(user):
        raise ConfigError(f"--device {target!r}: {user!r} is not a user name ssh would take "
                          f"as one (letters, digits, '.', '_', '-', not starting with '-')")
    host, port = hostport, None
    if hostport.startswith("["):
        close = hostport.find("]")
        host, tail = hostport[:close + 1], hostport[close + 1:]
        if tail:
            if not tail.startswith(":"):
                raise ConfigError(f"--device {target!r}: write the port after the address, "
                                  f"as [{host[1:-1]}]:PORT")
            port = tail[1:]
    elif hostport.count(":") == 1:
        host, port = hostport.split(":")
    if not host or not _HOST.match(host):
        raise ConfigError(f"--device {target!r}: {host!r} is not a host name, address or ssh "
                          f"config alias (no spaces, '/', shell characters or a leading '-'); "
                          f"write {FORMS}")
    number = None
    if port is not None:
        if not port.isdigit() or not 0 < int(port) < 65536:
            raise ConfigError(f"--device {target!r}: port {port!r} is not a number from 1 to "
                              "65535")
        number = int(port)
    return SshTarget(host, user or None, number)
