"""Device config and known-issues validation: errors name the file, the key and the type."""

from pathlib import Path

import pytest

from harness.config import (CONFIG_DIR, known_socs, load_farm, load_soc, simulator_config,
                            soc_config, validate_all)
from harness.errors import ConfigError
from harness.known_issues import KnownIssue, issue_for, load_known_issues


def test_shipped_configs_are_valid():
    checked = validate_all()
    assert {"SM8550.yaml", "SM8650.yaml", "SM8750.yaml", "simulator.yaml"} <= set(checked)
    assert soc_config("SM8650").htp_arch == 75
    assert simulator_config().default_soc in known_socs()


def test_unknown_soc_lists_known_ones():
    with pytest.raises(ConfigError) as exc:
        soc_config("SM1234")
    assert "unknown SoC 'SM1234'" in str(exc.value)
    for soc in ("SM8550", "SM8650", "SM8750"):
        assert soc in str(exc.value)


def write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def test_malformed_yaml_names_file_and_line(tmp_path):
    path = write(tmp_path, "SM8650.yaml", "soc: SM8650\nhtp_arch: [75\nvtcm_mb: 8\n")
    with pytest.raises(ConfigError) as exc:
        load_soc(path)
    assert str(path) in str(exc.value) and "line" in str(exc.value) and "malformed YAML" in str(exc.value)


def test_wrong_type_names_key_and_expected_type(tmp_path):
    text = (CONFIG_DIR / "socs" / "SM8650.yaml").read_text().replace("htp_arch: 75", "htp_arch: v75")
    path = write(tmp_path, "SM8650.yaml", text)
    with pytest.raises(ConfigError, match=r"key 'htp_arch' must be int, got str \('v75'\)"):
        load_soc(path)


def test_missing_nested_key(tmp_path):
    path = write(tmp_path, "SM8650.yaml", "soc: SM8650\nhtp_arch: 75\nvtcm_mb: 8\nmemory: {}\n")
    with pytest.raises(ConfigError, match=r"missing required key 'memory.rss_leak_kb' \(int\)"):
        load_soc(path)


def test_unknown_key_and_mismatched_name(tmp_path):
    base = (CONFIG_DIR / "socs" / "SM8650.yaml").read_text()
    with pytest.raises(ConfigError, match="unknown key"):
        load_soc(write(tmp_path, "SM8650.yaml", base + "vtcm: 8\n"))
    with pytest.raises(ConfigError, match="named for 'SM8550'"):
        load_soc(write(tmp_path, "SM8550.yaml", base))


def test_top_level_must_be_mapping(tmp_path):
    with pytest.raises(ConfigError, match="expected a mapping"):
        load_soc(write(tmp_path, "SM8650.yaml", "- a\n- b\n"))


def test_farm_file(tmp_path):
    adb, devices = load_farm(CONFIG_DIR / "farms" / "example.yaml")
    assert adb and devices[0]["serial"]
    with pytest.raises(ConfigError, match=r"devices\[0\] must be a mapping with a string 'serial'"):
        load_farm(write(tmp_path, "f.yaml", "devices:\n  - 12\n"))


def test_known_issues_file_and_matching(tmp_path):
    issues = load_known_issues()
    assert issues and all(i.reason and i.match for i in issues)
    issue = issue_for("tests/hil/test_isolation.py::test_s1_two_modules_same_program[A]", "1.5.1", issues)
    assert issue is not None and issue.id == "qnn-delegate-cache-module-lifetime"
    assert issue_for("tests/hil/test_isolation.py::test_s1_two_modules_same_program[A]", "1.6.0", issues) is None
    assert issue_for("tests/hil/test_isolation.py::test_s2_methods_share_one_context", "1.5.1", issues) is None
    ranged = KnownIssue("x", ("<=1.5.1",), ("*::test_a",), "r")
    assert ranged.applies_to("1.4.0") and not ranged.applies_to("1.5.2")
    assert ranged.matches("sub/dir/test_x.py::test_a")


@pytest.mark.parametrize("text, message", [
    ("- id: 3\n  executorch: []\n  tests: []\n  reason: r\n", "key 'id' must be str"),
    ("- id: a\n  executorch: 1.5.1\n  tests: []\n  reason: r\n", "key 'executorch' must be list"),
    ("- id: a\n  executorch: []\n  tests: []\n  reason: r\n  match: '('\n", "not a valid regex"),
    ("id: a\n", "expected a list"),
])
def test_bad_known_issues(tmp_path, text, message):
    with pytest.raises(ConfigError, match=message):
        load_known_issues(write(tmp_path, "k.yaml", text))
