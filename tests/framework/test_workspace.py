"""A session deletes only what it created on the device (harness/devices/workspace.py), against
the loopback device through the real adb server.

`--device-workspace=/sdcard` (or `/`, a relative path, a path that climbs out with `..`, a
name with `;`, `:`, whitespace or a shell metacharacter) is a usage error before the device is
touched, and every file on the phone stays where it was; a
workspace directory holding the user's files is refused at set-up and left as it was; an empty
directory of the user's is used and kept; a created workspace is removed, but only the
harness's entries when the user put files in it meanwhile.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from harness.devices.workspace import MARKER, check_workspace
from harness.errors import ConfigError, DeviceError
from harness.session import HilSession

from adb_options import adb_options
from phones import phone  # noqa: F401 -- the module's loopback phone fixture

REPO = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.skipif(shutil.which("adb") is None,
                                reason="the adb client/server (Debian package adb) is not installed")


def on_phone(phone, path: str) -> Path:
    return phone.sandbox / path.lstrip("/")


def user_files(phone) -> dict[Path, bytes]:
    """A user's photos on the phone's /sdcard, and a file of theirs in /data/local/tmp."""
    files = {on_phone(phone, "/sdcard/DCIM/Camera/IMG_0001.jpg"): b"\xff\xd8 a photo",
             on_phone(phone, "/sdcard/Download/notes.txt"): b"notes",
             on_phone(phone, "/data/local/tmp/mine/keep.bin"): b"user data"}
    for path, data in files.items():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    return files


def assert_untouched(files: dict[Path, bytes]) -> None:
    for path, data in files.items():
        assert path.read_bytes() == data, f"{path} was changed or removed"


@pytest.mark.parametrize("workspace", ["/sdcard", "/", "/sdcard/", "data/local/tmp/x",
                                       "/data/local/tmp", "/data/local/tmp/../../sdcard",
                                       "/data/local/tmp/./x", "/data/local/tmp//x",
                                       "/data/local/tmp/.executorch-hil-lease",
                                       "/data/local/tmpfoo"])
def test_a_workspace_outside_the_scratch_area_is_refused(workspace):
    with pytest.raises(ConfigError, match="--device-workspace"):
        check_workspace(workspace, reserved=[".executorch-hil-lease"])


@pytest.mark.parametrize("workspace", ["/data/local/tmp/a;b", "/data/local/tmp/a:b",
                                       "/data/local/tmp/a b", "/data/local/tmp/a\tb",
                                       "/data/local/tmp/a\nb", "/data/local/tmp/$(id)",
                                       "/data/local/tmp/`id`", "/data/local/tmp/a|b",
                                       "/data/local/tmp/a&b", "/data/local/tmp/a'b",
                                       '/data/local/tmp/a"b', "/data/local/tmp/a\\b",
                                       "/data/local/tmp/a*", "/data/local/tmp/a>b",
                                       "/data/local/tmp/caf\u00e9"])
def test_a_workspace_with_a_separator_or_shell_metacharacter_is_refused(workspace):
    """`;` and `:` split the runner's library paths (ADSP_LIBRARY_PATH, LD_LIBRARY_PATH), so a
    workspace holding one made every QNN test an ERROR; whitespace and shell metacharacters
    are refused with them."""
    with pytest.raises(ConfigError, match="cannot be in a device workspace"):
        check_workspace(workspace)


def test_an_ssh_workspace_with_a_separator_is_a_usage_error_at_start_up(tmp_path):
    from harness.devices.kinds import OpenContext
    from harness.devices.ssh import SshKind

    for workspace in ("/home/u/.executorch-hil/a;b", "/home/u/.executorch-hil/a:b",
                      "/home/u/.executorch-hil/a b"):
        options = adb_options(tmp_path, "ssh://board", device_workspace=workspace)
        context = OpenContext(options, notice=print, sdk=None, simulator_runner=None)
        with pytest.raises(ConfigError, match="cannot be in a device workspace"):
            SshKind.check_start_up(["ssh://board"], context)


def test_a_workspace_below_the_scratch_area_is_accepted():
    assert str(check_workspace("/data/local/tmp/executorch-hil-ci")) == \
        "/data/local/tmp/executorch-hil-ci"
    assert str(check_workspace("/data/local/tmp/hil_1.5+qnn@2,a=b")) == \
        "/data/local/tmp/hil_1.5+qnn@2,a=b"
    assert str(check_workspace("/data/local/tmp/a/b/")) == "/data/local/tmp/a/b"


@pytest.mark.parametrize("workspace", ["/sdcard", "/", "sdcard", "/data/local/tmp/a;b",
                                       "/data/local/tmp/a:b"])
def test_pytest_with_a_workspace_outside_the_scratch_area_is_a_usage_error_and_deletes_nothing(
        phone, tmp_path, workspace):
    files = user_files(phone)
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "tests/hil/test_isolation.py", "-k", "s4 and fp16",
         f"--device={phone.serial}", f"--device-workspace={workspace}",
         f"--artifacts-dir={tmp_path / 'artifacts'}", "-p", "no:cacheprovider"],
        cwd=REPO, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 4, proc.stdout + proc.stderr
    assert "outside the device's scratch area" in proc.stderr or \
        "absolute path" in proc.stderr or \
        "cannot be in a device workspace" in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr
    assert_untouched(files)


def marker(directory: Path, *keys: str) -> list[str]:
    """The marker's lines of `keys` (all `created`/`parents` lines by default)."""
    keys = keys or ("created", "parents")
    return [l for l in (directory / MARKER).read_text().splitlines()
            if l.split("=", 1)[0] in keys]


