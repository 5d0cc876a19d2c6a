"""X2: every way the XNNPACK packed-weight cache falls back, driven one branch per test.

Upstream `backends/xnnpack/runtime/XNNWeightsCache.cpp` (main of 2026-08-22) keeps no open
cache file (every pack to heap) when `initialize_for_runtime` meets an empty path, an
`open(O_RDWR|O_CREAT)` or `flock(LOCK_EX|LOCK_NB)` failure or an `ftruncate(0)` failure, and
`reserve_space` leaves the file for the heap when extending it (`ftruncate`) or mapping it
(`mmap`) fails; `save_packed_index` can fail to write the index after the packs are in. Each
test names its branch, drives it with its real cause where the host has one (a regular file as
the parent: ENOTDIR; a read-only bind mount: EROFS; a tmpfs without free inodes: ENOSPC;
another process holding the lock: EWOULDBLOCK; a tmpfs with room for the packs and not the
index: ENOSPC), and otherwise makes the one system call fail with libfiu (Debian's POSIX
fault-injection preload, `fiu-run`'s mechanism: `posix/io/rw/ftruncate`, `posix/mm/mmap`), and
checks where the packs went (measured memory), the branch and errno the runtime logged, and,
where it matters, the verdict across launches (harness.results.xnnpack_launches).

The causes that need mounts, libfiu, a second host process or dropped capabilities run on the
host simulator only. EACCES needs a runner that is not root: the runtime, runner and programs
live under /root (0700), out of another user's reach, so the runner keeps uid 0 and starts
without the capabilities that let root bypass file permissions (setpriv --bounding-set,
harness.runner.privileges): the kernel's permission check is then a user's. A cause that is a
wrapper of the runner (fiu-run, setpriv) is a launch record of the scenario
(harness.runner.launch), kept in the run's replay.json: `python -m harness replay` starts the
runner under it again (on the host, and on a device that has the tool).
"""

from __future__ import annotations

import errno
import os
import posixpath
import shutil
import signal
import struct
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from harness.devices.simulator import SimulatorDevice
from harness.results.crash_site import parse_crash
from harness.results.assertions import assert_completed
from harness.results import xnnpack_log
from harness.results.failures import HilFailure, run_failures
from harness.results.xnnpack import (HEAP_LIMIT, assert_fallback, assert_no_fallback,
                                     classify_load)
from harness.results.xnnpack_launches import Launch, judge
from harness.drive.xnnpack_cache import FOOTER, MODEL, PACKS, PRECISION, Cache, new_cache
from harness.runner import launch as wrapper
from harness.runner.privileges import without_capabilities

FIU = "/usr/lib/fiu"


@pytest.fixture
def host(xnn: Cache) -> Cache:
    """The cache helper, on the host simulator (the causes below are host facilities)."""
    if not isinstance(xnn.device, SimulatorDevice):
        pytest.skip("drives the cause with host facilities (mounts, libfiu, a host process): "
                    "host simulator only")
    return xnn


def libfiu(*commands: str) -> tuple[wrapper.Launch, ...]:
    """The runner started under `fiu-run -x -c COMMAND...` (libfiu's POSIX preload with
    `commands` enabled), recorded with the run so that replay starts it so again."""
    if shutil.which("fiu-run") is None or not os.path.exists(f"{FIU}/fiu_posix_preload.so"):
        pytest.skip("libfiu is not installed (Debian fiu-utils, libfiu0: scripts/setup.sh)")
    return (wrapper.fiu_run(*commands),)


@pytest.fixture
def mount(host: Cache, request):
    """mount(argv..., target): a mount on a directory of the test's own, undone at teardown."""
    mounted: list[str] = []

    def do(*argv: str) -> str:
        target = argv[-1]
        os.makedirs(target, exist_ok=True)
        proc = subprocess.run(["mount", *argv], capture_output=True, text=True)
        if proc.returncode != 0:
            pytest.skip(f"cannot mount here (mount {' '.join(argv)}: {proc.stderr.strip()})")
        mounted.append(target)
        return target

    yield do
    for target in reversed(mounted):
        subprocess.run(["umount", "-l", target], capture_output=True)


