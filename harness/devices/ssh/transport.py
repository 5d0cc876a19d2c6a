"""One OpenSSH connection to a board for the whole session, and what travels over it.

The session starts one `ssh -M -N` (a ControlMaster) with its socket in a private directory of
the session's own (mode 0700, under the host's temporary directory); every command, push and
fork-server stream afterwards is a session multiplexed over that socket (`-S`), so a command
costs a channel, not a TCP connection and a key exchange. A client never opens a connection
of its own: should the socket be gone, its `ProxyCommand=false` fails it at once (exit 255)
instead of quietly connecting again, and the device re-acquires the board (`reconnect`) by
starting a new master within its window.

Remote commands are one string run by `/bin/sh -c` on the board (whatever the user's login
shell is); callers quote every argument with shlex.quote. Files go in one `tar` stream per
push (the board needs `tar` and `sha256sum`, coreutils or busybox).
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import tarfile
import tempfile
import time
from pathlib import Path, PurePosixPath

from harness.devices.ssh.target import SshTarget
from harness.errors import DeviceError
from harness.process import piped

q = shlex.quote
SSH_FAILED = 255  # ssh's own exit status for a connection error
ALIVE_INTERVAL_S = 5  # ServerAliveInterval of the master: a dead board is seen within ~15 s


class SshError(DeviceError):
    """The connection failed (not the remote command): ssh exited 255 or could not start."""


class SshTransport:
    """The ControlMaster of one board and the commands multiplexed over it."""

    def __init__(self, target: SshTarget, config_file: Path | None = None,
                 connect_s: float = 10.0, control_root: Path | None = None) -> None:
        if shutil.which("ssh") is None:
            raise DeviceError("the OpenSSH client `ssh` is not installed here (Debian: "
                              "apt-get install openssh-client)")
        self.target = target
        self.config_file = Path(config_file) if config_file else None
        self.connect_s = connect_s
        self.dir = Path(tempfile.mkdtemp(prefix="hil-ssh-", dir=control_root))
        self.dir.chmod(0o700)
        self.socket = self.dir / "cm"
        self.master: subprocess.Popen | None = None
        self._master_log = self.dir / "master.log"

    # ssh command lines ---------------------------------------------------------------------
    def _base(self) -> list[str]:
        config = ["-F", str(self.config_file)] if self.config_file else []
        return ["ssh", *config, "-o", "BatchMode=yes", "-S", str(self.socket),
                *self.target.ssh_args()]

    def client_argv(self, command: str) -> list[str]:
        """A command multiplexed over the master (never a connection of its own)."""
        return [*self._base(), "-o", "ControlMaster=no", "-o", "ProxyCommand=false", "-T",
                "--", self.target.ssh_host, f"exec /bin/sh -c {q(command)}"]

    # The master ----------------------------------------------------------------------------
    def connect(self, timeout: float | None = None) -> None:
        """Start the ControlMaster and wait until it answers (`-O check`); DeviceError with
        ssh's own words when it cannot connect within `timeout` (default connect_s)."""
        self.stop_master()
        # A killed master leaves its socket behind, and a new master would not replace it
        # ("already exists, disabling multiplexing"); the directory is this session's own.
        self.socket.unlink(missing_ok=True)
        window = self.connect_s if timeout is None else timeout
        argv = [*self._base(), "-M", "-N", "-o", "ControlPersist=no",
                "-o", f"ConnectTimeout={max(1, int(window))}",
                "-o", f"ServerAliveInterval={ALIVE_INTERVAL_S}", "-o", "ServerAliveCountMax=3",
                "--", self.target.ssh_host]
        with open(self._master_log, "wb") as log:
            self.master = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log,
                                           stderr=log, start_new_session=True)
        deadline = time.monotonic() + window + 5
        while True:
            if self.master.poll() is not None:
                raise SshError(f"{self.target.text}: ssh could not connect (exit "
                               f"{self.master.returncode}): {self.master_log() or 'no output'}")
            if self.check():
                return
            if time.monotonic() > deadline:
                self.stop_master()
                raise SshError(f"{self.target.text}: no ssh connection within {window:g} s: "
                               f"{self.master_log() or 'ssh said nothing'}")
            time.sleep(0.05)

    def master_log(self) -> str:
        try:
            return self._master_log.read_text(errors="replace").strip()[-600:]
        except OSError:
            return ""

    def check(self) -> bool:
        """The master is running and its socket answers."""
        if self.master is None or self.master.poll() is not None:
            return False
        done = subprocess.run([*self._base(), "-O", "check", "--", self.target.ssh_host],
                              capture_output=True, timeout=15)
        return done.returncode == 0

    def reconnect(self, window: float) -> None:
        """A new master within `window` seconds (the board rebooting, sshd restarted, the
        network back); SshError with the last answer when it does not come."""
        deadline = time.monotonic() + window
        last = ""
        while True:
            left = deadline - time.monotonic()
            try:
                self.connect(max(1.0, min(10.0, left)))
                return
            except SshError as exc:
                last = str(exc)
            if time.monotonic() + 1 > deadline:
                raise SshError(f"{self.target.text} did not answer ssh again within {window:g} "
                               f"s; last: {last}")
            time.sleep(1.0)

    def stop_master(self) -> None:
        if self.master is not None and self.master.poll() is None:
            subprocess.run([*self._base(), "-O", "exit", "--", self.target.ssh_host],
                           capture_output=True, timeout=15)
            try:
                self.master.wait(5)
            except subprocess.TimeoutExpired:
                self.master.kill()
                self.master.wait()
        self.master = None

    def close(self) -> None:
        """Stop the master and remove the private directory (its socket and log)."""
        try:
            self.stop_master()
        finally:
            shutil.rmtree(self.dir, ignore_errors=True)

    # Commands ------------------------------------------------------------------------------
    def run(self, command: str, timeout: float = 60.0, stdin: bytes = b"") -> tuple[int, str]:
        """(exit code, stdout then stderr) of `command` on the board; SshError when the
        connection failed or the command outlived `timeout` (its ssh client is killed)."""
        try:
            done = subprocess.run(self.client_argv(command), input=stdin, capture_output=True,
                                  timeout=timeout)
        except subprocess.TimeoutExpired as exc:
            raise SshError(f"{self.target.text}: `{command[:80]}` did not end within "
                           f"{timeout:g} s") from exc
        except OSError as exc:
            raise SshError(f"{self.target.text}: cannot run ssh: {exc}") from exc
        text = (done.stdout + done.stderr).decode("utf-8", errors="replace")
        if done.returncode == SSH_FAILED and not self.check():
            raise SshError(f"{self.target.text}: the ssh connection is gone: "
                           f"{done.stderr.decode(errors='replace').strip()[-300:] or 'exit 255'}")
        return done.returncode, text

    def popen(self, command: str) -> subprocess.Popen:
        """`command` with its stdin, stdout and stderr as pipes (a fork server, a run)."""
        try:
            return subprocess.Popen(self.client_argv(command), stdin=subprocess.PIPE,
                                    stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        except OSError as exc:
            raise SshError(f"{self.target.text}: cannot run ssh: {exc}") from exc

    def push(self, root: PurePosixPath, files: list[tuple[Path, PurePosixPath, int]],
             timeout: float = 600.0) -> None:
        """Send (local file, remote path, mode) each, all below `root`, in one tar stream;
        each lands under a temporary name and is renamed in place, so a cut push never
        leaves a file with a right name and wrong bytes that a later sha256 would trust."""
        for _, remote, _ in files:
            if root not in remote.parents:
                raise DeviceError(f"refusing to push {remote}: not below {root}")
        stage = f".push-{os.getpid()}-{time.monotonic_ns()}"
        moves = "; ".join(
            f"mkdir -p {q(str(remote.parent))} && mv -f {q(f'{stage}/{i}')} {q(str(remote))}"
            for i, (_, remote, _) in enumerate(files))
        command = (f"cd {q(str(root))} && mkdir {q(stage)} && tar -x -f - -C {q(stage)} && "
                   f"{{ {moves}; }}; c=$?; rm -rf {q(stage)}; exit $c")
        proc = self.popen(command)
        try:
            with tarfile.open(fileobj=proc.stdin, mode="w|", format=tarfile.GNU_FORMAT) as tar:
                for i, (path, _, mode) in enumerate(files):
                    info = tar.gettarinfo(str(path), arcname=str(i))
                    info.mode, info.uid, info.gid, info.uname, info.gname = mode, 0, 0, "", ""
                    with open(path, "rb") as f:
                        tar.addfile(info, f)
            piped(proc.stdin).close()
            proc.stdin = None  # closed: communicate must not flush it
            _, err = proc.communicate(timeout=timeout)
        except (OSError, ValueError) as exc:
            proc.kill()
            proc.stdin = None
            _, err = proc.communicate()
            raise SshError(f"{self.target.text}: push cut: {exc}; "
                           f"{err.decode(errors='replace').strip()[-300:]}") from exc
        except subprocess.TimeoutExpired as exc:
            proc.kill()
            proc.communicate()
            raise SshError(f"{self.target.text}: push did not end within {timeout:g} s") from exc
        if proc.returncode != 0:
            said = err.decode(errors="replace").strip()[-300:]
            if proc.returncode == SSH_FAILED and not self.check():
                raise SshError(f"{self.target.text}: the ssh connection is gone during a "
                               f"push: {said}")
            raise DeviceError(f"{self.target.text}: push into {root} failed (exit "
                              f"{proc.returncode}): {said}")