def session(tmp_path: Path, phone, workspace: str) -> HilSession:
    return HilSession(adb_options(tmp_path, phone.serial, device_workspace=workspace,
                                  session_id="ws-test"))


def test_a_directory_holding_the_users_files_is_refused_and_left_as_it_was(phone, tmp_path):
    files = user_files(phone)
    before = sorted(p.name for p in on_phone(phone, "/data/local/tmp/mine").iterdir())
    s = session(tmp_path, phone, "/data/local/tmp/mine")
    with pytest.raises(DeviceError, match="holds files the harness did not create"):
        s.device  # noqa: B018 -- opening the device is what raises
    assert sorted(p.name for p in on_phone(phone, "/data/local/tmp/mine").iterdir()) == before
    assert_untouched(files)
    s.close()


def test_a_created_workspace_is_removed_but_what_the_user_added_stays(phone, tmp_path):
    s = session(tmp_path, phone, "/data/local/tmp/hil-created")
    device = s.device
    root = on_phone(phone, "/data/local/tmp/hil-created")
    assert marker(root) == ["created=1"]
    assert (root / "runs").is_dir() and (root / "libQnnHtp.so").exists()
    (root / "theirs.txt").write_text("put there during the session")
    device.close()
    assert sorted(p.name for p in root.iterdir()) == ["theirs.txt"]
    assert any("kept" in n and "theirs.txt" in n for n in s.notices), s.notices
    shutil.rmtree(root)

    again = session(tmp_path, phone, "/data/local/tmp/hil-created/deeper")
    again.device.close()
    assert not root.exists(), "the parent the harness created was left behind"


def test_the_parents_a_nested_workspace_created_are_removed_and_no_others(phone, tmp_path):
    """`--device-workspace /data/local/tmp/users-dir/a/b/ws` where only users-dir existed: the
    harness creates a, b and ws and removes exactly those at the end; the user's users-dir
    (and its file) stays. A parent the user put a file in meanwhile stays too, with the file."""
    files = user_files(phone)
    users = on_phone(phone, "/data/local/tmp/mine")
    s = session(tmp_path, phone, "/data/local/tmp/mine/a/b/ws")
    device = s.device
    assert marker(users / "a/b/ws") == ["created=1", "parents=2"]
    device.close()
    assert not (users / "a").exists(), list(users.rglob("*"))
    assert sorted(p.name for p in users.iterdir()) == ["keep.bin"]
    assert_untouched(files)

    s = session(tmp_path, phone, "/data/local/tmp/mine/a/b/ws")
    device = s.device
    (users / "a" / "theirs.txt").write_text("put there during the session")
    device.close()
    assert sorted(p.name for p in (users / "a").iterdir()) == ["theirs.txt"]
    assert_untouched(files)
    shutil.rmtree(users / "a")

    # A parent that existed before (here an empty one of the user's) is never removed.
    (users / "empty-parent").mkdir()
    s = session(tmp_path, phone, "/data/local/tmp/mine/empty-parent/ws")
    device = s.device
    assert marker(users / "empty-parent/ws") == ["created=1"]
    device.close()
    assert (users / "empty-parent").is_dir() and not list((users / "empty-parent").iterdir())


