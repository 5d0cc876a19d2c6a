"""The ExecuTorch runtime under test: which build it is and where it comes from.

The runtime is an input of a session, not whatever happens to be installed: by default the
installed `executorch` wheel, or with `--executorch-prefix DIR` (ini `hil_executorch_prefix`,
environment `EXECUTORCH_HIL_EXECUTORCH_PREFIX`) a directory of one's own build:

- an unpacked wheel's `executorch/` (holds `version.py` and `share/cmake/executorch-config.cmake`;
  its Python package compiles the models and runs the Python runner), or
- a CMake install prefix (`lib/cmake/ExecuTorch/executorch-config.cmake`; C++ only, so models
  are compiled by the installed package, and the session says so).

The choice travels in the environment variable, so the compile worker, runners and xdist workers
the session starts see the same runtime. Its identity (version, git revision, origin, path) is
read from the files alone, never by importing it: a prefix's Python package may not import in
this interpreter (another torch), and the harness must still name what it tests.
"""

from __future__ import annotations

import dataclasses
import functools
import importlib.metadata
import importlib.util
import os
import re
from pathlib import Path

from harness.errors import ConfigError

PREFIX_ENV = "EXECUTORCH_HIL_EXECUTORCH_PREFIX"

_WHEEL_CMAKE = Path("share") / "cmake" / "executorch-config.cmake"
_INSTALL_CMAKE_DIRS = (Path("lib") / "cmake" / "ExecuTorch", Path("lib64") / "cmake" / "ExecuTorch")


@dataclasses.dataclass(frozen=True)
class Runtime:
    """One ExecuTorch build: what the session names and what the runners are built against."""

    version: str  # PEP 440 where known ("1.5.1", "1.6.0a0+git1a2b3c4"), else "unknown"
    git_revision: str | None  # the commit it was built from, where the build records it
    origin: str  # "wheel" (the installed package), "prefix-wheel" or "prefix-install"
    path: Path | None  # the package directory or the prefix
    cmake_prefix: Path | None  # CMAKE_PREFIX_PATH for a C++ runner; None: no CMake package
    lib_dir: Path | None  # its shared libraries (libexecutorch.so, the QNN backend)
    python_package: Path | None  # its Python package (with exir/) where it has one for this host
    machine: str | None = None  # what its libraries are built for: x86_64, aarch64, android-aarch64

    @property
    def has_native_libraries(self) -> bool:
        return self.lib_dir is not None and any(self.lib_dir.glob("libexecutorch.so*"))

    @property
    def from_prefix(self) -> bool:
        return self.origin.startswith("prefix")

    def describe(self) -> str:
        """One line: `executorch 1.5.0 (git 3b60683923, unpacked wheel /x/executorch)`."""
        where = {"wheel": "installed wheel", "prefix-wheel": "unpacked wheel",
                 "prefix-install": "CMake install prefix"}.get(self.origin, self.origin)
        parts = [f"git {self.git_revision[:10]}"] if self.git_revision else []
        parts.append(f"{where} {self.path}" if self.path else where)
        return f"executorch {self.version} ({', '.join(parts)})"

    def facts(self) -> dict:
        """What results.json and the report keep of it."""
        return {"version": self.version, "git_revision": self.git_revision,
                "origin": self.origin, "path": str(self.path) if self.path else None}

    @property
    def built_against_qairt(self) -> str | None:
        """The QAIRT SDK the runtime was built and released with, as its own package states it
        (backends/qualcomm/scripts: qnn_config.sh's QNN_VERSION, else download_qnn_sdk.py's
        default, "2.37.0.250724" for 1.5.1), read as text; None where the package has neither."""
        package = self.python_package or self.path
        if package is None:
            return None
        scripts = Path(package) / "backends" / "qualcomm" / "scripts"
        for name, pattern in (("qnn_config.sh", r'^QNN_VERSION="?([0-9][0-9.]*)'),
                              ("download_qnn_sdk.py",
                               r'QNN_VERSION"\s*,\s*"([0-9][0-9.]*)"')):
            try:
                text = (scripts / name).read_text()
            except OSError:
                continue
            found = re.search(pattern, text, re.MULTILINE)
            if found:
                return found.group(1)
        return None

    @property
    def python_path(self) -> Path | None:
        """The directory to put first on a child's PYTHONPATH so that `import executorch` is this
        runtime's package and nothing else; None: the installed one."""
        return None if self.python_package is None else package_overlay(self.python_package)


