"""Online-prepare programs (`online_prepare=True`): the delegate carries the QNN graph (DLC)
instead of a context binary, and the runtime composes and finalizes the graph at load time
(QnnManager::CompileDlc). Upstream has seen these crash at execute (issue 21804: SIGSEGV after
"Skip qnn_graph_create, graph has already been composed from Dlc"), and their cache signature is
read from fixed offsets of a blob that has no custom header.

Load -> execute -> destroy -> reload of one such program, and two different such programs live
in one process; the same scenarios on the offline-prepared builds of the same models are the
controls (a context binary, the path every other suite takes).
"""

import pytest

from harness.results.assertions import (assert_isolation, assert_live_counts,
                                        assert_outputs_consistent, assert_steps_ok)
from harness.scenario import Scenario

ONLINE = {"online_prepare": True}


def reload_twice(model, name):
    sc = Scenario(name)
    for _ in range(2):
        sc.load_module("A", model).execute("A", "forward").execute("A", "forward")
        sc.destroy_module("A")
    return sc


def two_programs(first, second, name):
    sc = Scenario(name).load_module("A", first).load_module("B", second)
    sc.execute("A", "forward").execute("B", "forward").destroy_module("A")
    sc.execute("B", "forward").destroy_module("B")
    sc.load_module("B", second).load_module("A", first)  # the other order
    sc.execute("B", "forward").execute("A", "forward").destroy_module("B")
    return sc.execute("A", "forward").destroy_module("A")


def judged(result):
    assert_steps_ok(result)
    assert_outputs_consistent(result)
    assert_isolation(result)
    assert_live_counts(result)


@pytest.mark.parametrize("build", ["online", "offline"])
def test_online_prepare_load_execute_destroy_reload(hil_session, scenario_driver, build):
    model = hil_session.model("linear_relu", "fp16", ONLINE if build == "online" else None)
    judged(scenario_driver.run(reload_twice(model, f"online_prepare_reload_{build}")))


@pytest.mark.parametrize("build", ["online", "offline"])
def test_two_online_prepare_programs_in_one_process(hil_session, scenario_driver, build):
    options = ONLINE if build == "online" else None
    first = hil_session.model("linear_relu", "fp16", options)
    second = hil_session.model("mlp_tanh", "fp16", options)
    judged(scenario_driver.run(two_programs(first, second, f"online_prepare_two_{build}")))