def test_the_marker_names_its_owner_and_entries_and_a_hand_edit_removes_nothing_else(
        phone, tmp_path):
    """The marker names the session that took the workspace and what it pushes there (so a
    leftover can be reclaimed without guessing); an entry edited into it by hand that is not a
    plain name (`*`, `../x`) removes nothing."""
    from harness.devices.lease import process_token

    files = user_files(phone)
    s = session(tmp_path, phone, "/data/local/tmp/hil-marked")
    device = s.device
    root = on_phone(phone, "/data/local/tmp/hil-marked")
    fields = dict(l.split("=", 1) for l in (root / MARKER).read_text().splitlines())
    assert fields["token"] == process_token() and fields["session"] == "ws-test"
    assert fields["pid"].isdigit() and fields["pidstart"].isdigit() and "keep" not in fields
    entries = marker(root, "entry")
    assert "entry=executorch_hil_runner" in entries and "entry=libQnnHtp.so" in entries
    with (root / MARKER).open("a") as f:
        f.write("entry=*\nentry=../mine\nentry=..\n")
    (root / "theirs.txt").write_text("the user's")
    device.close()
    assert sorted(p.name for p in root.iterdir()) == ["theirs.txt"]
    assert_untouched(files)
    shutil.rmtree(root)


def test_a_reused_workspace_keeps_how_it_was_made_and_what_was_pushed(phone, tmp_path):
    """A kept workspace taken again by a later session: its marker still says the harness
    created it and its parent, and the entries named before stay named; the later session
    (not keeping it) removes all of that."""
    first = HilSession(adb_options(tmp_path, phone.serial, session_id="first", keep_workspace=True,
                                   device_workspace="/data/local/tmp/reuse-a/ws"))
    first.device.close()
    root = on_phone(phone, "/data/local/tmp/reuse-a/ws")
    assert marker(root, "keep") == ["keep=1"]
    with (root / MARKER).open("a") as f:
        f.write("entry=extra-lib.so\n")  # pushed by the first session's version, not this one's
    (root / "extra-lib.so").write_bytes(b"lib")
    again = session(tmp_path, phone, "/data/local/tmp/reuse-a/ws")
    device = again.device
    assert marker(root) == ["created=1", "parents=1"]
    assert marker(root, "keep") == [] and marker(root, "session") == ["session=ws-test"]
    assert "entry=extra-lib.so" in marker(root, "entry")
    device.close()
    assert not on_phone(phone, "/data/local/tmp/reuse-a").exists()


def test_an_empty_directory_of_the_users_is_used_and_kept(phone, tmp_path):
    root = on_phone(phone, "/data/local/tmp/hil-empty")
    root.mkdir(parents=True)
    s = session(tmp_path, phone, "/data/local/tmp/hil-empty")
    device = s.device
    assert marker(root) == ["created=0"]
    device.close()
    assert root.is_dir() and list(root.iterdir()) == []


def test_a_workspace_whose_marker_is_gone_is_kept_whole(phone, tmp_path):
    s = session(tmp_path, phone, "/data/local/tmp/hil-nomarker")
    device = s.device
    root = on_phone(phone, "/data/local/tmp/hil-nomarker")
    (root / MARKER).unlink()
    device.close()
    assert (root / "runs").is_dir()
    assert any("marker is gone" in n for n in s.notices), s.notices
    shutil.rmtree(root)