def package_overlay(package: Path) -> Path:
    """A directory holding `executorch/__init__.py` that sets the package's `__path__` to
    `package` alone (and the wheel's dist-info beside it), made once in the harness cache.

    executorch ships as a namespace package (no `__init__.py`), so with the prefix's parent on
    PYTHONPATH Python merges it with the installed executorch: a module the prefix lacks
    (1.4.x has no `pybindings/_C`) would be imported from the installed release. A regular
    package with an explicit `__path__` confines every `executorch.*` import to the prefix."""
    from harness.cache import cache_root, digest

    root = cache_root() / "executorch-overlays" / digest([str(package)])[:16]
    init = root / "executorch" / "__init__.py"
    text = (f"# Made by the harness: this runtime's package only ({package}).\n"
            f"__path__ = [{str(package)!r}]\n")
    if not init.is_file() or init.read_text() != text:
        init.parent.mkdir(parents=True, exist_ok=True)
        for info in package.parent.glob("executorch-*.dist-info"):
            link = root / info.name
            if not link.exists():
                link.symlink_to(info)
        tmp = init.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(text)
        tmp.replace(init)
    return root


def current() -> Runtime:
    """The session's runtime: the prefix named by the environment, else the installed wheel."""
    return _resolve(os.environ.get(PREFIX_ENV) or None)


def executorch_version() -> str:
    """The version of the runtime under test (the installed wheel, or `--executorch-prefix`);
    read once per runtime, every scenario run asks."""
    return current().version


def select(prefix: str | Path | None) -> Runtime:
    """Make `prefix` (None: the installed wheel) the runtime of this process and its children;
    a ConfigError says what is wrong with a directory that is not an ExecuTorch build."""
    if prefix is None or str(prefix) == "":
        os.environ.pop(PREFIX_ENV, None)
        return current()
    resolved = str(Path(prefix).expanduser().resolve())
    runtime = _resolve(resolved)
    os.environ[PREFIX_ENV] = resolved
    return runtime


@functools.cache
def _resolve(prefix: str | None) -> Runtime:
    if prefix is None:
        return _installed()
    return from_prefix(Path(prefix))


def from_prefix(path: Path) -> Runtime:
    """The runtime in `path`: an unpacked wheel's `executorch/` or a CMake install prefix."""
    path = Path(path)
    if not path.is_dir():
        raise ConfigError(f"--executorch-prefix {path}: no such directory; pass an unpacked "
                          "wheel's executorch/ directory or an ExecuTorch CMake install prefix")
    if (path / "executorch" / _WHEEL_CMAKE).is_file():  # the wheel's top, not its package
        path = path / "executorch"
    if (path / _WHEEL_CMAKE).is_file():
        version, git = _version_py(path / "version.py")
        dist = _dist_info_version(path.parent)
        machine = library_machine(path / "lib")
        # Its Python package compiles the models only where its extensions run (this host).
        runs_here = machine in (None, host_machine())
        python = path if (path / "exir").is_dir() and runs_here else None
        return Runtime(dist or version or "unknown", git, "prefix-wheel", path, path,
                       path / "lib", python, machine)
    for cmake_dir in _INSTALL_CMAKE_DIRS:
        if (path / cmake_dir / "executorch-config.cmake").is_file():
            version = _cmake_package_version(path / cmake_dir / "executorch-config-version.cmake")
            git = _install_git_revision(path)
            lib = path / cmake_dir.parts[0]
            return Runtime(version or "unknown", git, "prefix-install", path, path, lib, None,
                           library_machine(lib))
    raise ConfigError(
        f"--executorch-prefix {path}: not an ExecuTorch build: expected an unpacked wheel's "
        f"executorch/ (with {_WHEEL_CMAKE}) or a CMake install prefix (with "
        f"{_INSTALL_CMAKE_DIRS[0]}/executorch-config.cmake, from `cmake --install`)")


QNN_BACKEND_LIBRARY = "libexecutorch_backend_qnn.so"


def start_up_problem(runtime: Runtime) -> str:
    """What makes `runtime` (a --executorch-prefix) unusable for a session, "" when nothing:
    its version must be known (known issues are keyed by it: with "unknown" every one was
    dropped without a word and their tests FAILED), and an unpacked wheel built for this host
    must hold the libraries its runners load (without libexecutorch.so every Python runner
    failed on an ImportError; without the QNN backend every load_method failed with
    Error::NotFound and an empty log)."""
    if not runtime.from_prefix:
        return ""
    where = f"--executorch-prefix {runtime.path}"
    if runtime.version == "unknown":
        wanted = ("version.py (with __version__) or an executorch-*.dist-info beside it"
                  if runtime.origin == "prefix-wheel" else
                  "executorch-config-version.cmake (from `cmake --install`)")
        return (f"{where}: its ExecuTorch version cannot be read (no {wanted}); the known "
                "issues are keyed by version, so none would apply. Restore that file, or "
                "pass a complete build")
    if runtime.origin == "prefix-wheel" and runtime.machine in (None, host_machine()):
        lib = Path(runtime.lib_dir or Path(runtime.path or ".") / "lib")
        for name in ("libexecutorch.so", QNN_BACKEND_LIBRARY):
            found = [p for p in sorted(lib.glob(name + "*")) if p.is_file()]
            if not found:
                return (f"{where}: {lib / name} is missing; an unpacked executorch wheel "
                        "holds it, and the runners load it. Unpack the whole wheel")
            with found[0].open("rb") as fh:
                head = fh.read(4)
            if head != b"\x7fELF":
                return f"{where}: {found[0]} is not a shared library (empty or damaged)"
    return ""


