"""A user's stateful program with its ETRecord (docs/examples/export_stateful_program.py): the
suites judge every execute against the ETRecord's edge program run on CPU, with the state
carried, and say so when an output differs; without an ETRecord the program's own solo run is
the reference. Each run is pytest in a separate directory, as the user's project would run it."""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from harness.cache import cache_root
from harness.config.paths import SUITES_DIR
from harness.qnn.sdk import discover

pytest_plugins = ["pytester"]
ROOT = Path(__file__).resolve().parents[2]
EXPORT = ROOT / "docs" / "examples" / "export_stateful_program.py"
STATEFUL = str(SUITES_DIR / "test_stateful.py")
ISOLATION = str(SUITES_DIR / "test_isolation.py")


@pytest.fixture(autouse=True)
def shared_cache(monkeypatch):
    monkeypatch.setenv("EXECUTORCH_HIL_CACHE", str(cache_root()))


@pytest.fixture(scope="module")
def exported(tmp_path_factory) -> dict[str, Path]:
    """The accumulator exported with its ETRecord for QNN and for XNNPACK."""
    out = tmp_path_factory.mktemp("export")
    env = {**os.environ, **discover().environment()}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    paths = {}
    for backend in ("qnn", "xnnpack"):
        path = out / f"acc_{backend}.pte"
        proc = subprocess.run([sys.executable, str(EXPORT), str(path), backend], env=env,
                              cwd=out, capture_output=True, text=True, timeout=600)
        assert proc.returncode == 0 and path.with_suffix(".etrecord").is_file(), \
            proc.stdout[-2000:] + proc.stderr[-3000:]
        paths[backend] = path
    return paths


def run(pytester, *args):
    return pytester.runpytest_subprocess("-p", "no:cacheprovider", "-rxs", *args, timeout=900)


def _copy(exported, backend: str, where: Path, record: bool = True) -> Path:
    pte = Path(shutil.copy(exported[backend], where / f"acc_{backend}.pte"))
    if record:
        shutil.copy(exported[backend].with_suffix(".etrecord"), pte.with_suffix(".etrecord"))
    return pte


def test_a_program_that_keeps_its_state_passes_against_its_etrecord(pytester, exported):
    """XNNPACK (the runtime holds the buffer): every scenario and S4 agree with the ETRecord."""
    pte = _copy(exported, "xnnpack", pytester.path)
    result = run(pytester, STATEFUL, ISOLATION, f"--pte={pte}", "-k", "not s1 and not s2 and not s3")
    result.assert_outcomes(passed=9)


def test_a_qnn_program_fails_s4_against_its_etrecord_naming_it(pytester, exported):
    """The QNN build drops the buffer's initial value: S4, which passes against the program's
    own solo run, fails against the ETRecord, and the message names the reference used and
    the pattern (its solo run disagreed with the ETRecord, so every execute reports its
    outputs); the known issue of a buffer inside a QNN delegate covers it by that shape."""
    pte = _copy(exported, "qnn", pytester.path)
    result = run(pytester, ISOLATION, f"--pte={pte}", "-k", "s4", "--ignore-known-issues")
    result.assert_outcomes(failed=1)
    out = result.stdout.str()
    assert f"reference: the ETRecord {pte.with_suffix('.etrecord')} (its edge program on CPU), " \
           "carrying the state: execute 1 of forward since module A loaded it" in out, out
    assert "pattern: output 0 is the method's output with its mutable buffers started at zero" \
        in out, out
    known = run(pytester, ISOLATION, f"--pte={pte}", "-k", "s4")
    known.assert_outcomes(xfailed=1)
    assert "known issue qnn-mutable-buffer-initial-value" in known.stdout.str()


def test_etrecord_option_names_the_record(pytester, exported, tmp_path):
    """--etrecord FILE gives a record kept elsewhere; bad input is one clear usage error."""
    pte = _copy(exported, "xnnpack", pytester.path, record=False)
    record = shutil.copy(exported["xnnpack"].with_suffix(".etrecord"), tmp_path / "rec.bin")
    result = run(pytester, STATEFUL, f"--pte={pte}", f"--etrecord={record}", "-k",
                 "executes_carry")
    result.assert_outcomes(passed=1)
    missing = run(pytester, STATEFUL, f"--pte={pte}", f"--etrecord={tmp_path / 'none'}")
    assert missing.ret == pytest.ExitCode.USAGE_ERROR
    missing.stderr.fnmatch_lines(["*--etrecord*none: no such file*"])
    two = run(pytester, STATEFUL, f"--pte={pte}", f"--pte={exported['qnn']}",
              f"--etrecord={record}")
    assert two.ret == pytest.ExitCode.USAGE_ERROR
    two.stderr.fnmatch_lines(["*say which one it belongs to: --etrecord PROGRAM.pte=FILE*"])