def test_a_second_ctrl_c_during_cleanup_finishes_the_cleanup(phone, tmp_path, monkeypatch,
                                                             capfd):
    """The second Ctrl-C of an impatient user lands in the workspace removal: the cleanup is
    finished all the same (it left the session's run directories on the device), and the
    signal handlers are the session's again after it."""
    import os
    import signal

    from harness.devices.lease import LEASE_DIR
    from harness.devices.shell_device import ShellDevice

    s = session(tmp_path, phone, "/data/local/tmp/hil-interrupted")
    device = s.device
    root = on_phone(phone, "/data/local/tmp/hil-interrupted")
    (root / "runs" / "run-1").mkdir(parents=True)
    original = ShellDevice._remove_workspace

    def interrupted(self) -> None:
        os.kill(os.getpid(), signal.SIGINT)  # Ctrl-C, as the removal starts
        os.kill(os.getpid(), signal.SIGTERM)  # and CI's cancel on top of it
        original(self)

    monkeypatch.setattr(ShellDevice, "_remove_workspace", interrupted)
    before = signal.getsignal(signal.SIGINT)
    try:
        s.close()
    except KeyboardInterrupt:
        pytest.fail("the interrupt stopped the cleanup half way")
    assert not root.exists(), list(root.rglob("*"))
    assert not on_phone(phone, LEASE_DIR).exists()
    assert signal.getsignal(signal.SIGINT) is before
    assert "interrupted during the cleanup: finishing it first" in capfd.readouterr().err
    assert not device.lost


SIGTERM_PLUGIN = '''
import os, pathlib, time
import pytest

@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item):
    """Once the test's device is set up: a process in its workspace's runs/ (as a runner is),
    then wait for the SIGTERM the test sends."""
    device = item._request.getfixturevalue("hil_device")
    runs = str(device.workspace) + "/runs/sigterm-run"
    code, out = device.sh(f"mkdir -p {runs} && cd {runs} && "
                          "{ setsid sleep 300 >/dev/null 2>&1 & echo PID $!; }")
    pid = next(l.split()[1] for l in out.splitlines() if l.startswith("PID "))
    flag = pathlib.Path(os.environ["SIGTERM_FLAG"])
    flag.with_suffix(".tmp").write_text(f"{pid} {device.workspace}")
    flag.with_suffix(".tmp").rename(flag)
    time.sleep(300)
    yield
'''


def test_sigterm_ends_the_session_as_ctrl_c_does(phone, tmp_path):
    """CI cancels a job with SIGTERM: the run is interrupted like Ctrl-C, so its runners are
    killed, its lease released and its workspace removed (SIGTERM left them all behind)."""
    import os
    import signal
    import time

    from harness.devices.lease import LEASE_DIR
    from processes import running, wait_gone

    (tmp_path / "sigterm_plugin.py").write_text(SIGTERM_PLUGIN)
    flag = tmp_path / "started.txt"
    env = {**os.environ, "SIGTERM_FLAG": str(flag),
           "PYTHONPATH": os.pathsep.join(filter(None, [str(tmp_path), str(REPO),
                                                        os.environ.get("PYTHONPATH")]))}
    proc = subprocess.Popen(
        [sys.executable, "-m", "pytest", "tests/hil/test_isolation.py", "-k", "s4 and fp16",
         f"--device={phone.serial}", f"--artifacts-dir={tmp_path / 'artifacts'}",
         "-p", "sigterm_plugin", "-p", "no:cacheprovider", "-q"],
        cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        end = time.monotonic() + 300
        while not flag.exists():
            assert proc.poll() is None, proc.stdout.read()
            assert time.monotonic() < end, "the test never started"
            time.sleep(0.1)
        pid, workspace = flag.read_text().split()
        assert running(int(pid))
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode != 0, out
    assert "KeyboardInterrupt" in out or "Interrupted" in out, out
    assert wait_gone(int(pid)), "the runner outlived the SIGTERM"
    assert not on_phone(phone, LEASE_DIR).exists(), "the lease outlived the SIGTERM"
    assert not on_phone(phone, workspace).exists(), "the workspace outlived the SIGTERM"


@pytest.fixture
def full_runs(phone, tmp_path):
    """A session whose workspace's runs/ lies on a 64 kB filesystem that is full (a tmpfs
    mounted there after set-up, then filled): what a phone whose storage fills looks like to
    the harness. Mounting needs CAP_SYS_ADMIN; where the host refuses, the test says so."""
    s = HilSession(adb_options(tmp_path, phone.serial, session_id="ws-full"))
    device = s.device
    runs = on_phone(phone, str(device.workspace / "runs"))
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(runs)],
                             capture_output=True, text=True)
    if mounted.returncode != 0:
        device.close()
        pytest.skip(f"cannot mount a small filesystem here: {mounted.stderr.strip()}")
    subprocess.run(["dd", "if=/dev/zero", f"of={runs}/filler", "bs=4k", "count=32"],
                   capture_output=True)
    try:
        yield device
    finally:
        subprocess.run(["umount", "-l", str(runs)], capture_output=True)
        device.close()


