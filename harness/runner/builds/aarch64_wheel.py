"""The executorch aarch64 wheel the arm64-linux runner is built against.

ExecuTorch publishes no C++ SDK for arm64 Linux, but its ``manylinux_2_28_aarch64`` wheel of
a release carries that release's CMake package, headers and shared libraries. So the
arm64-linux build fetches the wheel of the installed executorch version for this Python with
``pip download`` (into ``wheels/`` under the harness cache) and unpacks only its ``lib/``,
``include/`` and ``share/`` (into ``executorch-aarch64/``), once per machine; without network
access a wheel put there by hand is used. An ``--executorch-prefix`` that is an arm64 Linux
build of one's own replaces the wheel and nothing is fetched.
"""

from __future__ import annotations

import shlex
import shutil
import subprocess
import sys
from pathlib import Path

from harness.cache import cache_root, file_lock
from harness.runner.builds import RunnerBuildError
from harness.runtime import executorch_version

AARCH64_WHEEL_PLATFORM = "manylinux_2_28_aarch64"

# Parts of the aarch64 wheel a C++ build needs: the CMake package, headers, libraries.
_WHEEL_PARTS = ("executorch/lib/", "executorch/include/", "executorch/share/")


def python_tag() -> str:
    """This Python's version as pip's --python-version takes it ("3.11")."""
    return f"{sys.version_info.major}.{sys.version_info.minor}"


def aarch64_wheel_download_command(dest: Path, version: str | None = None) -> list[str]:
    """``pip download`` of the executorch aarch64 wheel of the installed version into `dest`."""
    version = version or executorch_version()
    return [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
            "--platform", AARCH64_WHEEL_PLATFORM, "--python-version", python_tag(),
            f"executorch=={version}", "-d", str(dest), "--disable-pip-version-check"]


def aarch64_wheel_paths(version: str) -> tuple[Path, Path]:
    """(download directory, unpack root) of the aarch64 wheel of `version`."""
    root = cache_root()
    return (root / "wheels" / AARCH64_WHEEL_PLATFORM,
            root / "executorch-aarch64" / f"{version}-cp{python_tag().replace('.', '')}")


def aarch64_executorch_dir(version: str | None = None, download: bool = True) -> Path:
    """The ``executorch`` directory of the unpacked aarch64 wheel (its CMake package, headers
    and ``lib/``), fetched with pip and unpacked under the harness cache on first use.

    With ``download=False`` only the path is returned (it may not exist yet). Raises
    RunnerBuildError when pip cannot get the wheel."""
    import zipfile

    from harness.runtime import current

    runtime = current()
    if (version is None and runtime.from_prefix and runtime.machine == "aarch64"
            and runtime.cmake_prefix is not None):
        return runtime.cmake_prefix  # an arm64 Linux build of one's own: built against as is
    version = version or executorch_version()
    if version == "unknown":
        raise RunnerBuildError("executorch is not installed: pip install executorch")
    wheels, root = aarch64_wheel_paths(version)
    package = root / "executorch"
    marker = root / "unpacked.ok"
    if not download or marker.is_file():
        return package
    with file_lock(root.parent / f"{root.name}.lock"):
        if marker.is_file():
            return package
        pattern = f"executorch-{version}-*-{AARCH64_WHEEL_PLATFORM}.whl"
        found = sorted(wheels.glob(pattern))
        if not found:
            wheels.mkdir(parents=True, exist_ok=True)
            cmd = aarch64_wheel_download_command(wheels, version)
            try:
                proc = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
            except (OSError, subprocess.SubprocessError) as exc:
                raise RunnerBuildError(
                    f"cannot run pip to fetch the aarch64 wheel: {exc} (without network "
                    f"access, put the wheel into {wheels} by hand)") from exc
            found = sorted(wheels.glob(pattern))
            if proc.returncode != 0 or not found:
                tail = "\n".join((proc.stdout + proc.stderr).strip().splitlines()[-15:])
                raise RunnerBuildError(
                    f"fetching the executorch {version} {AARCH64_WHEEL_PLATFORM} wheel failed "
                    f"(exit {proc.returncode}) running: {shlex.join(cmd)}\n{tail}\n"
                    f"(without network access, put the wheel into {wheels} by hand)"
                )
        wheel = found[-1]
        tmp = root.with_name(root.name + ".tmp")
        shutil.rmtree(tmp, ignore_errors=True)
        try:
            with zipfile.ZipFile(wheel) as archive:
                members = [n for n in archive.namelist() if n.startswith(_WHEEL_PARTS)]
                archive.extractall(tmp, members)
        except (OSError, zipfile.BadZipFile) as exc:
            shutil.rmtree(tmp, ignore_errors=True)
            raise RunnerBuildError(
                f"cannot unpack {wheel}: {exc} (delete it to download it again)") from exc
        if not (tmp / "executorch" / "share" / "cmake" / "executorch-config.cmake").is_file():
            shutil.rmtree(tmp, ignore_errors=True)
            raise RunnerBuildError(f"{wheel} ships no CMake package (share/cmake): delete it "
                                   "to download it again, or put the executorch "
                                   f"{AARCH64_WHEEL_PLATFORM} wheel of {version} there by hand")
        shutil.rmtree(root, ignore_errors=True)
        tmp.rename(root)
        marker.write_text(f"wheel={wheel.name}\n")
    return package
