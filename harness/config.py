"""Device configuration: YAML per SoC, the simulator, and farms, validated on load.

Every error names the file, the key and the expected type, because a farm's nightly run
should fail at start-up with a line someone can act on, not halfway through with a KeyError.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import yaml

from harness.errors import ConfigError

CONFIG_DIR = Path(__file__).resolve().parent.parent / "device_configs"

# key path -> (type, required)
SOC_SCHEMA: dict[str, tuple[type | tuple[type, ...], bool]] = {
    "soc": (str, True),
    "name": (str, False),
    "htp_arch": (int, True),
    "vtcm_mb": (int, True),
    "memory": (dict, True),
    "memory.rss_leak_kb": (int, True),
    "memory.htp_context_kb": (int, False),
    "timeouts": (dict, False),
    "timeouts.runner_s": ((int, float), False),
}
SIMULATOR_SCHEMA: dict[str, tuple[type | tuple[type, ...], bool]] = {
    "kind": (str, True),
    "default_soc": (str, True),
    "memory": (dict, True),
    "memory.rss_leak_kb": (int, True),
    "timeouts": (dict, False),
    "timeouts.runner_s": ((int, float), False),
}
FARM_SCHEMA: dict[str, tuple[type | tuple[type, ...], bool]] = {
    "adb_server": (str, False),
    "devices": (list, True),
}


@dataclasses.dataclass(frozen=True)
class SocConfig:
    soc: str
    htp_arch: int
    vtcm_mb: int
    rss_leak_kb: int
    htp_context_kb: int
    runner_timeout_s: float
    path: Path
    name: str = ""


@dataclasses.dataclass(frozen=True)
class SimulatorConfig:
    default_soc: str
    rss_leak_kb: int
    runner_timeout_s: float
    path: Path


def load_yaml(path: Path) -> dict:
    """Parse a YAML mapping, with errors that name the file and the line."""
    try:
        data = yaml.safe_load(path.read_text())
    except FileNotFoundError:
        raise ConfigError(f"{path}: file not found") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        raise ConfigError(f"{path}:{where}: malformed YAML: {getattr(exc, 'problem', exc)}") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: expected a mapping at the top level, got {type(data).__name__}")
    return data


def validate(data: dict, schema: dict[str, tuple[Any, bool]], path: Path) -> None:
    for key, (expected, required) in schema.items():
        node: Any = data
        for part in key.split("."):
            node = node.get(part, _MISSING) if isinstance(node, dict) else _MISSING
        if node is _MISSING:
            if required:
                raise ConfigError(f"{path}: missing required key '{key}' ({_type_name(expected)})")
            continue
        if isinstance(node, bool) or not isinstance(node, expected):
            if not (expected in ((int, float),) and isinstance(node, (int, float)) and not isinstance(node, bool)):
                raise ConfigError(f"{path}: key '{key}' must be {_type_name(expected)}, got "
                                  f"{type(node).__name__} ({node!r})")
    known = {k.split(".")[0] for k in schema}
    unknown = sorted(set(data) - known)
    if unknown:
        raise ConfigError(f"{path}: unknown key(s) {', '.join(unknown)}; known: {', '.join(sorted(known))}")


_MISSING = object()


def _type_name(expected: Any) -> str:
    if isinstance(expected, tuple):
        return " or ".join(t.__name__ for t in expected)
    return expected.__name__


def load_soc(path: Path) -> SocConfig:
    data = load_yaml(path)
    validate(data, SOC_SCHEMA, path)
    if data["soc"] != path.stem:
        raise ConfigError(f"{path}: key 'soc' is {data['soc']!r} but the file is named for {path.stem!r}")
    mem, timeouts = data["memory"], data.get("timeouts", {})
    return SocConfig(data["soc"], data["htp_arch"], data["vtcm_mb"], mem["rss_leak_kb"],
                     mem.get("htp_context_kb", 0), float(timeouts.get("runner_s", 120)), path,
                     data.get("name", ""))


def known_socs(config_dir: Path = CONFIG_DIR) -> list[str]:
    return sorted(p.stem for p in (config_dir / "socs").glob("*.yaml"))


def soc_config(soc: str, config_dir: Path = CONFIG_DIR) -> SocConfig:
    """The config of `soc`; an unknown SoC is an error that lists the known ones."""
    path = config_dir / "socs" / f"{soc}.yaml"
    if not path.exists():
        raise ConfigError(f"unknown SoC {soc!r}: no {path}. Known SoCs: "
                          f"{', '.join(known_socs(config_dir)) or '(none)'}. Add a YAML file for it "
                          "(copy a neighbour and set htp_arch, vtcm_mb, memory).")
    return load_soc(path)


def simulator_config(config_dir: Path = CONFIG_DIR) -> SimulatorConfig:
    path = config_dir / "simulator.yaml"
    data = load_yaml(path)
    validate(data, SIMULATOR_SCHEMA, path)
    if data["kind"] != "simulator":
        raise ConfigError(f"{path}: key 'kind' must be 'simulator', got {data['kind']!r}")
    return SimulatorConfig(data["default_soc"], data["memory"]["rss_leak_kb"],
                           float(data.get("timeouts", {}).get("runner_s", 300)), path)


def load_farm(path: Path) -> tuple[str | None, list[dict]]:
    """A farm file: optional `adb_server` and a list of `{serial, soc?}` device entries."""
    data = load_yaml(path)
    validate(data, FARM_SCHEMA, path)
    devices = []
    for i, entry in enumerate(data["devices"]):
        if not isinstance(entry, dict) or not isinstance(entry.get("serial"), str):
            raise ConfigError(f"{path}: devices[{i}] must be a mapping with a string 'serial'")
        if "soc" in entry and not isinstance(entry["soc"], str):
            raise ConfigError(f"{path}: devices[{i}].soc must be str")
        devices.append(entry)
    return data.get("adb_server"), devices


def validate_all(config_dir: Path = CONFIG_DIR) -> list[str]:
    """Load every config file; returns the names checked (raises on the first bad one)."""
    checked = []
    for path in sorted((config_dir / "socs").glob("*.yaml")):
        load_soc(path)
        checked.append(path.name)
    simulator_config(config_dir)
    checked.append("simulator.yaml")
    for path in sorted((config_dir / "farms").glob("*.yaml")):
        load_farm(path)
        checked.append(path.name)
    return checked
