"""Fixtures shared by several suites of tests/hil (shipped in the wheel with them)."""

import pytest

from harness.drive.xnnpack_cache import MODEL, PRECISION, PYTHON_RUNNER_SKIP, Cache, new_cache


@pytest.fixture
def xnn(request, hil_session, hil_device, compiled_model, scenario_driver) -> Cache:
    """The XNNPACK packed-cache suites' launch helper (test_xnnpack_cache.py,
    test_xnnpack_branches.py): the model compiled, an empty scratch directory on the device."""
    if hil_session.device_runner == "python":
        pytest.skip(PYTHON_RUNNER_SKIP)
    return new_cache(hil_device, scenario_driver, compiled_model(MODEL, PRECISION),
                     request.node.name)
