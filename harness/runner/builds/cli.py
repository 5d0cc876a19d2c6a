"""``python -m harness build-runner``: build the native runner, or print how to build it.

::

    build-runner --host [--force] [--cache-dir DIR]       prints the binary
    build-runner --arm64-linux [--force] [--cache-dir DIR] prints the build dir
    build-runner --android --ndk <ndk> --executorch-prefix <prefix>
                 [--platform 30] [--build-dir DIR]         prints the build dir
    build-runner (--host | --arm64-linux | --android ...) --print-commands

Exit status 0 on success, 1 when the build is impossible or fails (the message says what to
install or pass), 2 on bad arguments. Also runnable as ``python -m harness.runner.builds.cli``.
"""

from __future__ import annotations

import argparse
import os
import shlex
import sys
from pathlib import Path

from harness.runner.builds import RunnerBuildError
from harness.runner.builds.android import (
    DEFAULT_PLATFORM,
    android_build_commands,
    android_dlopen_shim_command,
    android_interposer_command,
    android_wrapper_commands,
    build_android_runner,
    default_android_build_dir,
)
from harness.runner.builds.arm64_linux import arm64_linux_script, build_arm64_linux
from harness.runner.builds.cmake import (DLOPEN_SHIM_NAME, INTERPOSER_NAME, RUNNER_NAME,
                                         run_commands)
from harness.runner.builds.host import (
    build_host_runner,
    host_build_commands,
    host_build_dir,
    host_runner_available,
)


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m harness build-runner",
        description="Build the native lifecycle runner (C++, against ExecuTorch).",
    )
    target = p.add_mutually_exclusive_group()
    target.add_argument("--host", action="store_true", help="build for this machine (default)")
    target.add_argument("--android", action="store_true",
                        help="cross-compile the runner, the QNN interposer and its dlopen shim "
                             "for arm64-v8a Android (prints the build directory)")
    target.add_argument("--arm64-linux", action="store_true",
                        help="cross-compile the runner, the QNN interposer and its dlopen shim "
                             "for arm64 Linux against the executorch aarch64 wheel (prints the "
                             "build directory)")
    p.add_argument("--ndk", type=Path, default=None, help="Android NDK root (default: $ANDROID_NDK)")
    p.add_argument(
        "--executorch-prefix",
        type=Path,
        default=None,
        help="the ExecuTorch build to build against: for --android an install prefix built "
             "for arm64-v8a; for --host and --arm64-linux an unpacked wheel's executorch/ or "
             "a CMake install prefix (default: the installed wheel; for --arm64-linux the "
             "aarch64 wheel of its release)",
    )
    p.add_argument("--platform", type=int, default=DEFAULT_PLATFORM,
                   help=f"Android API level (default {DEFAULT_PLATFORM})")
    p.add_argument("--build-dir", type=Path, default=None, help="build directory")
    p.add_argument("--cache-dir", type=Path, default=None,
                   help="build cache root (host and arm64-linux)")
    p.add_argument("--force", action="store_true",
                   help="rebuild the host or arm64-linux build even if cached")
    p.add_argument(
        "--print-commands",
        action="store_true",
        help="print the configure/build command lines instead of running them",
    )
    return p


def _main_arm64_linux(args: argparse.Namespace) -> int:
    if args.print_commands:
        for line in arm64_linux_script(args.cache_dir, args.build_dir):
            print(line)
        return 0
    if args.build_dir is not None:
        print("build-runner: --arm64-linux builds into the cache (--cache-dir), not --build-dir; "
              "use --print-commands for a build elsewhere", file=sys.stderr)
        return 2
    print(build_arm64_linux(args.cache_dir, force=args.force))
    return 0


def _main_android(args: argparse.Namespace) -> int:
    ndk = args.ndk or (
        Path(os.environ["ANDROID_NDK"]) if os.environ.get("ANDROID_NDK") else None
    )
    build_dir = args.build_dir or default_android_build_dir()
    if args.print_commands:
        shown_ndk = ndk if ndk is not None else Path("<ndk>")
        cmds = android_build_commands(
            build_dir,
            shown_ndk,
            args.executorch_prefix or Path("<executorch-prefix>"),
            args.platform,
        )
        cmds.append(android_interposer_command(
            Path(build_dir) / INTERPOSER_NAME, shown_ndk, args.platform))
        cmds.append(android_dlopen_shim_command(
            Path(build_dir) / DLOPEN_SHIM_NAME, shown_ndk, args.platform))
        # --runtime-variant's backend-registry wrapper (built on first use, into the cache)
        cmds += android_wrapper_commands(
            Path(build_dir) / "registry-wrapper", shown_ndk,
            args.executorch_prefix or Path("<executorch-prefix>"), args.platform)
        for cmd in cmds:
            print(shlex.join(cmd))
        return 0
    if ndk is None:
        print(
            "build-runner: --android needs --ndk <path to the Android NDK> "
            "(or ANDROID_NDK set)",
            file=sys.stderr,
        )
        return 2
    if args.executorch_prefix is None:
        print(
            "build-runner: --android needs --executorch-prefix <ExecuTorch install "
            "prefix built for arm64-v8a>",
            file=sys.stderr,
        )
        return 2
    binary = build_android_runner(build_dir, ndk, args.executorch_prefix, args.platform)
    # The directory: runner, interposer, dlopen shim and lib/ (EXECUTORCH_HIL_ANDROID_BUILD
    # takes it).
    print(binary.parent)
    return 0


def _main_host(args: argparse.Namespace) -> int:
    if args.print_commands:
        build_dir = args.build_dir or host_build_dir(args.cache_dir)
        for cmd in host_build_commands(build_dir):
            print(shlex.join(cmd))
        return 0
    if args.build_dir is not None:
        ok, why = host_runner_available()
        if not ok:
            raise RunnerBuildError(f"cannot build the native runner: {why}")
        run_commands(
            host_build_commands(args.build_dir),
            args.build_dir / "build.log",
            "native runner host build",
        )
        binary = args.build_dir / RUNNER_NAME
    else:
        binary = build_host_runner(args.cache_dir, force=args.force)
    print(binary)
    return 0


def main(argv: list[str] | None = None) -> int:
    """``python -m harness build-runner``: builds (or prints how to build) the
    runner. Returns 0 on success, 1 when the build is impossible or fails,
    2 on bad arguments."""
    try:
        args = _parser().parse_args(argv)
    except SystemExit as exc:  # argparse: --help (0) or a usage error (2)
        return int(exc.code or 0)

    if args.executorch_prefix is not None and not args.android:
        from harness.errors import ConfigError
        from harness.runtime import select

        try:
            select(args.executorch_prefix)
        except ConfigError as exc:
            print(f"build-runner: {exc}", file=sys.stderr)
            return 2
    target = (_main_arm64_linux if args.arm64_linux else
              _main_android if args.android else _main_host)
    try:
        return target(args)
    except RunnerBuildError as exc:  # the build is impossible here, or a step failed
        print(f"build-runner: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
