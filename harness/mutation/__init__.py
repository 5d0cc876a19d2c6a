"""Mutation runs: defects injected into the runtime on purpose (harness/runtime/mutants.yaml),
the suites run once per mutant, and each mutant judged killed, masked or survived.

- `verdicts`: what a mutant's pass must run and what its outcomes mean (no process started);
- `passes`: the pytest passes themselves, one per mutant stage, against an unmutated run.

Two front ends share them: `python -m harness mutate` (harness/commands/mutate.py: its own
unmutated pass first) and the pytest option `--mutate` (harness/report/mutation.py: the
session itself is the unmutated pass, and its report shows the table).
"""
