"""The package works from any project when installed from a wheel (not editable).

Builds the wheel from a copy of the checkout (so the checkout's build/ is neither used nor
left behind), installs it without its dependencies into a fresh venv that sees the system
site-packages (torch, executorch, ... are not downloaded again; the venv's own copy shadows
an editable install of the same distribution), and runs the harness from a directory outside
the checkout: the data it needs (device configs, known issues, models, HIL suites) must come
from the installed package's harness/_data/.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
NOT_SOURCES = shutil.ignore_patterns(".git", "build", "dist", "*.egg-info", "__pycache__",
                                     ".hil-artifacts", ".pytest_cache", ".benchmarks")


def _run(cmd: list, cwd: Path, timeout: float = 300) -> subprocess.CompletedProcess:
    # Nothing of this pytest run may leak in: no PYTHONPATH to the checkout, no xdist worker
    # or HIL session ids. The harness cache stays: the installed package builds the same
    # runner and compiles the same programs (keyed by their sources), so it reuses what this
    # run already built instead of building it again in another cache (CI's cache is a new one).
    env = {k: v for k, v in os.environ.items()
           if k != "PYTHONPATH" and not k.startswith(("PYTEST_", "EXECUTORCH_HIL_"))}
    if "EXECUTORCH_HIL_CACHE" in os.environ:
        env["EXECUTORCH_HIL_CACHE"] = os.environ["EXECUTORCH_HIL_CACHE"]
    return subprocess.run([str(c) for c in cmd], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=timeout)


def _ok(proc: subprocess.CompletedProcess) -> str:
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0, f"{proc.args} exited {proc.returncode}:\n{output}"
    return output


@pytest.fixture(scope="module")
def venv(tmp_path_factory) -> Path:
    tmp = tmp_path_factory.mktemp("wheel")
    source = tmp / "source"
    shutil.copytree(REPO_ROOT, source, ignore=NOT_SOURCES)
    _ok(_run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation",
              "--disable-pip-version-check", "-w", tmp / "dist", "."], cwd=source))
    (wheel,) = (tmp / "dist").glob("executorch_qnn_hil-*.whl")
    # --without-pip: the system's pip is visible through --system-site-packages and installs
    # into the venv it runs in; saves seconds of ensurepip.
    _ok(_run([sys.executable, "-m", "venv", "--system-site-packages", "--without-pip",
              tmp / "venv"], cwd=tmp))
    python = tmp / "venv" / "bin" / "python"
    _ok(_run([python, "-m", "pip", "install", "-q", "--no-deps", "--no-index",
              "--disable-pip-version-check", wheel], cwd=tmp))
    return tmp / "venv"


@pytest.fixture
def outside(tmp_path) -> Path:
    assert not tmp_path.resolve().is_relative_to(REPO_ROOT)
    return tmp_path


def test_installed_package_reads_its_own_data(venv, outside):
    out = _ok(_run([venv / "bin" / "python", "-c",
                    "import harness, harness.config.paths as p, sysconfig; "
                    "print(sysconfig.get_path('purelib')); print(harness.__file__); "
                    "print(p.DATA_ROOT); print(p.PACKAGE_PARENT)"], cwd=outside))
    site, init, data_root, parent = out.splitlines()
    site = Path(site)
    assert site.resolve().is_relative_to(venv.resolve())
    assert Path(init) == site / "harness" / "__init__.py"
    assert Path(data_root) == site / "harness" / "_data"
    assert Path(parent) == site
    shipped = {p.relative_to(data_root).as_posix() for p in Path(data_root).rglob("*")
               if p.is_file() and "__pycache__" not in p.parts}
    assert {"device_configs/known_issues.yaml", "device_configs/simulator.yaml",
            "device_configs/socs/SM8650.yaml", "models/linear_relu.py",
            "tests/hil/test_isolation.py", "tests/hil/__init__.py"} <= shipped
    assert {f"tests/hil/{p.name}" for p in (REPO_ROOT / "tests" / "hil").glob("test_*.py")} <= shipped


def test_validate_configs_outside_the_checkout(venv, outside):
    out = _ok(_run([venv / "bin" / "python", "-m", "harness", "validate-configs"], cwd=outside))
    assert "known issue(s)" in out


def test_shipped_suites_are_collected_with_pyargs(venv, outside):
    # --strict-known-issues: a usage error (exit 4) unless every project known issue for this
    # executorch matches a collected test, i.e. they apply to the shipped suites (patterns
    # relative to _data/). ("known issues met" counts only tests that ran and XFAILed.)
    out = _ok(_run([venv / "bin" / "python", "-m", "pytest", "--collect-only", "-q",
                    "-p", "no:cacheprovider", "--strict-known-issues",
                    "--pyargs", "harness._data.tests.hil"], cwd=outside))
    assert "known-issues file not found" not in out
    assert "test_s1_two_modules_same_program" in out
    for suite in (REPO_ROOT / "tests" / "hil").glob("test_*.py"):
        assert f"{suite.name}::" in out, f"{suite.name} not collected:\n{out}"
    assert "matched no collected test" not in out


def test_plugin_is_registered_once(venv, outside):
    (outside / "test_trivial.py").write_text("def test_trivial():\n    pass\n")
    out = _ok(_run([venv / "bin" / "python", "-m", "pytest", "--co", "-q", "--trace-config",
                    "-p", "no:cacheprovider"], cwd=outside))
    assert "Plugin already registered" not in out
    registered = [line for line in out.splitlines()
                  if line.startswith("PLUGIN registered: <module 'harness.plugin'")]
    assert len(registered) == 1, out
    assert f"from '{venv}" in registered[0], registered[0]  # the venv's copy, not the editable one
    assert "1 test collected" in out


@pytest.fixture(scope="module")
def users_program(venv, tmp_path_factory) -> Path:
    """A user's project outside the checkout: their own export script (here the example of
    docs/own-model.md, a model that is not in models/) run with the installed package's QNN
    environment, for SM8650 and SM8750."""
    project = tmp_path_factory.mktemp("users_project")
    shutil.copy(REPO_ROOT / "docs" / "examples" / "export_program.py", project / "export.py")
    python = venv / "bin" / "python"
    exports = _ok(_run([python, "-m", "harness", "env"], cwd=project))
    env_lines = [line.split(" ", 1)[1] for line in exports.splitlines() if line.startswith("export ")]
    for soc in ("SM8650", "SM8750"):
        script = " ; ".join(f"export {line}" for line in env_lines)
        _ok(_run(["bash", "-c", f"{script} ; exec {python} export.py gated_mlp_{soc}.pte {soc}"],
                 cwd=project, timeout=600))
    return project


def test_shipped_suites_on_a_users_program(venv, users_program):
    """Two shipped suites, collected from the installed package by --pyargs, on a user's
    program: what the wheel can break is the packaging (suites, known issues, configs found
    in harness/_data), which these reach; every suite on --pte programs runs from the
    checkout in test_user_program.py and CI's corpus step."""
    proc = _run([venv / "bin" / "python", "-m", "pytest", "-v", "-rxs", "-p", "no:cacheprovider",
                 "--pyargs", "harness._data.tests.hil", "-k", "test_isolation or test_multi_context",
                 "--pte", "gated_mlp_SM8650.pte"],
                cwd=users_program, timeout=1200)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out
    # S1 is the known issue (strict xfail), with the program's name in the test ids; S4 passes.
    assert "XFAIL test_isolation.py::test_s1_two_modules_same_program[gated_mlp_SM8650-A]" in out, out
    assert "known issue qnn-delegate-cache-module-lifetime" in out
    summary = out.strip().splitlines()[-1]
    assert " passed" in summary and "failed" not in summary.replace("xfailed", ""), summary
    # the tests that need two methods or a multi-context build are skipped with that reason
    assert "lacks two methods with QNN delegates" in out
    assert "a build with use_multi_contexts" in out
    # and S4 ran on it and passed
    assert "test_s4_cleanup_and_reload[gated_mlp_SM8650] PASSED" in out, out


def test_a_program_for_another_soc_is_refused(venv, users_program):
    proc = _run([venv / "bin" / "python", "-m", "pytest", "-q", "-p", "no:cacheprovider",
                 "--pyargs", "harness._data.tests.hil", "--pte", "gated_mlp_SM8750.pte"],
                cwd=users_program)
    assert proc.returncode == pytest.ExitCode.USAGE_ERROR, proc.stdout + proc.stderr
    assert "compiled for SM8750" in proc.stderr and "the HTP simulator is SM8650" in proc.stderr


def test_strict_known_issues_in_a_users_project(venv, outside):
    """The project's entries for its own framework tests (which do not ship) are not stale."""
    (outside / "test_trivial.py").write_text("def test_trivial():\n    pass\n")
    out = _ok(_run([venv / "bin" / "python", "-m", "pytest", "-q", "-p", "no:cacheprovider",
                    "--strict-known-issues"], cwd=outside))
    assert "matched no collected test" not in out