def test_cache_enabled_with_empty_path_is_heap(xnn):
    """weight_cache_enabled with packed_cache_path "": no file, every pack to heap, and the
    runtime says nothing (the branch is named from the options)."""
    result = xnn.launch("empty_path", "")
    load = assert_fallback(result, xnn.weights["forward"], branch="empty_path")
    xnn.record(result, load)
    assert load.runtime_log == () or not load.errnos, load.describe()


def test_open_o_creat_fails_erofs_read_only_mount(host, mount):
    """The cache's directory is a read-only bind mount: open(O_CREAT) fails with EROFS."""
    writable = host.path("rw")
    os.makedirs(writable)
    readonly = mount("--bind", "-o", "ro", writable, host.path("ro"))
    subprocess.run(["mount", "-o", "remount,bind,ro", readonly], check=False)
    story = host.story("erofs", posixpath.join(readonly, "stack.xnncache"), n=2,
                       expect="fallback")
    for launch in story.launches:
        assert (launch.load.branch, launch.load.errno) == ("open_failed", errno.EROFS), \
            launch.load.describe()
        assert launch.load.classification == "fallback", launch.load.describe()
    assert story.verdict == "permanent", story.text


def test_open_o_creat_fails_enospc_no_inodes(host, mount):
    """The cache's directory is a tmpfs with no free inode: open(O_CREAT) fails with ENOSPC
    (the one ENOSPC a full disk gives this branch; a full data area is the SIGBUS case)."""
    directory = mount("-t", "tmpfs", "-o", "size=1m,nr_inodes=1", "tmpfs", host.path("noinode"))
    result = host.launch("enospc_inodes", posixpath.join(directory, "stack.xnncache"))
    load = assert_fallback(result, host.weights["forward"], branch="open_failed")
    host.record(result, load)
    assert load.errno == errno.ENOSPC, load.describe()


# CAP_DAC_OVERRIDE and CAP_DAC_READ_SEARCH let root ignore a directory's mode; CAP_FOWNER its
# ownership: without them root's open(2) is checked as a user's.
NOT_ROOT = ("dac_override", "dac_read_search", "fowner")


def test_open_o_creat_fails_eacces_runner_not_root(host):
    """The cache's directory belongs to another user (nobody, mode 0755) and the runner is not
    root (uid 0 without the capabilities that bypass permissions): open(O_CREAT) fails with
    EACCES, every pack to heap, on every launch."""
    if shutil.which("setpriv") is None:
        pytest.skip("util-linux setpriv not installed")
    directory = host.path("not-mine")
    os.makedirs(directory)
    os.chown(directory, 65534, 65534)  # nobody:nogroup on Debian and Android alike
    os.chmod(directory, 0o755)
    story = host.story("eacces", posixpath.join(directory, "stack.xnncache"), n=2,
                       expect="fallback",
                       under=(without_capabilities(NOT_ROOT),))
    for launch in story.launches:
        assert (launch.load.branch, launch.load.errno) == ("open_failed", errno.EACCES), \
            launch.load.describe()
        assert launch.load.classification == "fallback", launch.load.describe()
    assert story.verdict == "permanent", story.text
    assert not os.listdir(directory)


def test_in_process_reopen_fails_with_entries_in_memory(host, mount):
    """Two modules on one cache path in one process, the directory a read-only mount: module A
    (`forward`) cannot create the file (open(O_CREAT): EROFS) and packs its 8 entries into heap,
    which stay in the cache's memory; module B (`other`) then takes initialize_for_runtime's
    reopen branch (entries in memory: open_locked(O_RDWR), no O_CREAT), which fails with
    ENOENT (the file does not exist), and B's packs go to heap too. The second errno proves the
    second open was the reopen: with O_CREAT it would be EROFS again."""
    writable = host.path("rw")
    os.makedirs(writable)
    readonly = mount("--bind", "-o", "ro", writable, host.path("ro"))
    subprocess.run(["mount", "-o", "remount,bind,ro", readonly], check=False)
    cache = posixpath.join(readonly, "stack.xnncache")
    result = host.launch("reopen", cache, (("A", "forward"), ("B", "other")))
    first = assert_fallback(result, host.weights["forward"], module="A", branch="open_failed")
    second = assert_fallback(result, host.weights["other"], module="B", branch="reopen_failed")
    host.record(result, first, second)
    opens = [e.errno for e in xnnpack_log.events(first.runtime_log)
             if e.event in ("open_failed", "flock_failed")]
    assert opens == [errno.EROFS, errno.ENOENT], first.describe()
    assert (first.errno, second.errno) == (errno.EROFS, errno.ENOENT), second.describe()


