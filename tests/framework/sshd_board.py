"""A Linux "board" on this host: Debian's OpenSSH server on 127.0.0.1, for the ssh device kind.

Its own sshd_config, host key and client key in a directory of its own, a sandbox user
(`hilboard`, created with useradd when missing: needs root), started as a foreground process
(`/usr/sbin/sshd -D -f CONFIG -e`), so the system's sshd (if any) is never touched. It writes an
ssh client config (`ssh_config`) with a Host alias and a block for 127.0.0.1, both with the key
and a known_hosts file of its own; give it to the harness with `--ssh-config`.

    python tests/framework/sshd_board.py --dir DIR      # prints `target:`, `alias:`, `config:`

runs until it is killed (SIGTERM/SIGINT stop sshd); tests use `SshdBoard` as a context manager.
"""

from __future__ import annotations

import argparse
import os
import pwd
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

SSHD = "/usr/sbin/sshd"
USER = "hilboard"
ALIAS = "hilboard-ci"
PACKAGE = "openssh-server"


class BoardUnavailable(RuntimeError):
    """sshd cannot be started here (not installed, not root and no sandbox user); the reason."""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def ensure_user(user: str = USER) -> pwd.struct_passwd:
    """The sandbox user, created (with a home, a shell, a locked password) when missing."""
    try:
        return pwd.getpwnam(user)
    except KeyError:
        pass
    if os.geteuid() != 0:
        raise BoardUnavailable(f"user {user} does not exist and only root can create it")
    # "*": no password, but not locked ("!"), which sshd refuses without PAM
    subprocess.run(["useradd", "--create-home", "--shell", "/bin/bash", "-p", "*", user], check=True,
                   capture_output=True)
    return pwd.getpwnam(user)


