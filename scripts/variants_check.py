"""CI's check of a runtime variant's column against the same tests with no variant.

    python scripts/variants_check.py stock|fix-model|fix-model-serialized NONE.json VARIANT.json

Both are results.json files (`--hil-report`); only tests present in both are compared.
- `stock` (the wrapper forwarding every call): every test's outcome must be the same (an
  intermittent known issue's XPASS and XFAIL are one outcome: a race luck decides).
- a fix model: every test whose outcome changed must be an XPASS(strict) of a delegate-cache
  entry (`qnn-delegate-cache-*`: the cache between Modules of one program is what the seed
  fixes); nothing else may fail, and at least one such XPASS must show (else the model did not
  run). Exit 1 with each offending test, 0 otherwise.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from harness.runtime.variants import fixed_by


def outcome(test: dict) -> str:
    intermittent = test["outcome"] == "xpassed" and not test.get("xpass_strict")
    return "xfailed" if intermittent else test["outcome"]


def main(argv: list[str]) -> int:
    if len(argv) != 3:
        print(__doc__, file=sys.stderr)
        return 2
    variant, plain_path, variant_path = argv
    plain, other = ({t["nodeid"]: t for t in json.loads(Path(p).read_text())["tests"]}
                    for p in (plain_path, variant_path))
    common = sorted(plain.keys() & other.keys())
    if not common:
        print("no test in both runs", file=sys.stderr)
        return 1
    bad, fixed = [], []
    for nodeid in common:
        was, now = plain[nodeid], other[nodeid]
        if outcome(was) == outcome(now):
            continue
        if now.get("xpass_strict") and fixed_by(variant, now.get("known_issue")):
            fixed.append(f"{nodeid}: XPASS(strict) {now['known_issue']}")
        else:
            bad.append(f"{nodeid}: {outcome(was)} without the variant, {outcome(now)} with "
                       f"{variant}: {(now.get('message') or '')[:300]}")
    print(f"{variant}: {len(common)} tests compared; {len(fixed)} XPASS(strict) of the seed's "
          f"entries, {len(bad)} other differences")
    for line in fixed:
        print(f"  fixed: {line}")
    for line in bad:
        print(f"  WRONG: {line}")
    if variant != "stock" and not fixed:
        print(f"  WRONG: no delegate-cache entry turned XPASS(strict): did {variant} run?")
        return 1
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