def test_a_reference_is_computed_once_per_record_and_inputs(exported, tmp_path, monkeypatch):
    """The edge program's outputs are kept by the record's and the inputs' bytes: the same
    question again (another session, another xdist worker) starts no child and gives the same
    files; other inputs or another record are another key."""
    import numpy as np

    from harness import process
    from harness.cache import digest
    from harness.programs import etrecord
    from harness.protocol.tensors import write_array

    monkeypatch.setenv("EXECUTORCH_HIL_CACHE", str(tmp_path / "cache"))
    children = []
    real = process.run_process
    monkeypatch.setattr(process, "run_process",
                        lambda cmd, *a, **k: children.append(cmd) or real(cmd, *a, **k))
    record = exported["xnnpack"].with_suffix(".etrecord")
    half = write_array(np.full(16, 0.5, np.float32), tmp_path / "in" / "half.bin")
    twice = [etrecord.etrecord_references(record, {"forward": ((half,),)}, tmp_path / f"o{n}")
             for n in range(2)]
    assert len(children) == 1
    first, second = (refs["forward"] for refs in twice)
    assert len(first.sequence) == etrecord.STATE_EXECUTES and first.mutable_buffers
    for a, b in zip(first.sequence, second.sequence):
        assert [t.file.parent.parent.name for t in b] == ["o1"] * len(b)
        assert [t.file.read_bytes() for t in a] == [t.file.read_bytes() for t in b]
    # acc starts at ones: execute n gives 1 + 0.5 n
    assert np.frombuffer(second.sequence[1][0].file.read_bytes(), "<f4")[0] == 2.0

    # Other inputs or another record: another key (each a child's work, not
    # started here: one child costs about 7 s of CPU); an error is never kept (cache.memo,
    # tests/framework/test_remembered.py).
    quarter = write_array(np.full(16, 0.25, np.float32), tmp_path / "in" / "quarter.bin")
    other = shutil.copy(record, tmp_path / "other.etrecord")
    with open(other, "ab") as f:
        f.write(b"\0")
    keys = {digest(etrecord._reference_key(r, {"forward": ((t,),)}))
            for r, t in [(record, half), (record, quarter), (Path(other), half)]}
    assert len(keys) == 3
    assert digest(etrecord._reference_key(record, {"forward": ((half,),)})) in keys


def test_without_an_etrecord_a_stateful_program_is_held_to_its_solo_run(pytester, exported):
    """No ETRecord: the solo run executes the stateful method several times, and each
    module's n-th execute is held to the solo run's n-th (so a module is not flagged for
    carrying its state)."""
    pte = _copy(exported, "xnnpack", pytester.path, record=False)
    result = run(pytester, STATEFUL, f"--pte={pte}", "-k", "not control")
    result.assert_outcomes(passed=4)


@pytest.mark.parametrize("damage", ["truncated", "random bytes", "flipped byte"])
def test_a_damaged_etrecord_is_one_start_up_error(pytester, exported, tmp_path, damage,
                                                  monkeypatch):
    """A truncated or overwritten ETRecord was 14 errors, each with the child's traceback; a
    missing one was one start-up error already. Now both are, given or beside the program."""
    monkeypatch.setenv("PYTHONPATH", str(ROOT))  # this tree's harness in the session
    pte = _copy(exported, "xnnpack", tmp_path)
    record = pte.with_suffix(".etrecord")
    data = record.read_bytes()
    if damage == "truncated":
        record.write_bytes(data[:len(data) // 2])
    elif damage == "random bytes":
        record.write_bytes(os.urandom(len(data)))
    else:
        record.write_bytes(data[:len(data) // 3] + bytes([data[len(data) // 3] ^ 0xFF]) +
                           data[len(data) // 3 + 1:])
    for args in ([f"--pte={pte}"], [f"--pte={pte}", f"--etrecord={record}"]):
        result = run(pytester, STATEFUL, *args)
        err = result.stderr.str()
        assert result.ret == 4, result.stdout.str()[-2000:] + err
        assert f"ETRecord {record}" in err and "Traceback" not in err, err