class SshdBoard:
    """One sshd on 127.0.0.1:`port` that lets `user` in with a fresh ed25519 key."""

    def __init__(self, directory: Path | None = None, user: str = USER, alias: str = ALIAS,
                 port: int | None = None, setenv: list[str] | None = None) -> None:
        if not os.access(SSHD, os.X_OK):
            raise BoardUnavailable(f"{SSHD} is missing (apt-get install {PACKAGE})")
        if os.geteuid() != 0:
            raise BoardUnavailable("sshd must run as root to log another user in")
        self.dir = Path(directory or tempfile.mkdtemp(prefix="hil-sshd-")).resolve()
        self.user, self.alias = user, alias
        self.port = port or free_port()
        self.proc: subprocess.Popen | None = None
        self.account = ensure_user(user)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.dir.chmod(0o755)  # sshd reads authorized_keys with the user's rights
        keys = self.dir / "keys"
        keys.mkdir(mode=0o700, exist_ok=True)
        self.host_key, self.client_key = keys / "host_ed25519", keys / "client_ed25519"
        for key in (self.host_key, self.client_key):
            if not key.exists():
                subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key)],
                               check=True)
        # sshd reads it as the user, who may not reach self.dir (a pytest tmp dir is 0700):
        # a directory of its own in the system's temporary directory, world-traversable.
        self.auth_dir = Path(tempfile.mkdtemp(prefix="hil-sshd-auth-"))
        self.auth_dir.chmod(0o755)
        self.authorized = self.auth_dir / "authorized_keys"
        # A lease directory of this board's own (the harness keeps one per host, in /tmp): the
        # boards of one host here are separate boards, whichever processes stand them up. In
        # auth_dir, which the user can reach (a pytest tmp dir is 0700), made in start().
        self.lease_dir = str(self.auth_dir / "lease" / ".executorch-hil-lease")
        shutil.copyfile(f"{self.client_key}.pub", self.authorized)
        self.authorized.chmod(0o644)
        self.sshd_config = self.dir / "sshd_config"
        self.sshd_config.write_text("\n".join([
            f"Port {self.port}", "ListenAddress 127.0.0.1", f"HostKey {self.host_key}",
            f"PidFile {self.dir / 'sshd.pid'}", f"AuthorizedKeysFile {self.authorized}",
            "StrictModes no", "UsePAM no", "PasswordAuthentication no",
            "KbdInteractiveAuthentication no", "PermitRootLogin no", f"AllowUsers {user}",
            "MaxSessions 64", "MaxStartups 64:30:128", "LogLevel INFO",
            "Subsystem sftp internal-sftp",
            # what the board gives its sessions (e.g. QEMU_LD_PREFIX for an aarch64 stand-in)
            *([f"SetEnv {' '.join(setenv)}"] if setenv else []), ""]))
        self.known_hosts = self.dir / "known_hosts"
        self.client_config = self.dir / "ssh_config"
        common = [f"  User {user}", f"  Port {self.port}", f"  IdentityFile {self.client_key}",
                  "  IdentitiesOnly yes", f"  UserKnownHostsFile {self.known_hosts}",
                  "  StrictHostKeyChecking accept-new", "  BatchMode yes"]
        self.client_config.write_text("\n".join(
            [f"Host {alias}", "  HostName 127.0.0.1", *common, "", "Host 127.0.0.1", *common,
             ""]))
        self.log = self.dir / "sshd.log"

    @property
    def target(self) -> str:
        return f"ssh://{self.user}@127.0.0.1:{self.port}"

    @property
    def alias_target(self) -> str:
        return f"ssh://{self.alias}"

    def start(self, timeout: float = 20.0) -> SshdBoard:
        if not self.authorized.exists():  # a restart after stop()
            self.auth_dir.mkdir(mode=0o755, exist_ok=True)
            shutil.copyfile(f"{self.client_key}.pub", self.authorized)
            self.authorized.chmod(0o644)
        lease_parent = Path(self.lease_dir).parent
        lease_parent.mkdir(exist_ok=True)
        lease_parent.chmod(0o1777)
        Path("/run/sshd").mkdir(mode=0o755, exist_ok=True)  # sshd's privilege separation dir
        with open(self.log, "ab") as log:  # sshd keeps its own copy of the descriptor
            self.proc = subprocess.Popen([SSHD, "-D", "-e", "-f", str(self.sshd_config)],
                                         stdout=log, stderr=subprocess.STDOUT,
                                         start_new_session=True)
        deadline = time.monotonic() + timeout
        while True:
            if self.proc.poll() is not None:
                raise BoardUnavailable(f"sshd exited {self.proc.returncode}: "
                                       f"{self.log.read_text()[-800:]}")
            done = subprocess.run(["ssh", "-F", str(self.client_config), self.alias, "true"],
                                  capture_output=True, text=True, timeout=30)
            if done.returncode == 0:
                return self
            if time.monotonic() > deadline:
                self.stop()
                raise BoardUnavailable(f"ssh into {self.target} failed: {done.stderr[-500:]}; "
                                       f"sshd said: {self.log.read_text()[-800:]}")
            time.sleep(0.2)

    def children(self) -> list[int]:
        """The pids of sshd's per-connection processes (a connection's sshd)."""
        if self.proc is None:
            return []
        out = subprocess.run(["ps", "-o", "pid=", "--ppid", str(self.proc.pid)],
                             capture_output=True, text=True).stdout
        return [int(p) for p in out.split()]

    def stop(self) -> None:
        """Stop sshd and every session it started (their processes are the sandbox user's)."""
        if self.proc is not None and self.proc.poll() is None:
            for pid in self.children():
                try:
                    os.kill(pid, signal.SIGTERM)
                except ProcessLookupError:
                    pass
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None
        shutil.rmtree(self.auth_dir, ignore_errors=True)

    def __enter__(self) -> SshdBoard:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dir", type=Path, help="its directory (default: a new temporary one)")
    parser.add_argument("--port", type=int, help="the port (default: a free one)")
    parser.add_argument("--user", default=USER)
    parser.add_argument("--setenv", action="append", default=[], metavar="NAME=VALUE",
                        help="a variable every session gets (sshd_config SetEnv; repeatable)")
    args = parser.parse_args(argv)
    try:
        board = SshdBoard(args.dir, user=args.user, port=args.port,
                          setenv=args.setenv).start()
    except BoardUnavailable as exc:
        print(f"sshd board unavailable: {exc}", file=sys.stderr)
        return 2
    print(f"target: {board.target}\nalias: {board.alias_target}\nconfig: {board.client_config}",
          flush=True)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    try:
        board.proc.wait()
    except (KeyboardInterrupt, SystemExit):
        pass
    finally:
        board.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
