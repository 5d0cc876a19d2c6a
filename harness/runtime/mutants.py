"""The mutant catalogue (`mutants.yaml` beside this file): injected defects as data.

A mutant is one plausible regression at one boundary: `backend` (the backend-registry wrapper's
operators, told in `HARNESS_RUNTIME_MUTANT`) or `qnn` (nemesis rules the QNN interposer applies
to every run, told in `HARNESS_QNN_MUTANT`). `python -m harness mutate` runs the suites once per
mutant and counts which ones they notice (harness/commands/mutate.py).
"""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

from harness.errors import ConfigError

CATALOGUE = Path(__file__).with_name("mutants.yaml")
BOUNDARIES = ("backend", "qnn")
QNN_ENV = "HARNESS_QNN_MUTANT"
OPERATORS = ("output_perturb", "output_zero", "output_cross", "output_stale", "output_carry",
             "init_leak",
             "execute_leak", "init_delay", "execute_delay", "init_fail", "execute_fail",
             "init_swallow_error", "execute_swallow_error", "destroy_skip", "destroy_twice",
             "destroy_other", "users_off_by_one", "init_crash", "execute_crash",
             "destroy_crash", "init_hang", "execute_hang")
"""The wrapper's operators (registry_wrapper.cpp): a spec naming another is refused here, so a
typo cannot become a mutant that does nothing and 'survives'."""
_NAME = re.compile(r"^[a-z0-9][a-z0-9-]{1,62}$")


@dataclasses.dataclass(frozen=True)
class Mutant:
    name: str
    boundary: str  # "backend" or "qnn"
    kind: str  # the class of defect (the catalogue's `class`)
    spec: str
    description: str
    # variant -> why the mutant changes nothing observable there (an equivalent mutant: the
    # runtime itself makes the injected call harmless); not run and not scored on that variant
    equivalent: tuple[tuple[str, str], ...] = ()

    def equivalent_on(self, variant: str) -> str:
        """Why the mutant is equivalent on `variant`, or "" when it is a real defect there."""
        return dict(self.equivalent).get(variant, "")

    @property
    def backend(self) -> str:
        """The ExecuTorch backend whose delegates the mutant can reach: "qnn" or "xnnpack"."""
        return "xnnpack" if "backend=XnnpackBackend" in self.spec else "qnn"

    def environment(self) -> dict[str, str]:
        """The variables that put it into runner processes (on top of a runtime variant)."""
        from harness.runtime.variants import MUTANT_ENV

        return {MUTANT_ENV if self.boundary == "backend" else QNN_ENV: self.spec}


def load_mutants(path: Path = CATALOGUE) -> list[Mutant]:
    """The catalogue, checked: unique names, a known boundary, a spec its boundary can apply."""
    from harness.config.schema import load_yaml_node
    from harness.protocol.nemesis import check_rules

    raw, _ = load_yaml_node(path)
    if not isinstance(raw, list):
        raise ConfigError(f"{path}: a list of mutants expected")
    out: list[Mutant] = []
    for i, entry in enumerate(raw):
        where = f"{path}: mutant {i + 1}"
        keys = {"name", "boundary", "class", "spec", "description"}
        if not isinstance(entry, dict) or not keys <= set(entry) <= keys | {"equivalent"}:
            raise ConfigError(f"{where}: needs exactly name, boundary, class, spec, description "
                              "(and optionally equivalent)")
        equivalent = entry.pop("equivalent", {})
        if not all(isinstance(v, str) and v for v in entry.values()):
            raise ConfigError(f"{where}: every field is a non-empty string")
        from harness.runtime.variants import VARIANTS

        if not isinstance(equivalent, dict) or not all(
                k in VARIANTS[1:] and isinstance(v, str) and len(v) > 20
                for k, v in equivalent.items()):
            raise ConfigError(f"{where}: equivalent maps a variant ({', '.join(VARIANTS[1:])}) "
                              "to the evidence that the mutant changes nothing there")
        name, boundary, spec = entry["name"], entry["boundary"], entry["spec"]
        if not _NAME.match(name):
            raise ConfigError(f"{where}: name {name!r} is not lower-case words joined by '-'")
        if boundary not in BOUNDARIES:
            raise ConfigError(f"{where}: boundary {boundary!r} is not one of {BOUNDARIES}")
        if boundary == "backend":
            op = spec.split(":")[0]
            if op not in OPERATORS:
                raise ConfigError(f"{where}: operator {op!r} is not one of the wrapper's "
                                  f"({', '.join(OPERATORS)})")
        else:
            check_rules([r.strip() for r in spec.split(";")])
        out.append(Mutant(name, boundary, entry["class"], spec, entry["description"],
                          tuple(sorted(equivalent.items()))))
    names = [m.name for m in out]
    repeated = sorted({n for n in names if names.count(n) > 1})
    if repeated:
        raise ConfigError(f"{path}: mutant names repeated: {', '.join(repeated)}")
    return out