def test_reserve_space_unnamed_constant_is_heap(host, compiled_model, request):
    """A program whose XNNPACK weight tensors carry no name (written inline in the delegate, the
    layout older exporters wrote and 1.5.1 still reads; compile option unnamed_weights; the
    biases keep their names, so the delegate hands XNNPACK the cache): look_up finds no name for
    a kernel (last_lookup_unnamed_), so reserve_space packs it into heap although the file is
    open for writing, and look_up_or_insert says so ("Unpacked weight and bias were not
    registered with names"). Every launch packs again: permanent."""
    unnamed = new_cache(host.device, host.driver,
                        compiled_model(MODEL, PRECISION, unnamed_weights=True),
                        request.node.name + "-unnamed")
    story = unnamed.story("unnamed", unnamed.path("stack.xnncache"), n=2, expect="fallback")
    for launch in story.launches:
        load = launch.load
        assert (load.branch, load.errno) == ("unnamed_constant", None), load.describe()
        assert load.classification == "fallback" and \
            load.heap_bytes >= 0.8 * load.weight_bytes, load.describe()
        assert load.mapped_bytes == 0, load.describe()
    assert story.verdict == "permanent", story.text


def test_flock_fails_ewouldblock_while_another_process_holds_it(host):
    """Another process holds LOCK_EX on the cache file (util-linux flock(1)): the launch
    falls back with errno 11; once the holder exits, the next launch writes the file and the
    one after maps it. Judged across those launches: it heals."""
    if shutil.which("flock") is None:
        pytest.skip("util-linux flock(1) not installed")
    cache = host.path("stack.xnncache")
    # its own session: the lock's fd is inherited by sleep, so the whole group must go
    holder = subprocess.Popen(["flock", "--exclusive", cache, "sleep", "600"],
                              start_new_session=True)
    try:
        deadline = time.monotonic() + 10
        while subprocess.run(["flock", "--nonblock", cache, "true"]).returncode == 0:
            assert time.monotonic() < deadline, "flock(1) never took the lock"
            time.sleep(0.05)
        held = host.launch("lock_held", cache)
        load = assert_fallback(held, host.weights["forward"], branch="flock_failed")
        host.record(held, load)
        assert load.errno == errno.EWOULDBLOCK, load.describe()
    finally:
        os.killpg(holder.pid, signal.SIGKILL)
        holder.wait()
    story = host.story("after_unlock", cache, n=2, expect="mapped")
    assert [launch.load.branch for launch in story.launches] == ["fresh_write", "loaded"], \
        story.text
    assert story.verdict == "reused", story.text


def test_ftruncate_zero_fails(host):
    """ftruncate(0) of a new cache file fails (libfiu: the process's first ftruncate, EIO):
    no open file, every pack to heap; the empty file stays and the next launch writes it."""
    cache = host.path("stack.xnncache")
    fault = libfiu("enable name=posix/io/rw/ftruncate,failinfo=5,onetime=1")
    result = host.launch("ftruncate0", cache, under=fault)
    load = assert_fallback(result, host.weights["forward"], branch="truncate0_failed")
    host.record(result, load)
    assert load.errno == errno.EIO, load.describe()
    assert host.size(cache) == 0
    after = host.launch("after_ftruncate0", cache)
    host.record(after, assert_no_fallback(after, host.weights["forward"], branch="fresh_write"))


