"""Device config and known-issues validation: errors name the file, line, key and type."""

import re
import subprocess
import sys
from pathlib import Path

import pytest

from harness.commands.configs import validate_all
from harness.config import (CONFIG_DIR, known_socs, load_farm, load_soc, simulator_config,
                            soc_config, soc_for_board_platform)
from harness.config.files import FarmFile
from harness.errors import ConfigError


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
    with pytest.raises(ConfigError,
                       match=r"line 3: htp_arch: Input should be a valid integer, got str 'v75'"):
        load_soc(path)


def test_missing_nested_key(tmp_path):
    path = write(tmp_path, "SM8650.yaml", "soc: SM8650\nhtp_arch: 75\nvtcm_mb: 8\nmemory: {}\n")
    with pytest.raises(ConfigError, match=r"line 4: memory.rss_leak_kb: Field required "
                                          r"\(missing required key, expected int\)"):
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
    with pytest.raises(ConfigError, match=r"line 2: devices\[0\]: Input should be a valid dict"):
        load_farm(write(tmp_path, "f.yaml", "devices:\n  - 12\n"))



SOC_TEXT = (CONFIG_DIR / "socs" / "SM8650.yaml").read_text()


def line_of(text: str, needle: str) -> int:
    """1-based line of the first line of `text` containing `needle`."""
    return next(i for i, line in enumerate(text.splitlines(), 1) if needle in line)


def soc_error(tmp_path: Path, text: str, name: str = "SM8650.yaml") -> str:
    path = write(tmp_path, name, text)
    with pytest.raises(ConfigError) as exc:
        load_soc(path)
    message = str(exc.value)
    assert message.splitlines()[0] == f"{path}: invalid SoC config:"
    return message


def test_misspelt_nested_key_names_file_line_key_and_suggestion(tmp_path):
    text = SOC_TEXT.replace("htp_context_kb:", "htp_context_kbb:")
    message = soc_error(tmp_path, text)
    line = line_of(text, "htp_context_kbb")
    assert line > 1
    assert (f"line {line}: memory.htp_context_kbb: Extra inputs are not permitted "
            "(unknown key; allowed here: dsp_heap_context_kb, dsp_heap_leak_kb, htp_context_kb, "
            "rss_leak_kb, soak_heap_bytes_per_cycle, soak_rss_kb_per_cycle); "
            "did you mean 'htp_context_kb'?") in message


def test_misspelt_timeout_key(tmp_path):
    text = SOC_TEXT.replace("runner_s:", "runner_ss:")
    message = soc_error(tmp_path, text)
    assert f"line {line_of(text, 'runner_ss')}: timeouts.runner_ss: " in message
    assert "did you mean 'runner_s'?" in message


def test_unknown_top_level_key_lists_allowed_keys(tmp_path):
    message = soc_error(tmp_path, SOC_TEXT + "vtcm: 8\n")
    assert "vtcm: Extra inputs are not permitted (unknown key; allowed here: board_platforms, " \
           "htp_arch, memory, name, soc, timeouts, vtcm_mb); did you mean 'vtcm_mb'?" in message


def test_strict_types_are_not_coerced(tmp_path):
    text = SOC_TEXT.replace("htp_arch: 75", 'htp_arch: "75"')
    message = soc_error(tmp_path, text)
    assert f"line {line_of(text, 'htp_arch')}: htp_arch: Input should be a valid integer, " \
           "got str '75'" in message
    # a bool is not an int either; an int where a float is expected is fine
    assert "htp_arch: Input should be a valid integer, got bool True" in \
        soc_error(tmp_path, SOC_TEXT.replace("htp_arch: 75", "htp_arch: true"))
    path = write(tmp_path, "SM8650.yaml", SOC_TEXT.replace("runner_s: 120", "runner_s: 90"))
    assert load_soc(path).runner_timeout_s == 90.0


def test_missing_required_nested_key_names_parent_line(tmp_path):
    text = re.sub(r"  rss_leak_kb: \d+\n", "", SOC_TEXT)
    message = soc_error(tmp_path, text)
    assert (f"line {line_of(text, 'memory:')}: memory.rss_leak_kb: Field required "
            "(missing required key, expected int)") in message


def test_optional_nested_keys_default(tmp_path):
    path = write(tmp_path, "SM8650.yaml",
                 "soc: SM8650\nhtp_arch: 75\nvtcm_mb: 8\nmemory:\n  rss_leak_kb: 1\n")
    config = load_soc(path)
    assert (config.htp_context_kb, config.runner_timeout_s, config.board_platforms, config.name) \
        == (0, 120.0, (), "")


def test_every_error_of_the_file_is_reported_in_line_order(tmp_path):
    text = ("soc: SM8650\n"             # 1
            "htp_arch: v75\n"           # 2
            "vtcm_mb: 8\n"              # 3
            "memory:\n"                 # 4: rss_leak_kb missing
            "  htp_context_kbb: 1\n"    # 5
            "timeouts: {runner_ss: 5}\n"  # 6
            "board_platforms: sun\n")   # 7
    lines = soc_error(tmp_path, text).splitlines()[1:]
    assert [line.split(":")[0].strip() for line in lines] == \
        ["line 2", "line 4", "line 5", "line 6", "line 7"]
    assert [line.split(":")[1].strip() for line in lines] == \
        ["htp_arch", "memory.rss_leak_kb", "memory.htp_context_kbb", "timeouts.runner_ss",
         "board_platforms"]


