"""Building the native lifecycle runner (`harness/runner/native`) and, for the device targets,
the QNN interposer (`harness/qnn/interposer.c`) with it.

Three targets share one CMake command builder and differ only in their extra cmake arguments;
one module each:

- `host`: this machine (x86_64, the simulator and x86_64 devices), against the runtime under
  test (the installed `executorch` wheel or `--executorch-prefix`), cached per (runner sources,
  runtime, compiler) so the session and every pytest-xdist worker share one binary. Its
  interposer is built by `harness.qnn.interposer_build` on first use.
- `arm64_linux`: cross-compiled with Debian's aarch64-linux-gnu compilers against the
  executorch aarch64 wheel of the same release (`aarch64_wheel`), runner and interposer in one
  cached build directory; it runs under qemu-aarch64 (the loopback device's arm64 mode) and on
  arm64 Linux boards. That wheel has no QNN backend.
- `android`: the NDK's toolchain file against an ExecuTorch install prefix built for
  arm64-v8a; the interposer is compiled with the NDK's clang and the prefix's shared libraries
  are copied next to the runner.

The cross targets also build `--runtime-variant`'s backend-registry wrapper
(`harness/runtime/registry_wrapper.cpp`) against their own runtime: `arm64_linux` with the same
cross compiler against the aarch64 wheel, `android` through the wrapper's CMake project with the
NDK and prefix its runner was built with.

Beside them: `tools` finds cmake, ninja, the host's C++ compiler and the nlohmann/json headers;
`cmake` holds the command lines every target shares, runs them with a build log and reads back
what a configure linked; `inputs` says what a build is built from and keyed by, and where
builds are cached; `cli` is `python -m harness build-runner`.
"""

from __future__ import annotations

from harness.errors import HarnessError


class RunnerBuildError(HarnessError):
    """The native runner cannot be built here, or its build failed; the message says what to
    install or pass, or where the build log with the failure is."""

    def __init__(self, message: str, reason: str = "") -> None:
        super().__init__(message)
        self.reason = reason  # the line that says why (cmake.failure_reason), when known