@pytest.mark.parametrize("isolation", ["fork", "process"])
def test_a_run_on_a_full_device_names_enospc(full_runs, isolation, tmp_path, compiled_model):
    from harness.devices.shell_device import RunInterrupted
    from harness.drive.driver import ScenarioDriver
    from harness.scenario import Scenario

    full_runs.isolation = isolation
    model = compiled_model("linear_relu")
    scenario = Scenario(f"full-{isolation}").load_module("A", model).execute("A", "forward")
    with pytest.raises(RunInterrupted) as exc:
        ScenarioDriver(full_runs, tmp_path / "a", 120).run(scenario, allow_crash=True)
    assert "is full (ENOSPC: 0 kB free of 64 kB)" in str(exc.value), exc.value
    assert "ENOSPC" in exc.value.output.notes[0]


# Leftovers of killed sessions ---------------------------------------------------------------------

KILLED_SESSION = '''
import os, sys
sys.path.insert(0, sys.argv[3])
from adb_options import adb_options
from pathlib import Path
from harness.session import HilSession

s = HilSession(adb_options(Path(sys.argv[2]), sys.argv[1], session_id="killed", worker="gw0"))
print(s.device.workspace, flush=True)
os.kill(os.getpid(), 9)
'''


def killed_session(phone, tmp_path: Path) -> str:
    """A session that set its device up and was then killed (SIGKILL): its workspace."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [
        str(REPO), os.environ.get("PYTHONPATH")]))}
    proc = subprocess.run([sys.executable, "-c", KILLED_SESSION, phone.serial,
                           str(tmp_path / "killed"), str(Path(__file__).parent)],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == -9, proc.stdout + proc.stderr
    workspace = proc.stdout.strip().splitlines()[-1]
    assert on_phone(phone, workspace).is_dir()
    return workspace


def leftover(phone, path: str, **fields) -> Path:
    """A workspace as a session of `fields` would have left it: the marker, a runner, a
    library, a run directory."""
    root = on_phone(phone, path)
    (root / "runs" / "abc-s1").mkdir(parents=True)
    (root / "executorch_hil_runner").write_bytes(b"runner")
    (root / "libQnnHtp.so").write_bytes(b"lib")
    lines = ["created=1", *(f"{k}={v}" for k, v in fields.items())]
    if "token" in fields:
        lines += ["entry=executorch_hil_runner", "entry=libQnnHtp.so"]
    (root / MARKER).write_text("".join(f"{l}\n" for l in lines))
    return root


def this_host(pid: int, **fields: str) -> dict[str, str]:
    """A marker's owner fields for process `pid` of this host."""
    from harness.devices import lease

    return {"token": f"t-{pid}-{fields.get('session', 'x')}",
            "host": lease.clean(socket.gethostname()),
            "hostboot": lease.clean(lease.host_boot_id()), "pid": str(pid),
            "pidstart": lease.pid_start(pid) or "-", "session": "s", "worker": "gw1", **fields}


def test_a_killed_sessions_workspace_is_reclaimed_with_a_notice_and_a_live_ones_kept(
        phone, tmp_path):
    """SIGKILL leaves a session's workspace (runner, libraries, runs); the next session on the
    device reclaims it, naming it. A workspace whose owner still runs on this host, one kept on
    request, one of an earlier version's marker and a directory of the user's all stay."""
    files = user_files(phone)
    killed = killed_session(phone, tmp_path)
    alive = subprocess.Popen(["sleep", "300"])
    try:
        live = leftover(phone, "/data/local/tmp/executorch-hil-live0001-gw1",
                        **this_host(alive.pid, session="live"))
        kept = leftover(phone, "/data/local/tmp/executorch-hil-kept0001-gw0",
                        **this_host(4194999, session="kept"), keep="1")
        old = leftover(phone, "/data/local/tmp/executorch-hil-old00001-gw0")
        s = session(tmp_path, phone, "/data/local/tmp/hil-reclaimer")
        device = s.device
        notes = [n for n in s.notices if "reclaimed workspace" in n]
        assert len(notes) == 1, s.notices
        for part in (killed, "session killed worker gw0", "pid ", "no longer runs", "removed",
                     " MB)"):
            assert part in notes[0], (part, notes[0])
        assert not on_phone(phone, killed).exists()
        for root in (live, kept, old):
            assert (root / MARKER).is_file() and (root / "libQnnHtp.so").is_file(), root
        device.close()
    finally:
        alive.kill()
        alive.wait()
    assert_untouched(files)
    for root in (live, kept, old):
        shutil.rmtree(root)


