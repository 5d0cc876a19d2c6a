"""Random ordering exploration on Hypothesis: draw orderings, run them, shrink a failure.

`harness.drive.orderings` enumerates orderings exhaustively and samples them with a seeded
generator, shrinking a failure with its own greedy loop. This module does the random part with
Hypothesis, which brings its shrinker (orderings shrink by dropping whole modules and single
operations, and by moving interleaving choices toward running each module through before the
next) and its example database, which replays the last failing orderings first in the next run.

The suites keep the hand-written sampler, by measurement: `benchmarks/exploration.py
--shrinking` runs both on the QNN delegate-cache bug of executorch 1.5.1 with the same seeds,
and both reach the same 6-operation minimal ordering, but Hypothesis needs about three times
the runs (59-71 against 18-19) and wall time (27 s against 10 s for five seeds): its draws
drop modules and operations often, so its first failure comes later, and its shrinker tries
more candidates than the greedy loop, each a runner process here.

An ordering is drawn as: which modules take part (each may be dropped), which of each module's
middle operations (load-method, execute, unload-method) happen (each may be dropped; load and
destroy always happen), then, step by step, which of the ready operations runs next. Every
draw shrinks toward the simpler choice (dropped, first ready), and orderings the reference
model calls invalid (e.g. an unload of a method never loaded) are rejected.
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import TYPE_CHECKING

from harness.drive.orderings import (Exploration, Failure, ModulePlan, Op, Runner, _valid, check,
                               ready, to_scenario)

if TYPE_CHECKING:
    from hypothesis.strategies import SearchStrategy

KEPT_ALWAYS = ("load_module", "destroy_module")


def orderings_strategy(plans: list[ModulePlan]) -> SearchStrategy[list[Op]]:
    """A Hypothesis strategy of valid orderings over `plans` (or a subset of their ops)."""
    from hypothesis import assume, strategies as st

    @st.composite
    def draw_ordering(draw: st.DrawFn) -> list[Op]:
        kept: list[Op] = []
        for plan in plans:
            # 0 drops: Hypothesis shrinks integers toward 0, so shrinking drops modules and ops.
            if len(plans) > 1 and draw(st.integers(0, 7)) == 0:
                continue
            kept += [op for op in plan.ops()
                     if op[0] in KEPT_ALWAYS or draw(st.integers(0, 7)) != 0]
        assume(kept)
        keep = set(kept)
        done: set[Op] = set()
        ordering: list[Op] = []
        while len(ordering) < len(kept):
            now = [op for op in kept if op not in done and ready(op, done, keep)]
            op = now[draw(st.integers(0, len(now) - 1))]
            ordering.append(op)
            done.add(op)
        assume(_valid(plans, ordering))
        return ordering

    return draw_ordering()


def search(run: Runner, name: str, plans: list[ModulePlan], examples: int,
           database: Path | None = None, seed: int | None = None) -> Exploration:
    """Run up to `examples` drawn orderings (after replaying the database's failures for this
    `name`); on a failure, shrink it with Hypothesis to a minimal failing ordering.

    `database`: a directory for Hypothesis's example database (None: none). `seed` fixes the
    draws, for measurements; Hypothesis then neither reads nor writes the database."""
    from hypothesis import HealthCheck, Phase, find, settings
    from hypothesis.errors import NoSuchExample
    from hypothesis.database import DirectoryBasedExampleDatabase

    messages: dict[tuple[Op, ...], str] = {}
    ran = [0]

    def fails(ops: list[Op]) -> bool:
        ran[0] += 1
        message = check(run.run(to_scenario(f"{name}_h{ran[0]}", plans, ops)))
        if message is not None:
            messages[tuple(ops)] = message
        return message is not None

    config = settings(max_examples=examples, deadline=None,
                      database=DirectoryBasedExampleDatabase(str(database)) if database else None,
                      suppress_health_check=list(HealthCheck),
                      phases=[Phase.explicit, Phase.reuse, Phase.generate, Phase.shrink])
    try:
        minimal = find(orderings_strategy(plans), fails, settings=config,
                       random=random.Random(seed) if seed is not None else None,
                       database_key=name.encode())
    except NoSuchExample:
        return Exploration(ran[0], [])
    message = messages[tuple(minimal)]
    return Exploration(ran[0], [Failure(minimal, message, minimal, message)])
