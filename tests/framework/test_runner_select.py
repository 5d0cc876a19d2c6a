"""Runner selection: native by default, Python with a notice when no native build is possible."""

import pytest

from harness.errors import HarnessError
from harness.runner.builds.host import host_runner_available
from harness.runner.select import choose_runner


def test_auto_picks_native_when_buildable():
    available, why = host_runner_available()
    assert available, why  # CI installs cmake, ninja and a compiler
    choice = choose_runner("auto")
    assert choice.kind == "native" and choice.binary.is_file() and not choice.notice


def test_falls_back_to_python_with_a_notice(monkeypatch):
    monkeypatch.setattr("harness.runner.builds.host.host_runner_available",
                        lambda: (False, "cmake not found"))
    choice = choose_runner("auto")
    assert choice.kind == "python"
    assert choice.notice == "native runner unavailable (cmake not found); using the Python runner"
    with pytest.raises(HarnessError, match="--runner=native: the native runner cannot be built here: cmake not found"):
        choose_runner("native")


def test_python_on_request_and_bad_names():
    assert choose_runner("python").kind == "python"
    with pytest.raises(HarnessError, match="--runner must be one of"):
        choose_runner("java")