def harness_cli(*args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [
        str(REPO), os.environ.get("PYTHONPATH")]))}
    return subprocess.run([sys.executable, "-m", "harness", "workspaces", *args], cwd=REPO,
                          env=env, capture_output=True, text=True, timeout=300)


def test_the_workspaces_command_lists_and_removes_leftovers(phone, tmp_path):
    files = user_files(phone)
    alive = subprocess.Popen(["sleep", "300"])
    try:
        gone = leftover(phone, "/data/local/tmp/executorch-hil-gone0001-gw0",
                        **this_host(4194999, session="gone"))
        nested = leftover(phone, "/data/local/tmp/mine/deeper/ws",
                          **this_host(4194998, session="nested"))
        live = leftover(phone, "/data/local/tmp/executorch-hil-live0001-gw1",
                        **this_host(alive.pid, session="live"))
        kept = leftover(phone, "/data/local/tmp/executorch-hil-kept0001-gw0",
                        **this_host(4194997, session="kept"), keep="1")
        old = leftover(phone, "/data/local/tmp/executorch-hil-old00001-gw0")
        listed = harness_cli("--device", phone.serial)
        assert listed.returncode == 0, listed.stdout + listed.stderr
        lines = {l.split()[0]: l for l in listed.stdout.splitlines() if l.startswith("  /")}
        assert sorted(lines) == sorted(str(p).removeprefix(str(phone.sandbox)) for p in
                                       (gone, nested, live, kept, old)), listed.stdout
        assert "gone: its process, pid 4194999 of this host, no longer runs" in \
            lines["/data/local/tmp/executorch-hil-gone0001-gw0"]
        assert f"live: its process, pid {alive.pid}, still runs" in \
            lines["/data/local/tmp/executorch-hil-live0001-gw1"]
        assert "kept: " in lines["/data/local/tmp/executorch-hil-kept0001-gw0"]
        assert "unknown: its marker names no owner" in \
            lines["/data/local/tmp/executorch-hil-old00001-gw0"]
        assert "2 left by sessions that are gone" in listed.stdout, listed.stdout
        assert "--remove --all" in listed.stdout
        assert gone.is_dir() and nested.is_dir()  # listing removes nothing

        removed = harness_cli("--device", phone.serial, "--remove")
        assert removed.returncode == 0, removed.stdout + removed.stderr
        assert not gone.exists() and not nested.exists()
        assert on_phone(phone, "/data/local/tmp/mine").is_dir()  # the user's parent stays
        assert live.is_dir() and kept.is_dir() and old.is_dir()
        assert "/data/local/tmp/executorch-hil-gone0001-gw0: removed" in removed.stdout

        everything = harness_cli("--device", phone.serial, "--remove", "--all")
        assert everything.returncode == 0, everything.stdout + everything.stderr
        assert not kept.exists() and not old.exists()
        assert live.is_dir() and (live / MARKER).is_file(), "a live owner's workspace went"
    finally:
        alive.kill()
        alive.wait()
    assert_untouched(files)
    shutil.rmtree(live)
    assert not on_phone(phone, "/data/local/tmp/.executorch-hil-lease").exists()


def test_the_workspaces_command_refuses_what_it_cannot_do(tmp_path):
    assert harness_cli("--device", "ssh://board").returncode == 2
    assert harness_cli("--device", "SERIAL", "--all").returncode == 2
    assert harness_cli("--device", "SERIAL", "--adb-server", "nohostport").returncode == 2
