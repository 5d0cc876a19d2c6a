#!/usr/bin/env bash
# Installs everything the framework needs on a Debian/Ubuntu x86_64 host with Python 3.11:
# the adb client/server, headless Chromium (the --hil-report page's test), the nlohmann/json
# headers (nlohmann-json3-dev: the native runner's JSON, every runner build), the arm64 cross
# toolchain and qemu-user (Debian packages: the arm64-linux runner build and the loopback
# device's arm64 mode), libfiu (POSIX fault injection: the XNNPACK cache branches), OpenSSH's server (tests/framework/test_ssh_device.py: a localhost board),
# ccache (the compiler cache of every runner build),
# the Python package with its
# pinned dependencies (torch==2.13.0 CPU, executorch==1.5.1, onnxruntime-qnn==2.7.0 for the
# HTP simulator), and warms the caches (QNN SDK layout, interposer, native runner).
set -euo pipefail
cd "$(dirname "$0")/.."

packages=()
command -v adb >/dev/null 2>&1 || packages+=(adb)
# headless Chromium: tests/framework/test_report.py opens the --hil-report page as a person would
command -v chromium >/dev/null 2>&1 || packages+=(chromium)
# header-only; the host's copy also serves the arm64 and Android cross builds
if [ ! -f /usr/include/nlohmann/json.hpp ] && [ ! -f /usr/local/include/nlohmann/json.hpp ]; then
  packages+=(nlohmann-json3-dev)
fi
if ! command -v aarch64-linux-gnu-gcc >/dev/null 2>&1 || ! command -v aarch64-linux-gnu-g++ >/dev/null 2>&1; then
  packages+=(g++-aarch64-linux-gnu gcc-aarch64-linux-gnu)
fi
command -v qemu-aarch64 >/dev/null 2>&1 || packages+=(qemu-user)
# gdb: the bug-report reproduction whose evidence is a QNN call sequence (harness bug-report)
command -v gdb >/dev/null 2>&1 || packages+=(gdb)
# libfiu (fiu-run and its POSIX preload): the XNNPACK packed-cache tests make one system call
# of the runtime fail (tests/hil/test_xnnpack_branches.py)
[ -f /usr/lib/fiu/fiu_posix_preload.so ] || packages+=(fiu-utils libfiu0 libfiu-dev)
# valgrind: --valgrind runs scenarios' runners under memcheck, helgrind or DRD (docs/valgrind.md)
command -v valgrind >/dev/null 2>&1 || packages+=(valgrind)
# ccache: the compilers' launcher in every runner build (harness/ccache.py), so a build into a
# new directory (a test's own runner cache, CI's arm64 steps) reuses what an earlier one compiled
command -v ccache >/dev/null 2>&1 || packages+=(ccache)
# sshd on 127.0.0.1 is the SSH board of the framework's tests (and of CI step 9)
[ -x /usr/sbin/sshd ] || packages+=(openssh-server)
if [ "${#packages[@]}" -gt 0 ]; then
  if [ "$(id -u)" = 0 ]; then apt_get="apt-get"; else apt_get="sudo apt-get"; fi
  $apt_get update -qq
  DEBIAN_FRONTEND=noninteractive $apt_get install -y -qq "${packages[@]}" >/dev/null
fi

# The package with its dev extra (pyproject.toml): what the framework's own tests and the lint
# step (.ci/run step 0: ruff, mypy and its stubs, import-linter) import.
python3 -m pip install -q --disable-pip-version-check -e '.[dev]'
python3 -m harness doctor
