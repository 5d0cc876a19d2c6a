"""Finds the QNN libraries and lays out the SDK root a child process uses.

Two sources, in order: `QNN_SDK_ROOT` when it holds a full SDK (`lib/x86_64-linux-clang/
libQnnHtp.so`), else the `onnxruntime-qnn` wheel, which ships the x86_64 QAIRT libraries (HTP
simulator and graph prepare) but no SDK layout. Either way the harness lays out its own root in
the cache: `lib/x86_64-linux-clang/libQnnHtp.so` is the interposer, every other library a
symlink to the real one, and the interposer loads the real libQnnHtp.so by its real path (its
RPATH is `$ORIGIN`-relative, which a symlink would break). The environment must be set before
the process starts (the dynamic loader reads LD_LIBRARY_PATH once), so QNN work always runs in a
child process with `environment()`.
"""

from __future__ import annotations

import dataclasses
import importlib.metadata
import importlib.util
import os
from pathlib import Path

from harness.cache import cache_root, digest, file_lock
from harness.errors import SdkError
from harness.qnn.interposer_build import build_interposer

HOST_LIB = Path("lib") / "x86_64-linux-clang"
REQUIRED = ("libQnnHtp.so", "libQnnSystem.so")
# ExecuTorch looks for libQnnHtpPrepare.so; the wheel calls it libHtpPrepare.so.
ALIASES = {"libQnnHtpPrepare.so": "libHtpPrepare.so"}

# QNN core API version each ExecuTorch release was built against. ExecuTorch prints it itself:
# "Qnn API version 2.40.0 is used. The version is tested against 2.27.0." Its headers say where
# the union of QnnHtpDevice_CustomConfig_t lies (HTP_DEVICE_UNION_AT); the interposer re-lays
# custom device configs when the library reads it elsewhere. Override with --qnn-abi-bridge /
# HARNESS_QNN_ABI_BRIDGE.
BUILT_AGAINST_CORE_API = {"1.5.1": "2.27"}
DEFAULT_BUILT_AGAINST = "2.27"
UNLOADABLE_ENV = "HARNESS_QNN_UNLOADABLE"
""""1": the real libQnnHtp.so can be unloaded, so the interposer pins nothing; else it pins
itself (see harness/qnn/interposer.c)."""

# Where libQnnHtp.so reads the union of QnnHtpDevice_CustomConfig_t (byte 4 or 8), by the QNN
# core API version (major.minor) it reports. Measured with deviceCreate of one SOC config
# (SM8650) written at each offset: the wrong one fails with "Failed to set scatter gather
# parameters: unknown custom config socModel 0". The union did not move once: QAIRT 2.49
# (onnxruntime-qnn 2.5.0, core API 2.38.0, backend 5.49.0) reads it at byte 4 like the 2.37
# headers (core API 2.27) executorch 1.5.1 was built with; 2.47, 2.48, 2.50 and 2.51
# (onnxruntime-qnn 2.3.0, 2.4.0, 2.6.0, 2.7.0; core API 2.36, 2.37, 2.39, 2.40) at byte 8. A
# version not listed is not guessed: a custom device config fails with a message naming it.
HTP_DEVICE_UNION_AT = {"2.27": 4, "2.36": 8, "2.37": 8, "2.38": 4, "2.39": 8, "2.40": 8}


def bridge_environment(bridge: str = "auto") -> dict[str, str]:
    """The interposer's ABI bridge settings: forced on/off, or the table it decides from."""
    return {
        "HARNESS_QNN_ABI_BRIDGE": {"on": "1", "off": "0"}.get(bridge, "auto"),
        "HARNESS_QNN_UNION_AT": ",".join(f"{api}:{at}" for api, at in HTP_DEVICE_UNION_AT.items()),
        "HARNESS_QNN_CALLER_API": built_against_core_api(),
    }


TRACE_ENV = "HARNESS_QNN_TRACE"
"""Where the interposer appends the QNN call trace (read at every call, so it may change per run
in a forked process)."""


