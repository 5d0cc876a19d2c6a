"""The SDK pairing as a fact of the session: which QAIRT the runtime was built against, which
QAIRT the QNN libraries are, and whether the ABI bridge rewrote calls between them.

A failure inside a QNN library under a mismatched pairing (executorch 1.5.1 was built against
QAIRT 2.37 headers; PyPI has only QAIRT 2.47-2.51 libraries) may be an ABI artifact rather than
a defect of either side, so the session header, results.json and every run say which pairing
ran and what the bridge (harness/qnn/interposer.c) re-laid.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from typing import Any

from harness.qnn.sdk import BUILT_AGAINST_CORE_API, DEFAULT_BUILT_AGAINST


@dataclasses.dataclass(frozen=True)
class Pairing:
    runtime_qairt: str | None  # the QAIRT the runtime was built against ("2.37.0.250724")
    runtime_core_api: str  # the QNN core API of those headers ("2.27")
    library_qairt: str | None  # the QAIRT of the QNN libraries in use ("2.51.0")
    libraries: str  # where they come from ("onnxruntime-qnn 2.7.0", "QNN_SDK_ROOT")
    bridge: str  # the --qnn-abi-bridge setting: auto, on, off

    @property
    def matched(self) -> bool | None:
        """Same QAIRT release (major.minor) on both sides; None when either is unknown."""
        if not self.runtime_qairt or not self.library_qairt:
            return None
        return self.runtime_qairt.split(".")[:2] == self.library_qairt.split(".")[:2]

    def describe(self) -> str:
        built = (f"QAIRT {self.runtime_qairt} headers" if self.runtime_qairt
                 else "QAIRT headers of unknown version")
        lib = f"QAIRT {self.library_qairt}" if self.library_qairt else "QAIRT of unknown version"
        state = {True: "matched", False: "MISMATCHED (a library-side failure may be an ABI "
                 "artifact of the pairing)", None: "unknown"}[self.matched]
        return (f"runtime built against {built} (QNN core API {self.runtime_core_api}); QNN "
                f"libraries {lib} ({self.libraries}); pairing {state}; ABI bridge {self.bridge}")

    def facts(self) -> dict[str, Any]:
        return {"runtime_built_against_qairt": self.runtime_qairt,
                "runtime_core_api": self.runtime_core_api,
                "library_qairt": self.library_qairt, "libraries": self.libraries,
                "matched": self.matched, "abi_bridge": self.bridge}


def session_pairing(library_qairt: str | None, libraries: str, bridge: str) -> Pairing:
    """The pairing of the runtime under test with the session's QNN libraries."""
    from harness.runtime import current

    runtime = current()
    core = BUILT_AGAINST_CORE_API.get(runtime.version.split("+")[0], DEFAULT_BUILT_AGAINST)
    return Pairing(runtime.built_against_qairt, core, library_qairt, libraries, bridge)


def bridge_rewrites(records: Iterable[Any]) -> list[dict[str, Any]]:
    """The calls the ABI bridge rewrote in one run's trace: each deviceCreate whose custom
    device configs it re-laid (`device_create ... bridged=N`, N > 0), with the layout it
    applied (the `api` record's `union=4>8`)."""
    union = None
    out = []
    for rec in records:
        if rec.kind == "api":
            union = rec.fields.get("union")
        elif rec.kind == "device_create":
            try:
                n = int(rec.fields.get("bridged", "0"))
            except ValueError:
                continue
            if n > 0:
                out.append({"call": "QnnDevice_create", "seq": rec.seq, "configs": n,
                            "union": union})
    return out
