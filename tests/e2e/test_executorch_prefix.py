"""The runtime under test as an input: `--executorch-prefix` on an unpacked executorch 1.5.0
wheel (downloaded from the registry once, cached) runs the host suite on that build, names it
everywhere (header, results.json, report title, JUnit), and gives the outcomes the installed
release gives; a directory that is not an ExecuTorch build is one usage error."""

import json
import re
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from harness.cache import cache_root
from harness.runtime import from_prefix
from harness.runtime.envs import RuntimeEnvError, unpacked_wheel

pytest_plugins = ["pytester"]
CACHE = cache_root()
REPO = Path(__file__).resolve().parents[2]
ISOLATION = REPO / "tests" / "hil" / "test_isolation.py"
RELEASE = "1.5.0"


@pytest.fixture(autouse=True)
def shared_cache(monkeypatch):
    monkeypatch.setenv("EXECUTORCH_HIL_CACHE", str(CACHE))
    monkeypatch.delenv("EXECUTORCH_HIL_EXECUTORCH_PREFIX", raising=False)


@pytest.fixture(scope="module")
def prefix() -> Path:
    try:
        return unpacked_wheel(RELEASE)
    except RuntimeEnvError as exc:
        pytest.fail(f"cannot fetch the executorch {RELEASE} wheel: {exc}")


def outcomes(out: Path) -> dict[str, str]:
    doc = json.loads((out / "results.json").read_text())
    return {t["nodeid"]: t["outcome"] for t in doc["tests"]}


def run(pytester, out: Path, *args: str):
    # The whole isolation suite (S1-S4, fp16 and int8: known issues and passes), so the prefix
    # gives every verdict of that suite on that release; CI runs no other prefix session.
    return pytester.runpytest_subprocess(
        str(ISOLATION), "-p", "no:cacheprovider",
        f"--hil-report={out}", f"--junitxml={out / 'junit.xml'}", "-v", *args)


def test_the_suite_on_an_unpacked_wheel_names_that_runtime_and_gives_the_same_outcomes(
        pytester, tmp_path, prefix):
    runtime = from_prefix(prefix)
    assert runtime.version == RELEASE and runtime.origin == "prefix-wheel"
    installed = run(pytester, tmp_path / "installed")
    mine = run(pytester, tmp_path / "prefix", "--executorch-prefix", str(prefix))
    mine.stdout.fnmatch_lines([f"hil: *executorch {RELEASE};*",
                               f"hil: runtime executorch {RELEASE} (git {runtime.git_revision[:10]}, "
                               f"unpacked wheel {prefix}); QNN onnxruntime-qnn * (QAIRT *)"])
    assert outcomes(tmp_path / "prefix") == outcomes(tmp_path / "installed")
    assert set(outcomes(tmp_path / "prefix").values()) == {"passed", "xfailed"}
    assert installed.ret == mine.ret == 0

    doc = json.loads((tmp_path / "prefix" / "results.json").read_text())
    env = doc["environment"]
    assert env["executorch"] == RELEASE
    assert env["runtime"]["version"] == RELEASE and env["runtime"]["origin"] == "prefix-wheel"
    assert env["runtime"]["path"] == str(prefix) and env["runtime"]["git_revision"]
    assert env["qnn"]["qairt"]
    html = (tmp_path / "prefix" / "report.html").read_text()
    assert f"ExecuTorch QNN HIL report (executorch {RELEASE}" in html
    suite = ET.parse(tmp_path / "prefix" / "junit.xml").getroot().find("testsuite")
    facts = {p.get("name"): p.get("value") for p in suite.iterfind("properties/property")}
    assert facts["hil.executorch"] == RELEASE and facts["hil.executorch_origin"] == "prefix-wheel"
    assert facts["hil.executorch_path"] == str(prefix)



def test_the_runner_built_for_a_prefix_loads_the_prefixs_libraries(monkeypatch, prefix):
    from harness.runner.builds.host import build_host_runner

    monkeypatch.setenv("EXECUTORCH_HIL_EXECUTORCH_PREFIX", str(prefix))
    runner = build_host_runner()  # the session's build (same key), cached
    linked = subprocess.run(["ldd", str(runner)], capture_output=True, text=True).stdout
    for lib in ("libexecutorch.so", "libexecutorch_backend_qnn.so"):
        found = re.search(rf"{re.escape(lib)} => (\S+)", linked)
        assert found and Path(found.group(1)).resolve().is_relative_to(prefix.resolve()), linked


@pytest.mark.parametrize("make", ["missing", "empty"])
def test_a_prefix_that_is_not_an_executorch_build_is_one_usage_error(pytester, tmp_path, make):
    path = tmp_path / "nothing"
    if make == "empty":
        path.mkdir()
    result = pytester.runpytest_subprocess(str(ISOLATION), "--executorch-prefix", str(path),
                                           "-p", "no:cacheprovider")
    assert result.ret == 4
    err = result.stderr.str()
    assert "--executorch-prefix" in err and "Traceback" not in err
    assert ("no such directory" if make == "missing" else "not an ExecuTorch build") in err


