"""Device configuration: YAML per SoC, the simulator, and farms, validated on load.

Each file is validated by a strict pydantic schema (`harness.config.files`) at every depth: an
unknown or misspelt key anywhere, a wrong type or a missing key is an error that names the file,
the line, the key path and what was expected, and lists every such error of the file, because a
farm's nightly run should fail at start-up with a line someone can act on, not halfway through
with a KeyError or, worse, run with a silently defaulted limit. A file read and validated before,
unchanged, gives its value from the harness cache (`harness.config.remembered`).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from harness.errors import ConfigError
from harness.config.paths import CONFIG_DIR
from harness.config.remembered import remembered

# The modules whose code decides what a config file's value is (its schema and reader).
_READERS = ("config/__init__.py", "config/files.py", "config/schema.py")



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
    board_platforms: tuple[str, ...] = ()
    dsp_heap_context_kb: int = 32768
    dsp_heap_leak_kb: int = 256
    soak_rss_kb_per_cycle: float = 64
    soak_heap_bytes_per_cycle: float = 1024


@dataclasses.dataclass(frozen=True)
class SimulatorConfig:
    default_soc: str
    rss_leak_kb: int
    runner_timeout_s: float
    path: Path


def load_soc(path: Path) -> SocConfig:
    """A SoC config file (its `soc:` must name the file's SoC)."""
    return remembered(Path(path), "soc", _read_soc, _READERS)


def known_socs(config_dir: Path = CONFIG_DIR) -> list[str]:
    return sorted(p.stem for p in (config_dir / "socs").glob("*.yaml"))


def soc_config(soc: str, config_dir: Path = CONFIG_DIR) -> SocConfig:
    """The config of `soc`; an unknown SoC is an error that lists the known ones."""
    path = config_dir / "socs" / f"{soc}.yaml"
    if not path.exists():
        raise ConfigError(f"unknown SoC {soc!r}: no {path}. Known SoCs: "
                          f"{', '.join(known_socs(config_dir)) or '(none)'}. Add a YAML file for it "
                          "(copy a neighbour and set htp_arch, vtcm_mb, board_platforms, "
                          "memory).")
    return load_soc(path)


def resolve_soc_config(serial: str, reported: str, *, farm_soc: str | None = None,
                       soc: str | None = None, device_config: Path | None = None,
                       reported_from: str = "the device", farm_from: str = "farm file",
                       config_dir: Path = CONFIG_DIR) -> tuple[SocConfig, str]:
    """Which SoC config device `serial` runs with, and where its SoC came from.

    Precedence: the farm file's `soc:` for this serial (or a labgrid place's `soc=` tag,
    named by `farm_from`), then `--soc`, then what the device
    reports (`reported`, found through `reported_from`). `--device-config FILE` replaces
    `socs/<SOC>.yaml`: it must be for the chosen SoC (or names it when nothing else does),
    because compiling for one SoC while pushing another's HTP libraries fails only on the
    phone. An unknown SoC is one ConfigError listing the known SoCs and how to add one."""
    chosen, source = next(((value, where) for value, where in (
        (farm_soc, farm_from), (soc, "--soc"), (reported, reported_from)) if value), (None, ""))
    if device_config is not None:
        config = load_soc(Path(device_config))
        if chosen is None:
            return config, "--device-config"
        if config.soc != chosen:
            raise ConfigError(f"device {serial}: --device-config {device_config} is the config of "
                              f"{config.soc}, but the device's SoC is {chosen} ({source}); pass a "
                              f"config for {chosen}, or --soc {config.soc} to run it as "
                              f"{config.soc}")
        return config, source
    if chosen is None:
        raise ConfigError(f"device {serial}: no SoC: {reported_from}. Pass --soc SOC, give the "
                          "device a `soc:` in the farm file, or add the platform to a SoC "
                          "config's board_platforms")
    path = config_dir / "socs" / f"{chosen}.yaml"
    if not path.exists():
        raise ConfigError(unknown_soc_message(chosen, f"device {serial} ({source})", config_dir))
    return load_soc(path), source


def unknown_soc_message(soc: str, who: str, config_dir: Path = CONFIG_DIR) -> str:
    """What to do about a SoC without a config: the known ones, and how to add it from the
    config of its nearest neighbour by name."""
    known = known_socs(config_dir)
    neighbour = max((k for k in known if k < soc), default=known[0] if known else None)
    copy = (f"copy a neighbour's config, e.g. `cp {config_dir / 'socs' / f'{neighbour}.yaml'} "
            f"{soc}.yaml`, " if neighbour else "write one ")
    return (f"{who}: SoC {soc} has no config (no {config_dir / 'socs' / f'{soc}.yaml'}). "
            f"Known SoCs: {', '.join(known) or '(none)'}. To add it, {copy}set soc: {soc}, "
            "htp_arch, vtcm_mb, board_platforms and memory, and put it in that directory "
            "(`python -m harness validate-configs` checks it there) or pass it with "
            "--device-config; or pass --soc SOC to run the device as a known SoC.")


def soc_for_board_platform(platform: str, config_dir: Path = CONFIG_DIR) -> str | None:
    """The SoC whose config lists `platform` (an `ro.board.platform` code name such as
    "pineapple") in `board_platforms`, or None when no config does."""
    if not platform:
        return None
    matches = [soc for soc in known_socs(config_dir)
               if platform in soc_config(soc, config_dir).board_platforms]
    if len(matches) > 1:
        raise ConfigError(f"board platform {platform!r} is listed in the configs of several SoCs: "
                          f"{', '.join(matches)}; keep it in one")
    return matches[0] if matches else None


def simulator_config(config_dir: Path = CONFIG_DIR) -> SimulatorConfig:
    return remembered(config_dir / "simulator.yaml", "simulator", _read_simulator, _READERS)


def load_farm(path: Path) -> tuple[str | None, list[dict]]:
    """A farm file: optional `adb_server` and a non-empty list of `{serial, soc?}` device
    entries (`soc` only in the entries that set it)."""
    return remembered(Path(path), "farm", _read_farm, _READERS)


# The readers: pydantic and the schemas (harness.config.files) are imported only when a file is
# really read.

def _read_soc(path: Path, text: str | None) -> SocConfig:
    from harness.config.files import SocConfigFile
    from harness.config.schema import load_validated

    data = load_validated(path, SocConfigFile, what="SoC config", text=text)
    if data.soc != path.stem:
        raise ConfigError(f"{path}: key 'soc' is {data.soc!r} but the file is named for "
                          f"{path.stem!r}")
    return SocConfig(data.soc, data.htp_arch, data.vtcm_mb, data.memory.rss_leak_kb,
                     data.memory.htp_context_kb, float(data.timeouts.runner_s), path, data.name,
                     tuple(data.board_platforms), data.memory.dsp_heap_context_kb,
                     data.memory.dsp_heap_leak_kb, data.memory.soak_rss_kb_per_cycle,
                     data.memory.soak_heap_bytes_per_cycle)


def _read_simulator(path: Path, text: str | None) -> SimulatorConfig:
    from harness.config.files import SimulatorConfigFile
    from harness.config.schema import load_validated

    data = load_validated(path, SimulatorConfigFile, what="simulator config", text=text)
    return SimulatorConfig(data.default_soc, data.memory.rss_leak_kb,
                           float(data.timeouts.runner_s), path)


def _read_farm(path: Path, text: str | None) -> tuple[str | None, list[dict]]:
    from harness.config.files import FarmFile
    from harness.config.schema import load_validated

    data = load_validated(path, FarmFile, what="farm file", text=text)
    return data.adb_server, [d.model_dump(exclude_none=True) for d in data.devices]
