"""A fork server pool whose binary is damaged (a cached runner gone non-executable, emptied or
truncated): every lease is one clear error naming the binary, and the pool never deadlocks
(each failed start leaked a slot, so the next lease waited in queue.get() for ever)."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from harness.runner.fork_server import ForkServerError, ForkServerPool


def damaged(tmp_path: Path, how: str) -> Path:
    binary = tmp_path / how / "harness-runner"
    binary.parent.mkdir()
    if how == "not_executable":
        binary.write_bytes(b"\x7fELF" + b"\0" * 60)
        binary.chmod(0o644)
    elif how == "empty":
        binary.write_bytes(b"\x7fELF")  # truncated to its magic: Exec format error
        binary.chmod(0o755)
    else:  # starts and dies of SIGSEGV before its first line, as a truncated build does
        binary.write_text("#!/bin/sh\nkill -SEGV $$\n")
        binary.chmod(0o755)
    return binary


def leases(pool: ForkServerPool, n: int) -> list[BaseException | None]:
    """`n` leases one after another, in a thread so that a hang fails the test."""
    errors: list[BaseException | None] = []

    def take() -> None:
        for _ in range(n):
            try:
                with pool.lease():
                    errors.append(None)
            except BaseException as exc:  # noqa: BLE001 -- recorded for the test
                errors.append(exc)

    thread = threading.Thread(target=take, daemon=True)
    thread.start()
    thread.join(30)
    assert not thread.is_alive(), f"the pool hung after {len(errors)} leases: {errors}"
    return errors


@pytest.mark.parametrize("how", ["not_executable", "empty", "crashes"])
def test_a_damaged_binary_is_one_clear_error_per_lease_and_never_a_hang(tmp_path, how):
    binary = damaged(tmp_path, how)
    pool = ForkServerPool(binary, [], {"PATH": "/usr/bin:/bin"}, size=2)
    try:
        errors = leases(pool, 5)
    finally:
        pool.close()
    assert len(errors) == 5
    for exc in errors:
        assert isinstance(exc, ForkServerError), repr(exc)
        assert str(binary) in str(exc)
    assert pool._started == 0  # every failed start gave its slot back


def test_a_busy_pool_waits_a_bounded_time(tmp_path):
    binary = damaged(tmp_path, "crashes")
    pool = ForkServerPool(binary, [], {}, size=1)
    pool._started = 1  # its one server lent out, never given back
    with pytest.raises(ForkServerError, match=r"came free within 0.5 s \(all 1 busy\)"):
        pool._take(wait_s=0.5)
