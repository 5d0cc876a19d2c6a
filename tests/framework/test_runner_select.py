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


def test_a_failed_native_build_says_why_before_the_fallback(monkeypatch, tmp_path):
    """A native build that fails on a full disk says the full disk first, then the build's
    own words and its log, and only then that the Python runner is used."""
    from harness.runner.builds import RunnerBuildError
    from harness.runner.builds.cmake import failure_reason

    tail = "ninja: build stopped\nld: final link failed: No space left on device\n"
    reason = failure_reason(tail, tmp_path)
    assert reason.startswith(f"the storage holding {tmp_path} is full"), reason

    def build() -> None:
        raise RunnerBuildError(f"building the native runner failed\nbuild log: {tmp_path}/b.log",
                               reason)

    monkeypatch.setattr("harness.runner.builds.host.host_runner_available", lambda: (True, ""))
    monkeypatch.setattr("harness.runner.builds.host.build_host_runner", build)
    choice = choose_runner("auto")
    assert choice.kind == "python"
    assert choice.notice == (f"native runner build failed: {reason}; building the native "
                             f"runner failed; build log: {tmp_path}/b.log; using the Python "
                             "runner")
    assert choice.notice.index("is full") < choice.notice.index("using the Python runner")
