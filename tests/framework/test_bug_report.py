"""python -m harness bug-report: standalone reproductions of the known runtime defects.

The end-to-end case writes the delegate-cache folder and runs it as upstream would: `reproduce`
exits 1 with the runtime's own words, `control` exits 0, in an environment with none of the
framework's variables (no interposer: QAIRT 2.49 needs no ABI bridge with executorch 1.5.1).
"""

import json
import subprocess
import sys

import pytest

from harness.commands.bug_report import REPRODUCTIONS, main
from harness.results.known_issues import BUG_CLASSES, load_known_issues


@pytest.mark.unit
def test_every_reproduction_is_named_by_a_runtime_defect_entry():
    named = {i.reproduce for i in load_known_issues() if i.where in BUG_CLASSES}
    assert set(REPRODUCTIONS) <= named


@pytest.mark.unit
def test_an_unknown_id_is_one_clear_error(tmp_path, capsys):
    assert main(["no-such-bug", "--out", str(tmp_path / "x")]) == 2
    assert "no reproduction 'no-such-bug'" in capsys.readouterr().err
    assert not (tmp_path / "x").exists()


@pytest.mark.unit
def test_every_runtime_defect_names_a_reproduction_that_ships():
    named = {i.reproduce for i in load_known_issues() if i.where in BUG_CLASSES}
    assert named <= set(REPRODUCTIONS)


@pytest.mark.unit
def test_list_names_each_reproduction_and_its_entries(capsys):
    assert main(["--list"]) == 0
    out = capsys.readouterr().out
    assert ("delegate-cache-module-lifetime (defect qnn-delegate-cache): "
            "qnn-delegate-cache-module-lifetime") in out
    assert "init-failure-leaks-handles (defect qnn-init-failure-leaks-manager)" in out


def test_an_entry_id_or_a_root_resolves_to_its_reproduction(tmp_path, capsys):
    assert main(["qnn-delegate-cache-forced-warm-hit", "--out", str(tmp_path / "a"),
                 "--no-run"]) == 0
    assert "-> reproduction delegate-cache-module-lifetime" in capsys.readouterr().err
    assert (tmp_path / "a" / "README.md").is_file()


def test_the_delegate_cache_folder_reproduces_without_the_framework(tmp_path):
    out = tmp_path / "s1"
    proc = subprocess.run([sys.executable, "-m", "harness", "bug-report",
                           "delegate-cache-module-lifetime", "--out", str(out)],
                          capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    result = json.loads((out / "result.json").read_text())
    assert (result["reproduce"], result["control"]) == (1, 0)
    readme = (out / "README.md").read_text()
    assert "DelegateHandle has been deleted" in readme
    assert "QAIRT 2.49" in readme
    assert not list(out.glob("**/libQnnHtp.so"))  # no interposer in the folder
