"""Values kept across processes (harness.cache.memo) and config files validated once per content
(harness.config.remembered): a changed file or reader is read again, a damaged entry recomputed,
an error never kept."""

import importlib
from pathlib import Path

import pytest

from harness.cache import CacheRepairWarning, cache_root, memo
from harness.config import SimulatorConfig, _read_simulator, load_soc, simulator_config
from harness.config.paths import CONFIG_DIR
from harness.config.remembered import remembered
from harness.errors import ConfigError

# the module (harness.config's own name `remembered` is the function)
remembered_module = importlib.import_module("harness.config.remembered")


@pytest.fixture(autouse=True)
def _own_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("EXECUTORCH_HIL_CACHE", str(tmp_path / "cache"))


def counted(value=None, error=None):
    calls = []

    def compute(*args):
        calls.append(args)
        if error is not None:
            raise error
        return value

    return compute, calls


def test_memo_computes_once_per_key():
    compute, calls = counted({"a": [1, 2]})
    assert memo("t", ["k"], compute) == {"a": [1, 2]}
    assert memo("t", ["k"], compute) == {"a": [1, 2]}
    assert len(calls) == 1
    assert memo("t", ["other"], compute) == {"a": [1, 2]}
    assert len(calls) == 2


def test_memo_keeps_no_error():
    compute, calls = counted(error=ConfigError("bad"))
    for _ in range(2):
        with pytest.raises(ConfigError, match="bad"):
            memo("t", ["k"], compute)
    assert len(calls) == 2
    assert not list((cache_root() / "memo").rglob("*.memo"))


@pytest.mark.parametrize("damage", [b"", b"x" * 40, "flip"])
def test_memo_recomputes_a_damaged_entry(damage):
    compute, calls = counted([3])
    memo("t", ["k"], compute)
    (entry,) = (cache_root() / "memo" / "t").glob("*.memo")
    if damage == "flip":
        data = bytearray(entry.read_bytes())
        data[-2] ^= 0xFF  # still unpicklable, perhaps: the checksum tells it
        entry.write_bytes(bytes(data))
    else:
        entry.write_bytes(damage)
    with pytest.warns(CacheRepairWarning, match="is damaged"):
        assert memo("t", ["k"], compute) == [3]
    assert len(calls) == 2
    assert memo("t", ["k"], compute) == [3]  # repaired
    assert len(calls) == 2


@pytest.fixture
def project(tmp_path, monkeypatch):
    """A stand-in for CONFIG_DIR and for the package whose reader source keys the values."""
    configs, package = tmp_path / "configs", tmp_path / "package"
    configs.mkdir()
    (package / "config").mkdir(parents=True)
    (package / "config" / "reader.py").write_text("# reader v1\n")
    monkeypatch.setattr(remembered_module, "_CONFIG_DIR", configs.resolve())
    monkeypatch.setattr(remembered_module, "_PACKAGE", package)
    remembered_module._code_stamp.cache_clear()
    yield configs, package
    remembered_module._code_stamp.cache_clear()


def test_a_file_is_read_again_only_when_it_or_its_reader_changes(project):
    configs, package = project
    path = configs / "x.yaml"
    path.write_text("a: 1\n")

    def read(p: Path, text: str | None) -> str:
        calls.append(text)
        return f"value of {text!r}"

    calls: list = []
    assert remembered(path, "x", read, ["config/reader.py"]) == "value of 'a: 1\\n'"
    assert remembered(path, "x", read, ["config/reader.py"]) == "value of 'a: 1\\n'"
    assert calls == ["a: 1\n"]
    path.write_text("a: 2\n")
    assert remembered(path, "x", read, ["config/reader.py"]) == "value of 'a: 2\\n'"
    assert calls == ["a: 1\n", "a: 2\n"]
    (package / "config" / "reader.py").write_text("# reader v2\n")
    remembered_module._code_stamp.cache_clear()  # a new process
    remembered(path, "x", read, ["config/reader.py"])
    assert calls == ["a: 1\n", "a: 2\n", "a: 2\n"]


def test_an_invalid_file_is_never_remembered(project):
    configs, _ = project
    path = configs / "x.yaml"
    path.write_text("bad\n")
    read, calls = counted(error=ConfigError(f"{path}: invalid"))
    for _ in range(2):
        with pytest.raises(ConfigError, match="invalid"):
            remembered(path, "x", read, ["config/reader.py"])
    assert len(calls) == 2


def test_files_outside_the_project_configs_are_read_each_time(project, tmp_path):
    path = tmp_path / "elsewhere.yaml"
    path.write_text("a: 1\n")
    read, calls = counted("v")
    remembered(path, "x", read, ["config/reader.py"])
    remembered(path, "x", read, ["config/reader.py"])
    assert calls == [(path, None), (path, None)]  # the reader reads the file itself


def test_remembered_project_configs_equal_a_fresh_read():
    first = simulator_config()
    assert list((cache_root() / "memo").rglob("*.memo"))
    again = simulator_config()
    assert again == first == _read_simulator(CONFIG_DIR / "simulator.yaml", None)
    assert isinstance(again, SimulatorConfig)
    path = CONFIG_DIR / "socs" / f"{first.default_soc}.yaml"
    assert load_soc(path) == load_soc(path)
