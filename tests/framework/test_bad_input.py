"""Bad input is one clear usage error at start-up (pytest exit 4, the CLI exit 2), with no
traceback and no hang: an adb port variable that is not a number, a `--pte` that is a symlink
loop or a FIFO, the same device twice, and config files given to `validate-configs`.

Each case is a real `python -m pytest` / `python -m harness` process, as a user starts it.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def run(args: list[str], tmp_path: Path, env: dict[str, str] | None = None,
        timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, *args], cwd=REPO, capture_output=True, text=True,
                          timeout=timeout, env={**os.environ, **(env or {})})


def pytest_args(tmp_path: Path, *extra: str) -> list[str]:
    return ["-m", "pytest", "tests/hil/test_isolation.py", "-p", "no:cacheprovider",
            f"--artifacts-dir={tmp_path / 'artifacts'}", *extra]


def assert_usage_error(proc: subprocess.CompletedProcess, words: str, code: int = 4) -> None:
    out = proc.stdout + proc.stderr
    assert proc.returncode == code, out
    assert words in out, out
    assert "Traceback" not in out and "INTERNALERROR" not in out, out


@pytest.mark.parametrize("port", ["notaport", "", "99999"])
def test_an_adb_server_port_variable_that_is_not_a_port_is_a_usage_error(tmp_path, port):
    proc = run(pytest_args(tmp_path, "--device=127.0.0.1:5555"), tmp_path,
               env={"ANDROID_ADB_SERVER_PORT": port})
    assert_usage_error(proc, "ANDROID_ADB_SERVER_PORT")


def test_a_pte_that_is_a_symlink_loop_is_a_usage_error(tmp_path):
    loop = tmp_path / "loop.pte"
    loop.symlink_to(loop)
    assert_usage_error(run(pytest_args(tmp_path, "--hil-suites", f"--pte={loop}"), tmp_path),
                       "symbolic link loop")
    assert_usage_error(run(["-m", "harness", "inspect", str(loop)], tmp_path),
                       "symbolic link loop", code=1)


def test_a_pte_that_is_a_fifo_is_refused_without_waiting_for_a_writer(tmp_path):
    fifo = tmp_path / "model.pte"
    os.mkfifo(fifo)
    assert_usage_error(run(pytest_args(tmp_path, "--hil-suites", f"--pte={fifo}"), tmp_path,
                           timeout=60), "FIFO")
    assert_usage_error(run(["-m", "harness", "inspect", str(fifo)], tmp_path, timeout=60),
                       "FIFO", code=1)


def test_the_same_device_twice_is_a_usage_error(tmp_path):
    proc = run(pytest_args(tmp_path, "--device=127.0.0.1:5555", "--device=127.0.0.1:5555"),
               tmp_path)
    assert_usage_error(proc, "127.0.0.1:5555 is given more than once")


def test_validate_configs_validates_the_files_it_is_given(tmp_path):
    bad = tmp_path / "socs" / "SM8650.yaml"
    bad.parent.mkdir()
    bad.write_text("soc: SM8650\nhtp_arch: 0\nvtcm_mb: 8\nmemory: {rss_leak_kb: 1}\n")
    good = REPO / "device_configs" / "farms" / "example.yaml"
    proc = run(["-m", "harness", "validate-configs", str(good), str(bad), str(good)], tmp_path)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert f"ok: {good} (farm)" in proc.stdout and proc.stdout.count("ok:") == 1
    assert "htp_arch" in proc.stderr and str(bad) in proc.stderr
    farm = tmp_path / "farm.yaml"
    farm.write_text("devices:\n  - {serial: X, sock: SM8650}\n")
    proc = run(["-m", "harness", "validate-configs", str(farm)], tmp_path)
    assert proc.returncode == 1 and "sock" in proc.stderr, proc.stderr
    proc = run(["-m", "harness", "validate-configs", "--kind", "known-issues", str(farm)], tmp_path)
    assert proc.returncode == 1 and "known-issues" in proc.stderr, proc.stderr
    unknown = tmp_path / "what.yaml"
    unknown.write_text("a: 1\n")
    assert_usage_error(run(["-m", "harness", "validate-configs", str(unknown)], tmp_path),
                       "--kind", code=2)
    assert_usage_error(run(["-m", "harness", "validate-configs", str(tmp_path / "no.yaml")],
                           tmp_path), "no.yaml", code=2)


def not_files(tmp_path: Path) -> dict[str, Path]:
    directory = tmp_path / "configs"
    directory.mkdir()
    fifo = tmp_path / "farm.yaml"
    os.mkfifo(fifo)
    return {"directory": directory, "FIFO": fifo}


@pytest.mark.parametrize("option", ["--device-config", "--farm"])
def test_a_config_path_that_is_not_a_regular_file_is_a_usage_error(tmp_path, option):
    """A directory was an INTERNALERROR (IsADirectoryError); a FIFO hung the session."""
    for kind, path in not_files(tmp_path).items():
        proc = run(pytest_args(tmp_path, f"{option}={path}"), tmp_path, timeout=60)
        assert_usage_error(proc, f"{path}: is a {kind}, not a YAML file")


def test_validate_configs_refuses_a_path_that_is_not_a_file_and_exits_1_for_bad_yaml(tmp_path):
    for kind, path in not_files(tmp_path).items():
        for extra in ([], ["--kind", "farm"]):
            proc = run(["-m", "harness", "validate-configs", *extra, str(path)], tmp_path,
                       timeout=60)
            assert_usage_error(proc, f"{path}: is a {kind}", code=2)
    malformed = tmp_path / "broken.yaml"
    malformed.write_text("devices: [\n")
    for extra in ([], ["--kind", "farm"]):  # the same exit with its kind named or told
        proc = run(["-m", "harness", "validate-configs", *extra, str(malformed)], tmp_path)
        assert_usage_error(proc, "malformed YAML", code=1)


NESTED = "collections nested more than 64 levels deep"


def deeply_nested(tmp_path: Path, name: str = "deep.yaml") -> Path:
    """20000 nested `[`: PyYAML's composer recursed once per level, a RecursionError."""
    path = tmp_path / name
    path.write_text("[" * 20000 + "\n")
    return path


