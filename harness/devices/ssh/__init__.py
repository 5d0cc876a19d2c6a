"""The ssh device kind: Qualcomm Linux boards (RB3-class kits, QCS SoCs running Linux) reached
with OpenSSH, `--device ssh://[user@]host[:port]` (host may be an alias of your ssh config).

Modules by concern: `target` (the --device value), `transport` (the ControlMaster, commands,
tar pushes), `identify` (machine, SoC, home), `payload` (what a board gets for its build),
`fork` (the served runner over the connection), `device` (SshDevice), `board` (the phases).
Heavy imports wait for `open`, so the registry's claim check costs nothing.

The kind's settings are the pytest options `--ssh-config FILE` and `--ssh-arch ARCH` where the
plugin adds the kinds' options, and the environment variables EXECUTORCH_HIL_SSH_CONFIG and
EXECUTORCH_HIL_SSH_ARCH (their defaults, and what `harness replay` reads).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import ClassVar

from harness.devices.kinds import DeviceKind, OpenContext
from harness.devices.ssh.target import claims as _claims, parse_target
from harness.devices.workspace import check_characters

from harness.errors import ConfigError

ROOT_NAME = ".executorch-hil"  # as harness.devices.ssh.device.ROOT_NAME (not imported: heavy)
CONFIG_ENV = "EXECUTORCH_HIL_SSH_CONFIG"
ARCH_ENV = "EXECUTORCH_HIL_SSH_ARCH"


class SshKind(DeviceKind):
    name: ClassVar[str] = "ssh"
    title: ClassVar[str] = "Linux board over ssh"

    @classmethod
    def claims(cls, target: str) -> bool:
        return _claims(target)

    @classmethod
    def add_options(cls, group) -> None:
        group.addoption("--ssh-config", default=os.environ.get(CONFIG_ENV), metavar="FILE",
                        help="ssh client config for ssh:// devices (`ssh -F FILE`; default "
                             f"${CONFIG_ENV}, else ssh's own ~/.ssh/config)")
        group.addoption("--ssh-arch", default=os.environ.get(ARCH_ENV, "auto"),
                        choices=("auto", "aarch64", "x86_64"),
                        help="the board's architecture: auto (`uname -m`), or a stand-in's "
                             "(aarch64 on an x86_64 host running aarch64 programs through "
                             "qemu-user binfmt_misc; checked at start-up)")

    @classmethod
    def check_start_up(cls, targets: list[str], context: OpenContext) -> None:
        """A malformed target, a missing --ssh-config or a workspace outside the board's
        root form (`$HOME/.executorch-hil/...`) are usage errors before any connection."""
        for target in targets:
            parse_target(target)
        config = context.option("ssh_config", os.environ.get(CONFIG_ENV))
        if config and not Path(config).is_file():
            raise ConfigError(f"--ssh-config {config}: no such file")
        workspace = context.options.device_workspace
        if workspace is not None:
            check_characters(workspace)
        if workspace is not None and (not workspace.startswith("/")
                                      or f"/{ROOT_NAME}/" not in workspace.rstrip("/")):
            raise ConfigError(f"--device-workspace {workspace!r}: on an ssh board a workspace "
                              f"is a directory below $HOME/{ROOT_NAME}/ of the board's user "
                              f"(e.g. /home/USER/{ROOT_NAME}/mine)")
        if context.options.lease_wait < 0:
            raise ConfigError(f"--lease-wait must be 0 or more seconds, got "
                              f"{context.options.lease_wait:g}")

    @classmethod
    def online(cls, target: str, context: OpenContext) -> bool:
        """Whether `ssh host true` answers (a connection of its own, closed at once)."""
        import subprocess

        parsed = parse_target(target)
        config = context.option("ssh_config", os.environ.get(CONFIG_ENV))
        argv = ["ssh", *(["-F", config] if config else []), "-o", "BatchMode=yes",
                "-o", "ConnectTimeout=5", *parsed.ssh_args(), "--", parsed.ssh_host, "true"]
        try:
            return subprocess.run(argv, capture_output=True, timeout=20).returncode == 0
        except (OSError, subprocess.SubprocessError):
            return False

    @classmethod
    def open(cls, target: str, context: OpenContext):
        from harness.devices.ssh.board import open_board

        config = context.option("ssh_config", os.environ.get(CONFIG_ENV))
        return open_board(target, context.options, notice=context.notice, sdk=context.sdk,
                          ssh_config=Path(config) if config else None,
                          arch=context.option("ssh_arch", os.environ.get(ARCH_ENV, "auto")))
