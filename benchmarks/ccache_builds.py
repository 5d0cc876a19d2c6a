"""What ccache (harness.ccache) saves the runner builds: CPU and wall time, side by side.

    python benchmarks/ccache_builds.py builds [--arm64]
    python benchmarks/ccache_builds.py pytest --old TREE --new TREE [FILE ...]

`builds`: the host runner (and with --arm64 the arm64-linux build) built cold into a fresh
runner cache three ways, each in its own process under a fresh EXECUTORCH_HIL_CACHE: with
CCACHE_DISABLE=1 (the compilers run directly: as without ccache), with an empty ccache, and
into a second fresh runner cache with the ccache the previous build filled (what a test's
fresh cache gets after setup's build). Prints each one's CPU (user+sys of the process and its
children) and wall seconds, the ratios to the uncached build, and the ccache counters.

`pytest`: for each source tree (PYTHONPATH), a fresh EXECUTORCH_HIL_CACHE into which
`python -m harness doctor` (scripts/setup.sh's warming step: the interposer and the host
runner) builds first, then the CPU and wall time of
`python -m pytest FILE... -p no:cacheprovider` (default: test_native_build.py and
test_arm64_build.py). The aarch64 wheel is linked in from the usual harness cache, so neither
side downloads it. A failing command is a failed measurement (exit 1).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HOME_CACHE = Path(os.environ.get("EXECUTORCH_HIL_CACHE")
                  or Path.home() / ".cache" / "executorch-hil")
SHARED = ("wheels", "executorch-aarch64")
"""Harness cache entries linked into each fresh cache: downloads, not builds."""
DEFAULT_FILES = ("tests/framework/test_native_build.py", "tests/framework/test_arm64_build.py")

BUILD = {
    "host": "from harness.runner.builds.host import build_host_runner as b",
    "arm64": "from harness.runner.builds.arm64_linux import build_arm64_linux as b",
}


def fresh_cache(parent: Path, name: str) -> Path:
    root = parent / name
    root.mkdir()
    for entry in SHARED:
        if (HOME_CACHE / entry).exists():
            (root / entry).symlink_to(HOME_CACHE / entry)
    return root


def measured(command: list[str], env: dict[str, str], cwd: Path | None = None) -> tuple[float, float]:
    """(CPU seconds of the process and every child it waited for, wall seconds)."""
    started = time.monotonic()
    proc = subprocess.Popen(command, env=env, cwd=cwd, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    out, _ = proc.communicate()
    wall = time.monotonic() - started
    if proc.returncode:
        print(out[-3000:], file=sys.stderr)
        raise SystemExit(f"failed (exit {proc.returncode}): {' '.join(command)}")
    return _children_cpu(), wall


_last_cpu = 0.0


def _children_cpu() -> float:
    """CPU of the children reaped since the last call (RUSAGE_CHILDREN only grows)."""
    import resource

    global _last_cpu
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    total = usage.ru_utime + usage.ru_stime
    delta, _last_cpu = total - _last_cpu, total
    return delta


def ccache_stats(root: Path) -> str:
    env = {**os.environ, "CCACHE_DIR": str(root / "ccache")}
    out = subprocess.run(["ccache", "--print-stats"], env=env, capture_output=True,
                         text=True).stdout
    stats = dict(line.split("\t", 1) for line in out.splitlines() if "\t" in line)
    keys = ("direct_cache_hit", "preprocessed_cache_hit", "cache_miss")
    return " ".join(f"{k}={stats.get(k, '?')}" for k in keys)


def builds(args: argparse.Namespace) -> int:
    _children_cpu()
    rows = []
    with tempfile.TemporaryDirectory(prefix="ccache-bench-") as tmp:
        work = Path(tmp)
        for kind in ["host", *(["arm64"] if args.arm64 else [])]:
            plain = fresh_cache(work, f"{kind}-plain")
            cached = fresh_cache(work, f"{kind}-ccache")
            runs = [("no ccache (CCACHE_DISABLE=1)", plain, plain / "runner", {"CCACHE_DISABLE": "1"}),
                    ("empty ccache", cached, cached / "runner-1", {}),
                    ("ccache warmed by one build", cached, cached / "runner-2", {})]
            results = []
            for label, root, runner_cache, extra in runs:
                env = {**os.environ, "EXECUTORCH_HIL_CACHE": str(root), **extra}
                code = f"{BUILD[kind]}; import sys; from pathlib import Path; b(Path(sys.argv[1]))"
                cpu, wall = measured([sys.executable, "-c", code, str(runner_cache)], env)
                stats = ccache_stats(root) if not extra else "-"
                results.append((label, cpu, wall))
                print(f"{kind} {label}: cpu {cpu:.1f} s, wall {wall:.1f} s; ccache: {stats}",
                      flush=True)
            base_cpu, base_wall = results[0][1], results[0][2]
            rows += [(kind, label, cpu, wall, cpu / base_cpu, wall / base_wall)
                     for label, cpu, wall in results]
    print(f"load average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    print(f"{'build':6s} {'':32s} {'cpu s':>7s} {'wall s':>7s} {'cpu x':>6s} {'wall x':>6s}")
    for kind, label, cpu, wall, rc, rw in rows:
        print(f"{kind:6s} {label:32s} {cpu:7.1f} {wall:7.1f} {rc:6.2f} {rw:6.2f}")
    return 0


def pytest_cpu(args: argparse.Namespace) -> int:
    _children_cpu()
    results = {}
    with tempfile.TemporaryDirectory(prefix="ccache-bench-") as tmp:
        for side, tree in (("old", args.old), ("new", args.new)):
            root = fresh_cache(Path(tmp), side)
            env = {**os.environ, "EXECUTORCH_HIL_CACHE": str(root), "PYTHONPATH": str(tree)}
            setup = measured([sys.executable, "-m", "harness", "doctor"], env, cwd=tree)
            tests = measured([sys.executable, "-m", "pytest", *args.files, "-p",
                              "no:cacheprovider", "-q"], env, cwd=tree)
            results[side] = (setup, tests)
            print(f"{side} ({tree}): doctor cpu {setup[0]:.1f} s wall {setup[1]:.1f} s; "
                  f"pytest cpu {tests[0]:.1f} s wall {tests[1]:.1f} s", flush=True)
    (o_setup, o_tests), (n_setup, n_tests) = results["old"], results["new"]
    print(f"load average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    print(f"doctor  cpu new/old {n_setup[0] / o_setup[0]:.2f}  wall {n_setup[1] / o_setup[1]:.2f}")
    print(f"pytest  cpu new/old {n_tests[0] / o_tests[0]:.2f}  wall {n_tests[1] / o_tests[1]:.2f}")
    return 0


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="what", required=True)
    b = sub.add_parser("builds")
    b.add_argument("--arm64", action="store_true", help="also the arm64-linux cross build")
    p = sub.add_parser("pytest")
    p.add_argument("--old", type=Path, required=True, help="source tree without ccache")
    p.add_argument("--new", type=Path, required=True, help="source tree with ccache")
    p.add_argument("files", nargs="*", default=list(DEFAULT_FILES))
    args = parser.parse_args(argv)
    return builds(args) if args.what == "builds" else pytest_cpu(args)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