def test_reserve_space_ftruncate_fails(host):
    """Extending the cache file in reserve_space fails (libfiu: every ftruncate, EFBIG). On
    1.5.1 only a re-pack of a loaded entry reaches reserve_space's file path (a seed mismatch:
    test_xnnpack_cache.py::test_seed_mismatch), so the cache is written, one entry's seed
    patched, and the launch's re-pack meets the failing ftruncate: the file is closed and that
    pack goes to heap; the other seven stay mapped."""
    cache = host.path("stack.xnncache")
    host.launch("write", cache)
    _, _, entries = host.index(cache)
    _, seed_at = entries[0]
    (seed,) = struct.unpack("<I", host.read(cache, seed_at, 4))
    host.write(cache, seed_at, struct.pack("<I", seed ^ 0x5A5A5A5A))
    fault = libfiu(f"enable name=posix/io/rw/ftruncate,failinfo={errno.EFBIG}")
    result = host.launch("reserve_ftruncate", cache, under=fault)
    load = assert_fallback(result, host.weights["forward"], branch="reserve_ftruncate_failed")
    host.record(result, load)
    assert load.errno == errno.EFBIG, load.describe()
    one_pack = host.weights["forward"] / PACKS
    assert abs(load.heap_bytes - one_pack) < 0.5 * one_pack, load.describe()


def test_reserve_space_mmap_fails(host):
    """Mapping the cache file in reserve_space fails (libfiu: every mmap, ENOMEM; the program
    is read with the File loader so the runtime's own mmap of it is not the one failing): the
    file is closed after its first extension and every pack goes to heap."""
    cache = host.path("stack.xnncache")
    fault = libfiu(f"enable name=posix/mm/mmap,failinfo={errno.ENOMEM}")
    result = host.launch("reserve_mmap", cache, load_mode="File", under=fault)
    load = assert_fallback(result, host.weights["forward"], branch="reserve_mmap_failed")
    host.record(result, load)
    assert load.errno == errno.ENOMEM, load.describe()


def test_index_write_fails_room_for_packs_not_index(host, mount):
    """A tmpfs with room for exactly the packs: they are mapped, and the index pwrite fails
    with ENOSPC ("Failed to write index (errno=28)"). The file never gets an index, so every
    launch truncates it and packs again. Judged across launches: permanent."""
    probe = host.path("probe.xnncache")
    host.launch("measure", probe)
    start, _, _ = host.index(probe)  # the index's offset: the packs' bytes, page-aligned
    directory = mount("-t", "tmpfs", "-o", f"size={start}", "tmpfs", host.path("tight"))
    cache = posixpath.join(directory, "stack.xnncache")
    story = host.story("index_enospc", cache, expect="mapped")
    for launch in story.launches:
        load = launch.load
        assert (load.branch, load.errno) == ("index_write_failed", errno.ENOSPC), load.describe()
        assert load.classification == "mapped" and load.heap_bytes < HEAP_LIMIT * load.weight_bytes
    assert story.verdict == "permanent" and "into a file never indexed" in story.text, story.text