@pytest.mark.parametrize("option", ["--known-issues", "--device-config", "--farm"])
def test_a_config_nested_too_deeply_is_one_start_up_error(tmp_path, option):
    """Was `INTERNALERROR> RecursionError`; now one usage error naming the file and the limit."""
    path = deeply_nested(tmp_path)
    proc = run(pytest_args(tmp_path, f"{option}={path}"), tmp_path)
    assert_usage_error(proc, f"{path}: line 1, column 65: malformed YAML: {NESTED}")
    assert (proc.stdout + proc.stderr).count(NESTED) == 1, proc.stdout + proc.stderr


def test_validate_configs_of_a_config_nested_too_deeply_is_one_error(tmp_path):
    """Was a RecursionError traceback; exit 1 as for any malformed YAML, told by place (a
    known-issues file), by --kind, and for block nesting (indentation) as for flow."""
    by_name = deeply_nested(tmp_path, "known_issues_deep.yaml")
    flow = deeply_nested(tmp_path)
    block = tmp_path / "block.yaml"
    block.write_text("".join("  " * i + "- \n" for i in range(3000)))
    for args, path, line in (([str(by_name)], by_name, 1),
                             (["--kind", "known-issues", str(flow)], flow, 1),
                             (["--kind", "soc", str(block)], block, 65)):
        proc = run(["-m", "harness", "validate-configs", *args], tmp_path)
        assert_usage_error(proc, f"{path}: line {line}", code=1)
        assert NESTED in proc.stderr, proc.stderr


def test_yaml_nesting_up_to_the_limit_loads(tmp_path):
    from harness.config.schema import MAX_YAML_DEPTH, load_yaml_node
    from harness.errors import ConfigError

    at_limit = tmp_path / "ok.yaml"
    at_limit.write_text("[" * MAX_YAML_DEPTH + "]" * MAX_YAML_DEPTH + "\n")
    data, _ = load_yaml_node(at_limit)
    for _ in range(MAX_YAML_DEPTH - 1):
        data = data[0] if data else data
    assert data == []
    beyond = tmp_path / "beyond.yaml"
    beyond.write_text("[" * (MAX_YAML_DEPTH + 1) + "]" * (MAX_YAML_DEPTH + 1) + "\n")
    with pytest.raises(ConfigError, match=f"{beyond}: line 1, column {MAX_YAML_DEPTH + 1}: "
                                          f"malformed YAML: {NESTED}"):
        load_yaml_node(beyond)