def host_machine() -> str:
    import platform

    return {"amd64": "x86_64", "arm64": "aarch64"}.get(platform.machine().lower(),
                                                        platform.machine().lower())


_ELF_MACHINES = {62: "x86_64", 183: "aarch64"}


def library_machine(lib_dir: Path) -> str | None:
    """What the runtime's libraries in `lib_dir` are built for, from libexecutorch's ELF header
    (e_machine), with "android-" before bionic builds (their `.note.android.ident` note names
    "Android"); None when there is no such library."""
    for pattern in ("libexecutorch.so*", "libexecutorch.a", "libexecutorch_core.a"):
        for path in sorted(Path(lib_dir).glob(pattern)):
            try:
                with path.open("rb") as fh:
                    head = fh.read(1 << 16)
            except OSError:
                continue
            if head[:4] == b"\x7fELF":
                machine = _ELF_MACHINES.get(int.from_bytes(head[18:20], "little"), "other")
                return f"android-{machine}" if b"Android\0" in head else machine
            if head[:8] == b"!<arch>\n":  # a static archive: the first member's ELF header
                at = head.find(b"\x7fELF")
                if at >= 0:
                    machine = _ELF_MACHINES.get(int.from_bytes(head[at + 18:at + 20], "little"),
                                                "other")
                    return machine
    return None


def _installed() -> Runtime:
    try:
        version = importlib.metadata.version("executorch")
    except importlib.metadata.PackageNotFoundError:
        return Runtime("unknown", None, "wheel", None, None, None, None)
    spec = importlib.util.find_spec("executorch")
    package = Path(next(iter(spec.submodule_search_locations))) if spec and \
        spec.submodule_search_locations else None
    git = _version_py(package / "version.py")[1] if package else None
    cmake = package if package and (package / _WHEEL_CMAKE).is_file() else None
    return Runtime(version, git, "wheel", package, cmake,
                   package / "lib" if package else None, None, host_machine())


def _version_py(path: Path) -> tuple[str | None, str | None]:
    """(`__version__`, `git_version`) of an executorch version.py, read as text."""
    try:
        text = path.read_text()
    except OSError:
        return None, None
    version = re.search(r"""__version__\s*=\s*['"]([^'"]+)['"]""", text)
    git = re.search(r"""git_version[^=]*=\s*['"]([0-9a-f]{7,40})['"]""", text)
    return (version.group(1) if version else None, git.group(1) if git else None)


def _dist_info_version(site: Path) -> str | None:
    """The version in an unpacked wheel's `executorch-<version>.dist-info` next to the package."""
    for info in sorted(site.glob("executorch-*.dist-info")):
        try:
            meta = (info / "METADATA").read_text()
        except OSError:
            continue
        found = re.search(r"^Version:\s*(\S+)", meta, re.MULTILINE)
        if found:
            return found.group(1)
    return None


def _cmake_package_version(path: Path) -> str | None:
    try:
        found = re.search(r'set\(PACKAGE_VERSION\s+"([^"]+)"\)', path.read_text())
    except OSError:
        return None
    return found.group(1) if found else None


def _install_git_revision(prefix: Path) -> str | None:
    """A CMake install prefix records no revision of its own; the harness reads one from a
    `git-revision` file an engineer (or a build script) may leave in the prefix."""
    try:
        text = (prefix / "git-revision").read_text().strip()
    except OSError:
        return None
    return text if re.fullmatch(r"[0-9a-f]{7,40}", text) else None


def qairt_version(sdk) -> str | None:
    """The QAIRT version of the session's QNN libraries (`harness.qnn.sdk.QnnSdk`), e.g.
    "2.51.0"; None when it cannot be told."""
    if sdk.version.startswith("onnxruntime-qnn"):
        return _onnxruntime_qnn_qairt(str(sdk.real_lib_dir))
    text = sdk.version.strip()
    found = re.search(r"(\d+\.\d+\.\d+)", text)
    return found.group(1) if found else None


@functools.cache
def _onnxruntime_qnn_qairt(lib_dir: str) -> str | None:
    """`qnn_version` of an onnxruntime-qnn package, read from its build_and_package_info.py
    (the wheel of another environment is read as text, not imported)."""
    try:
        text = (Path(lib_dir) / "build_and_package_info.py").read_text()
    except OSError:
        return None
    found = re.search(r"""qnn_version\s*=\s*['"]([^'"]+)['"]""", text)
    return found.group(1) if found else None