def test_a_cmake_install_prefix_is_read_from_its_files(tmp_path):
    cmake = tmp_path / "lib" / "cmake" / "ExecuTorch"
    cmake.mkdir(parents=True)
    (cmake / "executorch-config.cmake").write_text("# config\n")
    (cmake / "executorch-config-version.cmake").write_text('set(PACKAGE_VERSION "1.6.0")\n')
    (tmp_path / "git-revision").write_text("1a2b3c4d5e\n")
    runtime = from_prefix(tmp_path)
    assert (runtime.version, runtime.git_revision, runtime.origin) == \
        ("1.6.0", "1a2b3c4d5e", "prefix-install")
    assert runtime.cmake_prefix == tmp_path and runtime.python_path is None
    assert "CMake install prefix" in runtime.describe()


def test_an_arm64_linux_prefix_is_what_an_arm64_device_is_built_against(monkeypatch, tmp_path):
    """An arm64 Linux build of one's own (here: the aarch64 wheel of the installed release,
    unpacked elsewhere) as --executorch-prefix: the arm64 runner's build is keyed by it and
    cross-built against it (the build's commands name it; .ci/run step 4 runs such a build),
    nothing is fetched for it, and the host runner is not built against it."""
    import shutil

    from harness.runner.builds.aarch64_wheel import aarch64_executorch_dir
    from harness.runner.builds.arm64_linux import (
        arm64_linux_available,
        arm64_linux_build_dir,
        arm64_linux_toolchain_text,
    )
    from harness.runner.builds.host import host_runner_available

    default_key = arm64_linux_build_dir()
    wheel = aarch64_executorch_dir()  # the release's own, downloaded once
    mine = tmp_path / "executorch"
    shutil.copytree(wheel / "lib", mine / "lib", symlinks=True)
    shutil.copytree(wheel / "share", mine / "share", symlinks=True)
    monkeypatch.setenv("EXECUTORCH_HIL_EXECUTORCH_PREFIX", str(mine))
    runtime = from_prefix(mine)
    assert runtime.machine == "aarch64" and runtime.python_path is None
    assert aarch64_executorch_dir() == mine
    assert arm64_linux_build_dir() != default_key  # its own cache entry
    toolchain = arm64_linux_toolchain_text(aarch64_executorch_dir())
    assert f'set(CMAKE_PREFIX_PATH "{mine}")' in toolchain
    ok, why = arm64_linux_available()
    assert ok, why
    ok, why = host_runner_available()
    assert not ok and "built for aarch64, not this host" in why


def test_a_prefixs_package_is_not_merged_with_the_installed_one(tmp_path, monkeypatch):
    """executorch is a namespace package: with a prefix's parent on PYTHONPATH, Python would
    merge it with the installed executorch and take what the prefix lacks from the installed
    release. The overlay the harness puts on PYTHONPATH confines executorch.* to the prefix."""
    from harness.runtime import package_overlay

    monkeypatch.setenv("EXECUTORCH_HIL_CACHE", str(tmp_path / "cache"))
    package = tmp_path / "site" / "executorch"
    (package / "exir").mkdir(parents=True)
    (package / "exir" / "__init__.py").write_text("MINE = True\n")
    probe = ("import executorch.exir as e; print(e.MINE)\n"
             "try:\n    import executorch.extension.pybindings\n    print('merged')\n"
             "except ModuleNotFoundError:\n    print('confined')\n")
    overlay = package_overlay(package)
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                         env={"PYTHONPATH": str(overlay), "PATH": "/usr/bin:/bin"})
    assert out.stdout.split() == ["True", "confined"], out.stderr
    merged = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                            env={"PYTHONPATH": str(package.parent), "PATH": "/usr/bin:/bin"})
    assert merged.stdout.split() == ["True", "merged"], merged.stderr  # what the overlay prevents


def broken_copy(prefix: Path, tmp_path: Path, missing: str) -> Path:
    """The unpacked wheel as links, one file left out (`lib/<name>` or `version.py`)."""
    mine = tmp_path / "executorch"
    mine.mkdir()
    for entry in prefix.iterdir():
        if entry.name == "lib":
            (mine / "lib").mkdir()
            for lib in entry.iterdir():
                if f"lib/{lib.name}" != missing:
                    (mine / "lib" / lib.name).symlink_to(lib)
        elif entry.name != missing:
            (mine / entry.name).symlink_to(entry)
    return mine


@pytest.mark.parametrize("missing", ["lib/libexecutorch_backend_qnn.so", "lib/libexecutorch.so",
                                     "version.py"])
def test_a_prefix_missing_a_library_or_its_version_is_one_start_up_error(
        pytester, tmp_path, prefix, missing, monkeypatch):
    """Without the QNN backend 12 tests failed in 92 s ("load_method(prefill) failed:
    Error::NotFound"); without libexecutorch.so, 12 ImportErrors; without version.py the
    session ran as "executorch unknown" and dropped every known issue. Each is one usage error
    at start-up that names the file."""
    monkeypatch.setenv("PYTHONPATH", str(REPO))  # this tree's harness in the session
    mine = broken_copy(prefix, tmp_path, missing)
    result = pytester.runpytest_subprocess(str(ISOLATION), "--executorch-prefix", str(mine),
                                           "-p", "no:cacheprovider", "-n", "0")
    err = result.stderr.str()
    assert result.ret == 4, result.stdout.str() + err
    assert "Traceback" not in err and "--executorch-prefix" in err
    if missing == "version.py":
        assert "version cannot be read (no version.py" in err, err
    else:
        assert f"{mine / missing} is missing" in err, err
