"""XNNPACK's packed-weight cache on a full filesystem kills the process with SIGBUS.

    python xnnpack_cache_full_disk_sigbus.py            # exit 1 while the bug is present
    python xnnpack_cache_full_disk_sigbus.py --control  # a tmpfs with room: exit 0

A C++ program on extension::Module (the pybindings pass no backend options) loads a program
of 32 MiB of fp32 Linear weights with `weight_cache_enabled` and `packed_cache_path` on a
tmpfs of 8 MiB (mounted in a private mount namespace: `unshare`), and executes it. The runtime
must pack to the heap (or fail the load) when the file cannot grow; instead
`XNNWeightsCache::reserve_space` extends the file with `ftruncate` (sparse: it succeeds on a
full filesystem), `mmap`s it, and XNNPACK's first store into a page the filesystem cannot back
faults: SIGBUS inside the cache file's mapping, in `xnn_create_fully_connected_nc_f32` under
`XNNCompiler::compileModel`. No index is written, so every launch crashes again.
"""

import os
import shutil
import subprocess
import sys
import tempfile

from common import cpp_binary, input_file, lines_with, program, report, signal_name

SMALL, ROOMY = "8m", "128m"


def launch(size: str) -> tuple[int, str]:
    """The C++ program on a fresh tmpfs of `size`: (status, its output)."""
    binary = cpp_binary()
    unshare = shutil.which("unshare")
    if unshare is None:
        print("cannot mount a tmpfs: no unshare (util-linux)")
        raise SystemExit(2)
    # Root mounts in a private mount namespace; anyone else in a user namespace of their own.
    namespace = ["--mount"] if os.geteuid() == 0 else ["--user", "--map-root-user", "--mount"]
    with tempfile.TemporaryDirectory(prefix="xnncache-") as directory:
        script = ('mount -t tmpfs -o size="$1" tmpfs "$2" || exit 97; shift 2; exec "$@"')
        proc = subprocess.run(
            [unshare, *namespace, "sh", "-c", script, "sh", size, directory, str(binary),
             "xnnpack-cache", program("xnn_linear_stack"), f"{directory}/stack.xnncache",
             input_file("xnn_linear_stack")], capture_output=True, text=True, errors="replace",
            timeout=600)
    if proc.returncode == 97:
        print(f"cannot mount a tmpfs here:\n{proc.stderr[-2000:]}")
        raise SystemExit(2)
    # a shell's exec'd child killed by a signal: the shell is gone, unshare reports 128+N
    status = proc.returncode
    if status > 128:
        status = -(status - 128)
    return status, proc.stdout + proc.stderr


def main() -> int:
    control = "--control" in sys.argv
    status, out = launch(ROOMY if control else SMALL)
    words = lines_with(out, "XNNWeightsCache", "Module::load", "execute(forward)",
                       "SIGBUS at", "inside the mapping")
    inside = any("inside the mapping" in line and "stack.xnncache" in line
                 for line in out.splitlines())
    if status < 0 and inside:
        return report(True, f"with the cache on a tmpfs of {SMALL}: the packs go to the heap "
                      "(or the load fails with an error) and forward runs",
                      f"the process died of {signal_name(status)} at an address inside the "
                      "cache file's mapping, packing the weights into it", words)
    if status < 0:
        print(f"could not tell: died of {signal_name(status)} elsewhere:\n{out[-3000:]}")
        return 2
    if status != 0:
        print(f"could not tell: exit {status}:\n{out[-3000:]}")
        return 2
    size = ROOMY if control else SMALL
    return report(False, f"with the cache on a tmpfs of {size}: forward runs", "forward ran",
                  words)


if __name__ == "__main__":
    sys.exit(main())