@dataclasses.dataclass(frozen=True)
class QnnSdk:
    """A usable set of host QNN libraries and the root laid out for them."""

    source: str  # "QNN_SDK_ROOT" or "onnxruntime-qnn <version>"
    real_lib_dir: Path  # where the real libQnnHtp.so lives
    extra_lib_dirs: tuple[Path, ...]  # its private dependencies (libc++ of the wheel)
    root: Path  # the laid-out root (QNN_SDK_ROOT for children)
    version: str  # QAIRT/wheel version, part of compile cache keys

    @property
    def lib_dir(self) -> Path:
        return self.root / HOST_LIB

    @property
    def library_unloads(self) -> bool:
        """Whether the real libQnnHtp.so leaves the process when closed (measured once)."""
        from harness.qnn.unload_probe import library_unloads

        return library_unloads(self.real_lib_dir / "libQnnHtp.so",
                               (self.real_lib_dir, *self.extra_lib_dirs))

    def environment(self, trace: Path | None = None, bridge: str = "auto") -> dict[str, str]:
        """Variables a child process needs to run QNN on the HTP simulator."""
        search = [str(self.lib_dir), str(self.real_lib_dir), *map(str, self.extra_lib_dirs)]
        inherited = os.environ.get("LD_LIBRARY_PATH")
        if inherited:
            search.append(inherited)
        env = {
            "QNN_SDK_ROOT": str(self.root),
            "LD_LIBRARY_PATH": ":".join(search),
            "HARNESS_QNN_REAL_HTP": str(self.real_lib_dir / "libQnnHtp.so"),
            # The interposer goes with the runtime's dlclose only where the real library can
            # be unloaded too (harness.qnn.unload_probe); elsewhere it pins itself.
            UNLOADABLE_ENV: "1" if self.library_unloads else "0",
            **bridge_environment(bridge),
        }
        if trace is not None:
            env[TRACE_ENV] = str(trace)
        return env


    def device_environment(self, bridge: str = "auto") -> dict[str, str]:
        """What an x86_64 stand-in phone (the loopback device) provides to its processes: the
        real libraries' directories, but not the interposer, which the harness pushes."""
        env = self.environment(None, bridge)
        env["LD_LIBRARY_PATH"] = ":".join(
            [str(self.real_lib_dir), *map(str, self.extra_lib_dirs)])
        return env


def built_against_core_api() -> str:
    from harness.runtime import executorch_version

    version = executorch_version().split("+")[0]
    return BUILT_AGAINST_CORE_API.get(version, DEFAULT_BUILT_AGAINST)


def _from_env_root(root: Path) -> tuple[Path, tuple[Path, ...], str]:
    lib = root / HOST_LIB
    missing = [name for name in REQUIRED if not (lib / name).exists()]
    if missing:
        raise SdkError(
            f"QNN_SDK_ROOT={root} has no {', '.join(missing)} under {HOST_LIB}; point "
            "QNN_SDK_ROOT at a full QAIRT SDK, or unset it to use the simulator libraries of "
            "the onnxruntime-qnn wheel (`pip install onnxruntime-qnn==2.7.0`)."
        )
    version_file = root / "sdk.yaml"
    version = version_file.read_text()[:200] if version_file.exists() else root.name
    return lib, (), version


def _from_wheel() -> tuple[Path, tuple[Path, ...], str]:
    spec = importlib.util.find_spec("onnxruntime_qnn")
    if spec is None or not spec.submodule_search_locations:
        raise SdkError(
            "No QNN libraries found: set QNN_SDK_ROOT to a QAIRT SDK, or install the HTP "
            "simulator libraries with `pip install onnxruntime-qnn==2.7.0`."
        )
    lib = Path(next(iter(spec.submodule_search_locations)))
    missing = [name for name in REQUIRED if not (lib / name).exists()]
    if missing:
        raise SdkError(f"the onnxruntime-qnn wheel at {lib} lacks {', '.join(missing)}; "
                       "reinstall it with `pip install --force-reinstall onnxruntime-qnn==2.7.0`.")
    libs = lib.parent / "onnxruntime_qnn.libs"
    version = importlib.metadata.version("onnxruntime-qnn")
    return lib, ((libs,) if libs.is_dir() else ()), f"onnxruntime-qnn {version}"


def discover() -> QnnSdk:
    """Find the QNN libraries and lay out (once, cached) the root children use."""
    env_root = os.environ.get("QNN_SDK_ROOT")
    if env_root and not Path(env_root, ".harness-layout").exists():
        real, extra, version = _from_env_root(Path(env_root))
        source = "QNN_SDK_ROOT"
    else:
        real, extra, version = _from_wheel()
        source = version
    interposer = build_interposer()
    key = digest([str(real), version, str(interposer)])
    root = cache_root() / "qnn-sdk" / key
    with file_lock(root.parent / f"{key}.lock"):
        if not (root / ".harness-layout").exists():
            _lay_out(root, real, interposer)
    return QnnSdk(source, real, extra, root, version)


def _lay_out(root: Path, real: Path, interposer: Path) -> None:
    lib = root / HOST_LIB
    lib.mkdir(parents=True, exist_ok=True)
    for entry in real.iterdir():
        if entry.suffix == ".so" and entry.name != "libQnnHtp.so":
            _symlink(lib / entry.name, entry)
    for alias, target in ALIASES.items():
        if (real / target).exists() and not (real / alias).exists():
            _symlink(lib / alias, real / target)
    _symlink(lib / "libQnnHtp.so", interposer)
    (root / ".harness-layout").write_text(f"real={real}\n")


def _symlink(link: Path, target: Path) -> None:
    if link.is_symlink() or link.exists():
        link.unlink()
    link.symlink_to(target)
