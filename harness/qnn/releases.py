"""QNN library releases from the package registry, laid out as a QNN_SDK_ROOT.

The onnxruntime-qnn wheels carry the x86_64 QAIRT libraries (2.3.0: QAIRT 2.47 ... 2.7.0: 2.51).
A standalone reproduction must run on a pairing that needs no ABI bridge (QAIRT 2.49 from
onnxruntime-qnn 2.5.0 reads the HTP device config where executorch 1.5.1 writes it), so the
harness fetches that wheel once (`pip download --no-deps`), unpacks its libraries and lays them
out as upstream's SDK is: `lib/x86_64-linux-clang/` with every library and the wheel's private
libc++ side by side (a symlinked library's $ORIGIN is the link's directory, so its RPATH
`$ORIGIN/../onnxruntime_qnn.libs` would not find them otherwise).
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

from harness.cache import cache_root, file_lock
from harness.errors import SdkError
from harness.qnn.sdk import ALIASES, HOST_LIB
UNBRIDGED = "2.5.0"
"""The onnxruntime-qnn release whose QAIRT (2.49) needs no ABI bridge with executorch 1.5.1."""


def release_root(version: str = UNBRIDGED) -> Path:
    """A QNN_SDK_ROOT holding the libraries of onnxruntime-qnn `version`, made once; SdkError
    with pip's words when the wheel cannot be fetched."""
    root = cache_root() / "qnn-releases" / f"onnxruntime-qnn-{version}"
    with file_lock(root.with_name(root.name + ".lock")):
        if (root / "sdk.yaml").is_file():
            return root
        wheels = cache_root() / "wheels" / "qnn"
        wheels.mkdir(parents=True, exist_ok=True)
        found = sorted(wheels.glob(f"onnxruntime_qnn-{version}-*.whl"))
        if not found:
            proc = subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps",
                                   "--only-binary=:all:", "-d", str(wheels),
                                   f"onnxruntime-qnn=={version}"], capture_output=True, text=True)
            found = sorted(wheels.glob(f"onnxruntime_qnn-{version}-*.whl"))
            if proc.returncode != 0 or not found:
                raise SdkError(f"pip download onnxruntime-qnn=={version} failed: "
                               f"{(proc.stderr or proc.stdout).strip()[-600:]}")
        tmp = root.with_name(root.name + ".tmp")
        shutil.rmtree(tmp, ignore_errors=True)
        with zipfile.ZipFile(found[-1]) as wheel:
            names = [n for n in wheel.namelist()
                     if n.startswith(("onnxruntime_qnn/", "onnxruntime_qnn.libs/"))
                     and (".so" in n or n.endswith("build_and_package_info.py"))]
            wheel.extractall(tmp / "wheel", names)
        lib = tmp / HOST_LIB
        lib.mkdir(parents=True)
        for sub in ("onnxruntime_qnn", "onnxruntime_qnn.libs"):
            for entry in sorted((tmp / "wheel" / sub).glob("*.so*")):
                (lib / entry.name).symlink_to(Path("..") / ".." / "wheel" / sub / entry.name)
        for alias, target in ALIASES.items():
            if (lib / target).exists() and not (lib / alias).exists():
                (lib / alias).symlink_to(target)
        info = (tmp / "wheel" / "onnxruntime_qnn" / "build_and_package_info.py").read_text()
        qairt = re.search(r"qnn_version\s*=\s*'([0-9.]+)'", info)
        (tmp / "sdk.yaml").write_text(
            f"QAIRT {qairt.group(1) if qairt else 'unknown'} (onnxruntime-qnn {version})\n")
        shutil.rmtree(root, ignore_errors=True)
        tmp.rename(root)
    return root


def library_path(root: Path) -> str:
    """LD_LIBRARY_PATH for a process using the libraries of `root`."""
    return str(root / HOST_LIB)