def test_top_level_not_a_mapping_or_empty(tmp_path):
    for text, got in (("- a\n- b\n", "a list"), ("", "an empty file"), ("# only a comment\n",
                                                                         "an empty file"),
                      ("just a string\n", "str")):
        with pytest.raises(ConfigError, match=f"invalid SoC config: expected a mapping at the top "
                                              f"level, got {got}"):
            load_soc(write(tmp_path, "SM8650.yaml", text))


def test_simulator_kind_and_nested_keys(tmp_path):
    write(tmp_path, "simulator.yaml",
          "kind: simulatr\ndefault_soc: SM8650\nmemory: {rss_leak_kb: 1, htp_context_kb: 2}\n")
    with pytest.raises(ConfigError) as exc:
        simulator_config(tmp_path)
    message = str(exc.value)
    assert "simulator.yaml: invalid simulator config:" in message
    assert "line 1: kind: Input should be 'simulator', got str 'simulatr'" in message
    assert "line 3: memory.htp_context_kb: Extra inputs are not permitted" in message


def farm_error(tmp_path: Path, text: str) -> str:
    path = write(tmp_path, "farm.yaml", text)
    with pytest.raises(ConfigError) as exc:
        load_farm(path)
    message = str(exc.value)
    assert message.startswith(f"{path}: invalid farm file")
    return message


def test_farm_entry_unknown_key(tmp_path):
    message = farm_error(tmp_path, "adb_server: h:5037\ndevices:\n  - serial: a\n"
                                   "  - serial: b\n    sco: SM8750\n")
    assert "line 5: devices[1].sco: Extra inputs are not permitted (unknown key; allowed here: " \
           "serial, soc); did you mean 'soc'?" in message


def test_farm_devices_must_not_be_empty(tmp_path):
    assert "line 2: devices: List should have at least 1 item" in \
        farm_error(tmp_path, "adb_server: h:5037\ndevices: []\n")
    assert "line 1: devices: Field required" in farm_error(tmp_path, "adb_server: h:5037\n")


def test_farm_serial_must_be_a_string(tmp_path):
    assert "line 2: devices[0].serial: Input should be a valid string, got int 12345 (quote it" \
        in farm_error(tmp_path, "devices:\n  - serial: 12345\n")


def test_farm_entries_keep_soc_only_when_set(tmp_path):
    adb, devices = load_farm(write(tmp_path, "farm.yaml", "devices:\n  - serial: a\n"
                                                          "  - {serial: b, soc: SM8750}\n"))
    assert adb is None and devices == [{"serial": "a"}, {"serial": "b", "soc": "SM8750"}]


def test_validate_data_formats_without_lines():
    from harness.config.schema import validate_data

    with pytest.raises(ConfigError) as exc:
        validate_data({"devices": [{"serial": "a", "sco": "x"}]}, FarmFile, source="--farm",
                      what="farm")
    assert str(exc.value).splitlines() == [
        "--farm: invalid farm:",
        "  devices[0].sco: Extra inputs are not permitted (unknown key; allowed here: serial, "
        "soc); did you mean 'soc'?"]


def test_board_platforms():
    assert soc_for_board_platform("pineapple") == "SM8650"
    assert soc_for_board_platform("kalama") == "SM8550"
    assert soc_for_board_platform("sun") == "SM8750"
    assert soc_for_board_platform("unknown-platform") is None
    assert soc_for_board_platform("") is None
    assert soc_config("SM8650").board_platforms == ("pineapple",)


def test_board_platform_in_two_socs_is_an_error(tmp_path):
    (tmp_path / "socs").mkdir()
    for soc in ("SM8550", "SM8650"):
        text = SOC_TEXT.replace("SM8650", soc)
        (tmp_path / "socs" / f"{soc}.yaml").write_text(text)
    with pytest.raises(ConfigError, match="'pineapple' is listed in the configs of several SoCs: "
                                          "SM8550, SM8650"):
        soc_for_board_platform("pineapple", tmp_path)


def test_validate_all_reports_every_bad_file(tmp_path):
    (tmp_path / "socs").mkdir()
    (tmp_path / "farms").mkdir()
    (tmp_path / "socs" / "SM8650.yaml").write_text(SOC_TEXT.replace("runner_s", "runner_ss"))
    (tmp_path / "simulator.yaml").write_text((CONFIG_DIR / "simulator.yaml").read_text())
    (tmp_path / "farms" / "f.yaml").write_text("devices: []\n")
    with pytest.raises(ConfigError) as exc:
        validate_all(tmp_path)
    assert "SM8650.yaml: invalid SoC config" in str(exc.value)
    assert "f.yaml: invalid farm file" in str(exc.value)


def test_validate_configs_command_on_shipped_configs():
    # `python -m harness validate-configs` also loads the known issues; the device configs alone:
    checked = validate_all()
    assert checked == ["SM8550.yaml", "SM8650.yaml", "SM8750.yaml", "simulator.yaml", "example.yaml",
                       "labgrid-example.yaml"]
    result = subprocess.run([sys.executable, "-m", "harness", "validate-configs"],
                            capture_output=True, text=True, cwd=CONFIG_DIR.parent, timeout=120)
    assert result.returncode == 0, result.stderr
