"""`python -m harness validate-configs`: every config file of the project, or the files given,
each as the kind its place or keys tell (SoC, simulator, farm, labgrid exporter, known issues).

It lives above the packages whose files it validates (`harness.config` for SoC, simulator and
farm files; `harness.devices.farm` for labgrid exporter configs; `harness.results.known_issues`),
so none of them imports another to validate its neighbour's files.
"""

from __future__ import annotations

import argparse
import functools
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from harness.config import load_farm, load_soc, simulator_config
from harness.config.files import SimulatorConfigFile
from harness.config.paths import CONFIG_DIR
from harness.config.schema import load_validated, load_yaml_node
from harness.devices.farm import load_exporter_config
from harness.errors import ConfigError
from harness.results.known_issues import load_known_issues

_T = TypeVar("_T")


def validate_all(config_dir: Path = CONFIG_DIR) -> list[str]:
    """Load every config file; returns the names checked. Raises one `ConfigError` with the
    errors of every bad file, so one run shows everything to fix."""
    checked, errors = [], []

    def check(name: str, load: Callable[[], _T]) -> _T | None:
        try:
            result = load()
        except ConfigError as exc:
            errors.append(str(exc))
            return None
        checked.append(name)
        return result

    platforms: dict[str, list[str]] = {}
    for path in sorted((config_dir / "socs").glob("*.yaml")):
        soc = check(path.name, functools.partial(load_soc, path))
        if soc is None:
            continue
        for platform in soc.board_platforms:
            platforms.setdefault(platform, []).append(soc.soc)
    for platform, socs in sorted(platforms.items()):
        if len(socs) > 1:
            errors.append(f"board platform {platform!r} is listed in the configs of several SoCs: "
                          f"{', '.join(socs)}; keep it in one")
    check("simulator.yaml", functools.partial(simulator_config, config_dir))
    for path in sorted((config_dir / "farms").glob("*.yaml")):
        if path.name.startswith("labgrid-"):  # a labgrid exporter config (harness/devices/farm.py)
            check(path.name, functools.partial(load_exporter_config, path))
        else:
            check(path.name, functools.partial(load_farm, path))
    if errors:
        raise ConfigError("\n".join(errors))
    return checked


# -- one file of a named or detected kind ---------------------------------------------------------

CONFIG_KINDS = ("soc", "simulator", "farm", "labgrid", "known-issues")


def detect_kind(path: Path) -> str:
    """Which kind of config `path` is: by where it lies (`socs/`, `simulator.yaml`,
    `farms/labgrid-*`, `known_issues*.yaml`), else by its top-level keys. A ConfigError asks
    for `--kind` when neither tells."""
    path = Path(path)
    if path.parent.name == "socs":
        return "soc"
    if path.name == "simulator.yaml":
        return "simulator"
    if path.name.startswith("labgrid-"):
        return "labgrid"
    if path.name.startswith("known_issues"):
        return "known-issues"
    data, _ = load_yaml_node(path)
    if isinstance(data, list):
        return "known-issues"
    if isinstance(data, dict):
        if data.get("kind") == "simulator":
            return "simulator"
        if "devices" in data:
            return "farm"
        if "soc" in data or "htp_arch" in data:
            return "soc"
    raise UnknownKind(f"{path}: cannot tell which kind of config this is; name it with "
                      f"--kind {{{','.join(CONFIG_KINDS)}}}")


class UnknownKind(ConfigError):
    """A config file whose place and keys do not tell its kind (a usage error: --kind)."""


def validate_file(path: Path, kind: str | None = None) -> str:
    """Load `path` as a config of `kind` (detected when None); returns the kind. Raises the
    file's ConfigError (every error of the file)."""
    path = Path(path)
    kind = kind or detect_kind(path)
    if kind == "soc":
        load_soc(path)
    elif kind == "simulator":
        load_validated(path, SimulatorConfigFile, what="simulator config")
    elif kind == "farm":
        load_farm(path)
    elif kind == "labgrid":
        load_exporter_config(path)
    elif kind == "known-issues":
        load_known_issues(path)
    else:
        raise ConfigError(f"unknown config kind {kind!r}; one of {', '.join(CONFIG_KINDS)}")
    return kind


def main(args: list[str]) -> int:
    """No FILE: every file under device_configs/ and the known issues. With FILEs: each one as
    the kind `--kind` names or its place and keys tell, stopping at the first bad one."""

    parser = argparse.ArgumentParser(prog="python -m harness validate-configs",
                                     description="Validate config files (default: the project's).")
    parser.add_argument("files", nargs="*", metavar="FILE")
    parser.add_argument("--kind", choices=CONFIG_KINDS,
                        help="the kind of every FILE (default: told by its place and keys)")
    opts = parser.parse_args(args)  # a bad option exits 2 with argparse's usage line
    for path in opts.files:
        # exit 2: a path that is no file to read (missing, a directory, a FIFO) or whose kind
        # cannot be told; exit 1: a file that is not a valid config (malformed YAML included,
        # with --kind or without)
        unreadable = not_a_file(Path(path))
        if unreadable:
            print(f"error: {unreadable}", file=sys.stderr)
            return 2
        try:
            kind = opts.kind or detect_kind(path)
        except UnknownKind as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
        except ConfigError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 1
        try:
            validate_file(path, kind)
        except ConfigError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 1
        print(f"ok: {path} ({kind})")
    if opts.files:
        return 0
    try:
        checked = validate_all()
        issues = load_known_issues()
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print(f"ok: {', '.join(checked)}; {len(issues)} known issue(s)")
    return 0


def not_a_file(path: Path) -> str:
    """Why `path` is no config file to read ("" when it is a regular file)."""
    import stat

    try:
        mode = path.stat().st_mode
    except FileNotFoundError:
        return f"{path}: no such file"
    except OSError as exc:
        return f"{path}: cannot be read ({exc.strerror})"
    if stat.S_ISREG(mode):
        return ""
    kind = ("a directory" if stat.S_ISDIR(mode) else "a FIFO" if stat.S_ISFIFO(mode)
            else "a special file")
    return f"{path}: is {kind}, not a YAML file: give the path of the file"