@pytest.mark.parametrize("entries", [PACKS, PACKS // 2], ids=["full", "partial"])
def test_read_only_cache_file(host, mount, entries):
    """A written cache behind a read-only bind mount: the index loads (O_RDONLY), reopening
    it O_RDWR fails with EROFS. A full cache is still mapped on every launch; a partial one
    maps what it has and heaps the rest on every launch (permanent)."""
    writable = host.path("rw")
    os.makedirs(writable)
    cache = posixpath.join(writable, "stack.xnncache")
    host.launch("write", cache)
    if entries != PACKS:
        size = host.size(cache)
        assert size
        host.write(cache, size - FOOTER + 8, struct.pack("<I", entries))
    readonly = mount("--bind", "-o", "ro", writable, host.path("ro"))
    subprocess.run(["mount", "-o", "remount,bind,ro", readonly], check=False)
    story = host.story(f"read_only_{entries}", posixpath.join(readonly, "stack.xnncache"), n=2,
                       expect="mapped" if entries == PACKS else "fallback")
    for launch in story.launches:
        load = launch.load
        assert (load.branch, load.errno, load.loaded_entries) == \
            ("loaded_reopen_failed", errno.EROFS, entries), load.describe()
        assert load.classification == ("mapped" if entries == PACKS else "fallback"), \
            load.describe()
    assert story.verdict == ("reused" if entries == PACKS else "permanent"), story.text


def lock_holder(path: str) -> int | None:
    """The pid holding a flock on `path`, from /proc/locks (matched by inode)."""
    try:
        inode = os.stat(path).st_ino
    except OSError:
        return None
    with open("/proc/locks") as f:
        for line in f:
            fields = line.split()
            if "FLOCK" in fields and len(fields) > 5 and fields[5].endswith(f":{inode}"):
                return int(fields[4])
    return None


def test_two_processes_one_path(host):
    """Two runner processes on one cache path. The first writes the file and keeps its fd and
    LOCK_EX for life; it is held (SIGSTOP) right after it took the lock, and a second launch
    meanwhile falls back with errno 11; once the first exits, the next launch maps the file.
    Judged across the three launches: heals."""
    cache = host.path("stack.xnncache")
    before = host.state(cache)
    with ThreadPoolExecutor(max_workers=1) as pool:
        first = pool.submit(host.launch, "holder", cache)
        pid = None
        deadline = time.monotonic() + 60
        while pid is None and not first.done() and time.monotonic() < deadline:
            pid = lock_holder(cache)
            time.sleep(0.002)
        assert pid is not None, "the first launch never held the cache file's lock"
        os.kill(pid, signal.SIGSTOP)
        try:
            middle_before = host.state(cache)
            second = host.launch("while_held", cache)
            middle = Launch(classify_load(second, host.weights["forward"], expected="fallback"),
                            middle_before,
                            host.state(cache))
        finally:
            os.kill(pid, signal.SIGCONT)
        holder = first.result(timeout=120)  # raises what the first launch raised
    third_before = host.state(cache)  # what the first launch left, once it ended
    head = Launch(classify_load(holder, host.weights["forward"], expected="mapped"), before,
                  third_before)
    third = host.launch("after_exit", cache)
    last = Launch(classify_load(third, host.weights["forward"], expected="mapped"), third_before,
                  host.state(cache))
    story = judge("two_processes", [head, middle, last], PACKS)
    print(f"two_processes: {story.text}")
    assert head.load.branch == "fresh_write" and head.load.classification == "mapped", \
        head.load.describe()
    assert (middle.load.branch, middle.load.errno) == ("flock_failed", errno.EWOULDBLOCK), \
        middle.load.describe()
    assert middle.load.classification == "fallback", middle.load.describe()
    assert last.load.branch == "loaded" and last.load.classification == "mapped", \
        last.load.describe()
    assert story.verdict == "heals", story.text


def test_full_disk_is_not_a_crash(host, mount):
    """The cache's filesystem fills while the packs are written (an 8 MiB tmpfs, 32 MiB of
    packs). The runtime must fall back to heap (or fail the load) and say so; it must not crash.
    `reserve_space` extends the file with ftruncate (sparse: it succeeds on a full filesystem)
    and mmap succeeds, so ENOSPC never reaches the code that would fall back: the first store
    into a page the filesystem cannot back is a SIGBUS inside the cache file's mapping, on
    every launch (no index is ever written). A crash here is judged against the file's mapping
    and said as such; executorch 1.5.1 crashes (known issue, strict xfail)."""
    directory = mount("-t", "tmpfs", "-o", "size=8m", "tmpfs", host.path("full"))
    cache = posixpath.join(directory, "stack.xnncache")
    result = host.launch("full_disk", cache, allow_crash=True)
    if not result.completed:
        site = parse_crash(result.output.stderr)
        failure = run_failures(result)[0]
        name = posixpath.basename(cache)
        if site is not None and site.signal == "SIGBUS" and site.fault_mapping and \
                site.fault_mapping.startswith(name + "+"):
            raise HilFailure(
                f"the cache's disk is full: SIGBUS storing into the cache file's mapping at "
                f"{site.fault_mapping} (an 8 MiB tmpfs holding {host.size(cache)} bytes of the "
                f"file), not a heap fallback\n{failure.message}", failure)
        assert_completed(result)  # any other crash, as it is
    load = classify_load(result, host.weights["forward"], expected="fallback")
    host.record(result, load)
    assert load.classification == "fallback" and load.errno == errno.ENOSPC, load.describe()
