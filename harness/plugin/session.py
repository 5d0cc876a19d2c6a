"""The session's life: pytest_configure builds this process's HilSession from the checked
options, SIGTERM ends the run as Ctrl-C does, and pytest_unconfigure closes the session and
restores what the session changed in the process (the signal handler, the runtime's variable)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from harness.errors import HarnessError
from harness.log import disk_full_tolerated
from harness.plugin.keys import PREFIX_ENV, SESSION, SIGTERM, VARIANT_ENV
from harness.plugin.options import check_start_up, options_from_config
from harness.session import HilSession


def pytest_configure(config: pytest.Config) -> None:
    """First of the plugin's pytest_configure hooks (harness/plugin/__init__.py registers this
    module last): the others read the session it stashes."""
    config.addinivalue_line("markers", "hil: a test that runs scenarios on a device or simulator")
    try:
        opts = options_from_config(config)
        session = HilSession(opts, config)
        check_start_up(config, session)
    except HarnessError as exc:
        # Bad input stops the session once, at start-up, with the line to act on.
        raise pytest.UsageError(str(exc)) from None
    config.stash[SESSION] = session
    _handle_sigterm(config)
    if not opts.worker.startswith("gw"):
        _link_latest(opts.artifacts_dir)


def _link_latest(artifacts: Path) -> None:
    """DIR/latest -> this session's directory (best effort: a convenience, not a contract)."""
    link = artifacts.parent / "latest"
    try:
        artifacts.mkdir(parents=True, exist_ok=True)
        tmp = artifacts.parent / f".latest-{os.getpid()}"
        tmp.unlink(missing_ok=True)
        tmp.symlink_to(artifacts.name)
        os.replace(tmp, link)
    except OSError:
        pass


def _handle_sigterm(config: pytest.Config) -> None:
    """SIGTERM (how CI cancels a job) ends the run as Ctrl-C does: pytest's interrupt path, so
    the session closes (runners killed, the lease released, the workspace removed or kept as
    asked). Only where nobody else handles it (a handler of the user's stays)."""
    import signal
    import threading

    if threading.current_thread() is not threading.main_thread():
        return
    if signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL:
        return

    def interrupt(signum, frame):
        signal.signal(signal.SIGTERM, signal.SIG_DFL)  # a second SIGTERM ends it outright
        raise KeyboardInterrupt("SIGTERM")

    config.stash[SIGTERM] = signal.signal(signal.SIGTERM, interrupt)


def pytest_unconfigure(config: pytest.Config) -> None:
    previous = config.stash.get(SIGTERM, None)
    if previous is not None:
        import signal

        signal.signal(signal.SIGTERM, previous)
    from harness import runtime

    if PREFIX_ENV in config.stash:  # a session in this process (pytester) leaves it as it was
        before = config.stash[PREFIX_ENV]
        if before is None:
            os.environ.pop(runtime.PREFIX_ENV, None)
        else:
            os.environ[runtime.PREFIX_ENV] = before
    if VARIANT_ENV in config.stash:
        from harness.runtime import variants

        before_variant = config.stash[VARIANT_ENV]
        if before_variant is None:
            os.environ.pop(variants.ENV, None)
        else:
            os.environ[variants.ENV] = before_variant
    session = config.stash.get(SESSION, None)
    if session is not None:
        try:
            session.close()  # first: on a labgrid farm, the summary then says it was released
        finally:
            lines = session.summary()
            if lines:  # also for xdist workers, whose terminal summary nobody sees
                out = session.options.artifacts_dir / f"session-{session.options.worker}.txt"
                with disk_full_tolerated(out.parent, "the session summary"):
                    out.parent.mkdir(parents=True, exist_ok=True)
                    out.write_text("\n".join(lines + session.notices) + "\n")
