"""An Android device over adb (adbutils and the adb server), running scenarios natively.

Per session it creates a workspace under /data/local/tmp (unique per session and worker),
pushes the runner and the QNN libraries for the device's HTP arch once, and pushes each `.pte`
and reference tensor at most once, skipping any file whose sha256 the device already holds.
A run streams the runner's events back; a timeout kills the remote process by pid; a crash
collects the exit signal, the `logcat -d` tail and the newest tombstone. A device that drops
off mid-test fails that test and is re-acquired with a bounded wait; if it does not come back,
every later test fails at once with the reason, so the session never hangs.

Every shell command is built with `shlex.quote` around each argument: serials, paths and model
names are untrusted input.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shlex
import socket
import time
import uuid
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING

import adbutils

from harness.cache import file_sha256
from harness.config import known_socs
from harness.devices.base import Device, DeviceInfo
from harness.errors import ConfigError, DeviceError
from harness.result import RunOutput
from harness.scenario import Scenario

if TYPE_CHECKING:
    from harness.session import HilSession

WORKSPACE_BASE = PurePosixPath("/data/local/tmp")
# ro.board.platform code names, for devices whose ro.soc.model is empty.
PLATFORM_SOC = {"kalama": "SM8550", "pineapple": "SM8650", "sun": "SM8750"}
SHADOW_DIRS = ("/vendor/lib64", "/system/lib64", "/vendor/lib/rfsa/adsp", "/vendor/dsp/cdsp",
               "/system/lib/rfsa/adsp", "/odm/lib64")
FASTRPC_NODES = ("/dev/fastrpc-cdsp", "/dev/fastrpc-cdsp-secure", "/dev/adsprpc-smd")
REACQUIRE_S = 30.0
q = shlex.quote


def adb_server_address(server: str | None = None) -> tuple[str, int]:
    """(host, port) of the adb server: --adb-server HOST:PORT, else ANDROID_ADB_SERVER_ADDRESS /
    ANDROID_ADB_SERVER_PORT, else 127.0.0.1:5037. A malformed value is a ConfigError naming
    where it came from, so a typo stops the session at start-up, not in a socket call."""
    if server:
        host, _, port = server.rpartition(":")
        where = "--adb-server"
        if not host or not port.isdigit():
            raise ConfigError(f"--adb-server must be HOST:PORT, got {server!r}")
    else:
        host = os.environ.get("ANDROID_ADB_SERVER_ADDRESS", "127.0.0.1")
        port = os.environ.get("ANDROID_ADB_SERVER_PORT", "5037")
        where = "ANDROID_ADB_SERVER_PORT"
        if not port.isdigit():
            raise ConfigError(f"{where} must be a port number, got {port!r}")
    if not 1 <= int(port) <= 65535:
        raise ConfigError(f"{where}: port {port} is out of range (1-65535), got {server or port!r}")
    return host, int(port)


def adb_client(server: str | None = None) -> adbutils.AdbClient:
    """The adb server to talk to (see adb_server_address)."""
    host, port = adb_server_address(server)
    return adbutils.AdbClient(host=host, port=port)


@dataclasses.dataclass
class PushStats:
    pushed: int = 0
    skipped: int = 0

    def as_dict(self) -> dict[str, int]:
        return {"pushed": self.pushed, "skipped": self.skipped}


class AdbDevice(Device):
    def __init__(self, client: adbutils.AdbClient, serial: str, session: "HilSession") -> None:
        self.client = client
        self.serial = serial
        self.session = session
        self.adb = client.device(serial)
        self.lost: str | None = None
        self.reacquire_s = REACQUIRE_S
        self.stats = PushStats()
        self._remote_sha: dict[str, str] = {}  # remote path -> sha256 known to be there
        self.info = self._identify()
        worker = session.options.worker
        self.workspace = PurePosixPath(session.options.device_workspace) \
            if session.options.device_workspace else \
            WORKSPACE_BASE / f"executorch-hil-{uuid.uuid4().hex[:8]}-{worker}"
        self.runner_path = self.workspace / "executorch_hil_runner"
        self.preflight_report: dict = {}

    # Connecting and identifying ------------------------------------------------------------
    @classmethod
    def connect(cls, serial: str, session: "HilSession") -> "AdbDevice":
        client = adb_client(session.options.adb_server)
        _wait_online(client, serial, timeout=10.0)
        device = cls(client, serial, session)
        device.setup()
        return device

    def sh(self, command: str, timeout: float = 60.0) -> tuple[int, str]:
        """Run a shell command (already quoted) and return (exit code, stdout+stderr)."""
        self._check_not_lost()
        try:
            ret = self.adb.shell2(command, timeout=timeout, rstrip=False)
        except (adbutils.AdbError, OSError) as exc:
            raise self._offline(f"`{command[:80]}`", exc) from exc
        return ret.returncode, ret.output

    def command(self, argv: list[str], timeout: float = 60.0) -> tuple[int, str]:
        """Run in a directory at the same depth as a run's, so `scratch_dir()` resolves alike."""
        cwd = self.workspace / "runs" / ".command"
        return self.sh(f"mkdir -p {q(str(cwd))} && cd {q(str(cwd))} && "
                       + " ".join(q(a) for a in argv), timeout)

    def scratch_dir(self) -> str:
        self.sh(f"mkdir -p {q(str(self.workspace / 'scratch'))}")
        return "../../scratch"

    def prop(self, name: str) -> str:
        return self.sh(f"getprop {q(name)}")[1].strip()

    def _identify(self) -> DeviceInfo:
        soc = self.prop("ro.soc.model") or PLATFORM_SOC.get(self.prop("ro.board.platform"), "")
        if not soc:
            raise DeviceError(f"{self.serial}: neither ro.soc.model nor a known ro.board.platform "
                              f"({self.prop('ro.board.platform')!r}) names the SoC; pass --soc")
        soc = self.session.options.device_socs.get(self.serial) or self.session.options.soc or soc
        if soc not in known_socs() and self.session.options.device_config is None:
            raise DeviceError(f"{self.serial}: SoC {soc} has no device config. Known SoCs: "
                              f"{', '.join(known_socs())}. Add device_configs/socs/{soc}.yaml "
                              "or pass --device-config.")
        return DeviceInfo(self.serial, "adb", soc, self.prop("ro.product.cpu.abi"),
                          self.prop("ro.build.version.release"),
                          {"model": self.prop("ro.product.model").replace(" ", "_")})

    # Workspace and pushes ------------------------------------------------------------------
    def setup(self) -> None:
        code, out = self.sh(f"mkdir -p {q(str(self.workspace / 'files'))} {q(str(self.workspace / 'runs'))}")
        if code != 0:
            raise DeviceError(f"{self.serial}: cannot create workspace {self.workspace}: {out.strip()}")
        # Always the native runner: a phone has no Python.
        if self.session.runner_kind == "python":
            self.session.notices.append("adb devices always use the native runner; "
                                        "--runner=python applies to the simulator only")
        self.runner_path = self.workspace / "executorch_hil_runner"
        self.push_files({self._runner_binary(): self.runner_path}, mode=0o755)
        self.push_files(self._qnn_libraries())

    def _runner_binary(self) -> Path:
        if self.info.abi == "x86_64":
            choice = self.session.runner_for("native")
            if choice.kind == "native" and choice.binary:
                return choice.binary
            raise DeviceError(f"{self.serial}: the native runner is needed on adb devices and "
                              f"could not be built here ({choice.notice})")
        override = os.environ.get("EXECUTORCH_HIL_ANDROID_RUNNER")
        if override and Path(override).is_file():
            return Path(override)
        raise DeviceError(
            f"{self.serial} is {self.info.abi}: build the Android runner with `python -m harness "
            "build-runner --android --ndk <ndk> --executorch-prefix <prefix>` and set "
            "EXECUTORCH_HIL_ANDROID_RUNNER to the binary it prints")

    def _qnn_libraries(self) -> dict[Path, PurePosixPath]:
        """QNN libraries for this device: the simulator's for x86_64, else the SDK's for the arch."""
        ws = self.workspace
        if self.info.abi == "x86_64":
            lib = self.session.sdk.lib_dir
            return {lib / n: ws / n for n in ("libQnnHtp.so", "libQnnSystem.so")}
        root = os.environ.get("QNN_SDK_ROOT")
        if not root:
            raise DeviceError("set QNN_SDK_ROOT to a QAIRT SDK: its lib/aarch64-android and "
                              "lib/hexagon-v<arch> libraries are pushed to the device")
        arch = self.session.soc_config.htp_arch
        android = Path(root) / "lib" / "aarch64-android"
        files = {android / "libQnnHtp.so": ws / "libQnnHtp.so",
                 android / "libQnnSystem.so": ws / "libQnnSystem.so",
                 android / f"libQnnHtpV{arch}Stub.so": ws / f"libQnnHtpV{arch}Stub.so",
                 Path(root) / "lib" / f"hexagon-v{arch}" / "unsigned" / f"libQnnHtpV{arch}Skel.so":
                     ws / f"libQnnHtpV{arch}Skel.so"}
        missing = [str(p) for p in files if not p.is_file()]
        if missing:
            raise DeviceError(f"QNN SDK at {root} lacks {', '.join(missing)} (HTP v{arch})")
        return files

    def push_files(self, files: dict[Path, PurePosixPath], mode: int = 0o644) -> PushStats:
        """Push each file unless the device already holds the same bytes (by sha256)."""
        stats = PushStats()
        local = {remote: file_sha256(path.resolve()) for path, remote in files.items()}
        unknown = [str(r) for r, sha in local.items() if self._remote_sha.get(str(r)) != sha]
        if unknown:
            self._remote_sha.update(self._device_sha256(unknown))
        for path, remote in files.items():
            if self._remote_sha.get(str(remote)) == local[remote]:
                stats.skipped += 1
                continue
            try:
                self.adb.sync.push(path.resolve(), str(remote), mode=mode)
            except (adbutils.AdbError, OSError) as exc:
                raise self._offline(f"push of {path.name}", exc) from exc
            self._remote_sha[str(remote)] = local[remote]
            stats.pushed += 1
        self.stats.pushed += stats.pushed
        self.stats.skipped += stats.skipped
        return stats

    def _device_sha256(self, remotes: list[str]) -> dict[str, str]:
        """sha256 of each remote file the device has; matched by order, not by the printed
        name, which a device may print differently (a symlinked or remapped path)."""
        parts = [f"sha256sum {q(r)} 2>/dev/null; echo @" for r in remotes]
        _, out = self.sh("; ".join(parts))
        found = {}
        for remote, chunk in zip(remotes, out.split("@\n")):
            sha = chunk.strip().split(" ")[0] if chunk.strip() else ""
            if len(sha) == 64:
                found[remote] = sha
        return found

    # Preflight -----------------------------------------------------------------------------
    def preflight(self) -> list[str]:
        problems: list[str] = []
        report: dict = {"serial": self.serial, "soc": self.info.soc, "abi": self.info.abi,
                        "workspace": str(self.workspace), "pushes": self.stats.as_dict()}
        libs = self._qnn_libraries()
        shas = self._device_sha256([str(r) for r in libs.values()])
        report["qnn_libraries"] = {}
        for path, remote in libs.items():
            want, got = file_sha256(path.resolve()), shas.get(str(remote))
            report["qnn_libraries"][str(remote)] = {"sha256": got, "matches_sdk": want == got}
            if want != got:
                problems.append(f"{remote} on the device does not match {path} (sha256 {got} != {want})")
        _, out = self.sh(" ".join(["ls", "-1"] + [q(f"{d}/") + "libQnnHtp*" for d in SHADOW_DIRS])
                         + " 2>/dev/null")
        shadows = [l.strip() for l in out.splitlines() if l.strip().startswith("/")]
        report["shadowing_libraries"] = shadows
        if self.info.abi == "x86_64":
            report["fastrpc"] = "not needed: x86_64 device runs the HTP simulator"
        else:
            _, out = self.sh("ls " + " ".join(q(n) for n in FASTRPC_NODES) + " 2>/dev/null")
            nodes = [l.strip() for l in out.splitlines() if l.strip()]
            report["fastrpc"] = nodes
            if not nodes:
                problems.append(f"no fastrpc device node ({', '.join(FASTRPC_NODES)}): the HTP "
                                "cannot be reached from this shell")
        _, out = self.sh("grep MemAvailable /proc/meminfo")
        report["mem_available_kb"] = int(out.split()[1]) if len(out.split()) > 1 else None
        report["problems"] = problems
        self.preflight_report = report
        artifacts = self.session.options.artifacts_dir
        artifacts.mkdir(parents=True, exist_ok=True)
        (artifacts / f"preflight-{_safe(self.serial)}.json").write_text(json.dumps(report, indent=1))
        self.info.details.update({"mem_available_kb": report["mem_available_kb"],
                                  "shadowing_libQnnHtp": len(shadows) and ",".join(shadows) or "none",
                                  "workspace": str(self.workspace)})
        return problems

    # Running -------------------------------------------------------------------------------
    def run(self, scenario: Scenario, artifacts: Path, timeout: float, runner: str) -> RunOutput:
        self._check_not_lost()
        files = {p: self.workspace / "files" / f"{file_sha256(p)[:16]}-{p.name}" for p in scenario.files()}
        before = dataclasses.replace(self.stats)
        self.push_files(files)
        artifacts.mkdir(parents=True, exist_ok=True)
        local_scenario = scenario.write(
            artifacts / "scenario.json", lambda p: str(PurePosixPath("../..") / "files" / files[p].name))
        # Named by content, like the files it uses: the same scenario in a later session on a
        # kept workspace finds its directory and scenario file already there.
        run_dir = self.workspace / "runs" / f"{file_sha256(local_scenario)[:16]}-{scenario.name}"
        self.sh(f"mkdir -p {q(str(run_dir))}")
        self.push_files({local_scenario: run_dir / "scenario.json"})
        pushes = {"pushed": self.stats.pushed - before.pushed,
                  "skipped": self.stats.skipped - before.skipped,
                  "session_pushed": self.stats.pushed, "session_skipped": self.stats.skipped}
        command = self._run_command(run_dir, runner)
        stdout, timed_out, pid = self._stream(command, timeout)
        exit_line = [l for l in stdout.splitlines() if l.startswith("HARNESS_EXIT ")]
        if timed_out:
            if pid:
                self.sh(f"kill -9 {q(pid)}")
            returncode = None
        elif not exit_line:
            if not self._online():
                raise self._offline(f"scenario {scenario.name}", None)
            returncode = None
        else:
            code = int(exit_line[-1].split()[1])
            returncode = -(code - 128) if code > 128 else code
        _, stderr = self.sh(f"cat {q(str(run_dir / 'stderr.txt'))} 2>/dev/null")
        _, trace = self.sh(f"cat {q(str(run_dir / 'qnn_trace.txt'))} 2>/dev/null")
        logs = self._crash_logs() if returncode is None or returncode < 0 else {}
        return RunOutput(returncode, stdout, stderr, trace, timed_out, "native", logs, pushes)

    def _run_command(self, run_dir: PurePosixPath, runner: str) -> str:
        ws = str(self.workspace)
        adsp = ";".join([ws, "/vendor/lib/rfsa/adsp", "/vendor/dsp/cdsp", "/system/lib/rfsa/adsp", "/dsp"])
        program = q(str(self.runner_path))
        env = (f"LD_LIBRARY_PATH={q(ws)}:\"$LD_LIBRARY_PATH\" ADSP_LIBRARY_PATH={q(adsp)} "
               f"HARNESS_QNN_TRACE={q(str(run_dir / 'qnn_trace.txt'))}")
        stale = " ".join(q(str(run_dir / n)) for n in ("qnn_trace.txt", "stderr.txt"))
        return (f"cd {q(str(run_dir))} && rm -f {stale} && {{ {env} {program} scenario.json "
                f"2>{q(str(run_dir / 'stderr.txt'))} & pid=$!; echo HARNESS_PID $pid; "
                f"wait $pid; echo HARNESS_EXIT $?; }}")

    def _stream(self, command: str, timeout: float) -> tuple[str, bool, str]:
        """Read the command's stdout until it closes or `timeout` passes."""
        try:
            conn = self.adb.shell(command, stream=True, timeout=None)
        except (adbutils.AdbError, OSError) as exc:
            raise self._offline("starting the runner", exc) from exc
        chunks: list[bytes] = []
        deadline = time.monotonic() + timeout
        timed_out = False
        try:
            while True:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    timed_out = True
                    break
                conn.conn.settimeout(min(remaining, 5.0))
                try:
                    data = conn.conn.recv(65536)
                except socket.timeout:
                    continue
                except OSError:
                    break
                if not data:
                    break
                chunks.append(data)
        finally:
            conn.close()
        text = b"".join(chunks).decode("utf-8", errors="replace")
        pid = next((l.split()[1] for l in text.splitlines()
                    if l.startswith("HARNESS_PID ") and len(l.split()) > 1), "")
        return text, timed_out, pid

    def _crash_logs(self) -> dict[str, str]:
        logs = {"logcat": self.sh("logcat -d -t 300 2>&1")[1]}
        _, newest = self.sh("ls -t /data/tombstones 2>/dev/null | head -n 1")
        if newest.strip():
            logs["tombstone"] = self.sh(f"cat {q('/data/tombstones/' + newest.strip())} 2>&1")[1]
        return logs

    # Offline handling ----------------------------------------------------------------------
    def _online(self) -> bool:
        try:
            return self.client.device(self.serial).get_state() == "device"
        except (adbutils.AdbError, OSError):
            return False

    def _offline(self, what: str, exc: Exception | None) -> DeviceError:
        """The device dropped: try to re-acquire it (bounded), and fail this test either way."""
        why = f" ({exc})" if exc else ""
        if self._online():
            return DeviceError(f"{self.serial}: {what} failed{why}")
        back = _reacquire(self.client, self.serial, self.reacquire_s)
        if not back:
            self.lost = (f"{self.serial} went offline during {what}{why} and did not come back "
                         f"within {self.reacquire_s:.0f} s")
            return DeviceError(self.lost)
        return DeviceError(f"{self.serial} went offline during {what}{why}; it is back, the "
                           "session goes on")

    def _check_not_lost(self) -> None:
        if self.lost:
            raise DeviceError(self.lost)

    def summary(self) -> list[str]:
        return [f"{self.serial}: pushes this session: {self.stats.pushed} pushed, "
                f"{self.stats.skipped} skipped (sha256 already on the device); workspace "
                f"{self.workspace}" + (" (kept)" if self.session.options.keep_workspace else "")]

    def close(self) -> None:
        if self.lost or self.session.options.keep_workspace:
            return
        try:
            self.sh(f"rm -rf {q(str(self.workspace))}", timeout=30)
        except DeviceError:
            pass


def _wait_online(client: adbutils.AdbClient, serial: str, timeout: float) -> None:
    if ":" in serial:
        try:
            answer = client.connect(serial, timeout=timeout)
        except (adbutils.AdbError, OSError) as exc:
            answer = str(exc)
        if "cannot" in answer or "failed" in answer or "refused" in answer:
            raise DeviceError(f"device {serial} is not online: adb connect says {answer.strip()!r} "
                              f"(adb server {client.host}:{client.port})")
    deadline = time.monotonic() + timeout
    state = "unknown"
    while time.monotonic() < deadline:
        try:
            state = client.device(serial).get_state()
            if state == "device":
                return
        except (adbutils.AdbError, OSError) as exc:
            state = str(exc)
        time.sleep(0.5)
    raise DeviceError(f"device {serial} is not online ({state}); check `adb devices` "
                      f"(adb server {client.host}:{client.port})")


def _reacquire(client: adbutils.AdbClient, serial: str, timeout: float) -> bool:
    try:
        _wait_online(client, serial, timeout)
        return True
    except DeviceError:
        return False


def _safe(text: str) -> str:
    return "".join(c if c.isalnum() or c in "._-" else "_" for c in text)
