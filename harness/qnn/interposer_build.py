"""Builds the libQnnHtp.so interposer from `interposer.c` with gcc, once per source hash.

Built on first use rather than shipped, because it must match the host's libc and is tiny;
gcc is on every supported host. Nothing pins it: when ExecuTorch dlcloses libQnnHtp.so the
interposer puts the real library's function table back and closes it (see the C file's header).
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

from harness.cache import cache_root, cached_build, digest
from harness.errors import SdkError
from harness.qnn.api_names import HEADER as API_NAMES_HEADER
from harness.storage import full_disk_reason

SOURCE = Path(__file__).with_name("interposer.c")
SOURCES = (SOURCE, API_NAMES_HEADER)
"""What an interposer is compiled from: every build's cache key covers all of them, so a change
of the names table (api_names.h, from harness/protocol/nemesis.py) is a new build."""
LIB_NAME = "libQnnHtp.so"


def interposer_command(output: Path, compiler: str = "gcc", android: bool = False) -> list[str]:
    """The compile line; also used to cross-build (`compiler=`: aarch64-linux-gnu-gcc, or an
    NDK clang with `android=True`: bionic has no separate libpthread, `-lpthread` fails there)."""
    libs = ["-ldl"] if android else ["-ldl", "-lpthread"]
    return [compiler, "-O2", "-Wall", "-shared", "-fPIC",
            "-o", str(output), str(SOURCE), *libs]


DLOPEN_SHIM_NAME = "libharness_qnn_dlopen.so"
DLOPEN_SHIM_ENV = "HARNESS_QNN_DLOPEN_SHIM"  # its path, as `python -m harness env` gives it
DLOPEN_SHIM_FLAGS = ("-DHARNESS_DLOPEN_SHIM", "-Wno-unused-variable", "-Wno-unused-function")


def build_dlopen_shim(force: bool = False) -> Path:
    """The dlopen shim (the same source built with -DHARNESS_DLOPEN_SHIM): preloaded into every
    runner of a QNN runtime (the simulator's, and the host build's on an x86_64 adb device or
    board), it traces and, by nemesis rule, fails the runtime's dlopen of each QNN library (see
    the C file). Built like the interposer, once per source hash."""
    return build_interposer(force, DLOPEN_SHIM_NAME, DLOPEN_SHIM_FLAGS)


def dlopen_shim_command(output: Path, compiler: str = "gcc", android: bool = False) -> list[str]:
    """The shim's compile line (`interposer_command` with the shim's flags), also for the
    cross builds: an arm64 device's runner gets its shim from the same build as its
    interposer."""
    command = interposer_command(output, compiler, android)
    return command[:1] + list(DLOPEN_SHIM_FLAGS) + command[1:]


def build_interposer(force: bool = False, name: str = LIB_NAME,
                     flags: tuple[str, ...] = ()) -> Path:
    """Return the path of a built interposer, building it if this source was never built."""
    compiler = shutil.which("gcc") or shutil.which("cc")
    if compiler is None:
        raise SdkError(
            "gcc is needed to build the QNN interposer (libQnnHtp.so shim): "
            "install it with `apt-get install gcc`."
        )
    key = digest([*(source.read_bytes() for source in SOURCES), compiler, *flags])
    out_dir = cache_root() / "interposer" / key
    output = out_dir / name

    def build() -> str:
        out_dir.mkdir(parents=True, exist_ok=True)
        tmp = out_dir / (name + ".tmp")
        command = interposer_command(tmp, compiler)
        proc = subprocess.run(command[:1] + list(flags) + command[1:], capture_output=True,
                              text=True)
        if proc.returncode != 0:
            full = full_disk_reason(proc.stderr, out_dir)  # the storage, not the linker's words
            raise SdkError(f"building the QNN interposer failed: {full}" if full else
                           f"building the QNN interposer failed:\n{proc.stderr[-2000:]}")
        tmp.replace(output)
        return ""

    # A build of an older harness has no marker: its file is checked for shape and its sha256
    # recorded now (adopt_unmarked); one that fails that, or its recorded sha256, is rebuilt
    # with a notice naming it.
    cached_build(out_dir, [output], build, "QNN interposer", force, adopt_unmarked=True)
    return output
