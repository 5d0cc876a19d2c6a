"""Nemesis rules (harness.protocol.nemesis) as scenario data: their grammar and the clear
error a bad one gets, without a device."""

import pytest

from harness.protocol.nemesis import NemesisError, check_rules, fail_at, hold, parse_rule
from harness.protocol.scenario_check import validate_scenario
from harness.protocol.scenario_file import ScenarioError


def test_rules_round_trip_to_their_canonical_text():
    rule = hold("enter", "A:QnnContext_createFromBinary#1", "leave", "B:step.load_method#2",
                timeout_ms=500)
    assert rule == ("hold enter A:QnnContext_createFromBinary#1 until leave "
                    "B:step.load_method#2 timeout_ms=500")
    assert str(parse_rule(rule)) == rule
    assert fail_at("QnnMem_register", 3, "QNN_COMMON_ERROR_MEM_ALLOC", from_on=True) == \
        "fail QnnMem_register#3+ rc=1002"
    assert check_rules(["fail QnnContext_createFromBinary#1 rc=QNN_CONTEXT_ERROR_CREATE_FROM_BINARY"]) \
        == ("fail QnnContext_createFromBinary#1 rc=5005",)


@pytest.mark.parametrize("text, words", [
    ("fail QnnNothing#1 rc=1000", "unknown API 'QnnNothing'"),
    ("fail QnnGraph_execute#0 rc=1000", "occurrences count from 1"),
    ("fail QnnGraph_execute#1 rc=0", "must be positive"),
    ("fail QnnGraph_execute#1 rc=NO_SUCH", "unknown QNN error"),
    ("hold enter A:QnnGraph_execute#1+ until enter B:QnnGraph_execute#1", "'+'"),
    ("hold inside A:QnnGraph_execute#1 until enter B:QnnGraph_execute#1", "'enter' or 'leave'"),
    ("hold enter A:QnnGraph_execute#1 until enter B:QnnGraph_execute#1 timeout_ms=0",
     "timeout_ms"),
    ("fail QnnGraph_execute#1 rc=1000; fail QnnGraph_execute#2 rc=1000", "without ';'"),
    ("hold enter averyveryverylongmodule:QnnGraph_execute#1 until enter B:QnnGraph_execute#1",
     "at most 15"),
])
def test_a_bad_rule_is_one_clear_error(text, words):
    with pytest.raises(NemesisError, match=words.replace("(", r"\(").replace("+", r"\+")):
        parse_rule(text)


def test_a_scenario_file_with_a_bad_rule_is_refused_naming_it():
    doc = {"steps": [{"op": "snapshot"}], "qnn_nemesis": ["fail QnnGraph_execute#1 rc=x"]}
    with pytest.raises(ScenarioError, match="unknown QNN error 'x'"):
        validate_scenario(doc)
    assert validate_scenario({"steps": [{"op": "snapshot"}],
                              "qnn_nemesis": ["fail QnnGraph_execute#1 rc=1100"]}).qnn_nemesis \
        == ("fail QnnGraph_execute#1 rc=1100",)




def _events(*lines: tuple[str, dict]) -> list:
    from harness.protocol.nemesis import NemesisEvent

    return [NemesisEvent(kind, int(f["rule"]) if "rule" in f else None, f) for kind, f in lines]


RULES = (hold("enter", "A:QnnGraph_execute#2", "leave", "B:step.destroy_module#1"),)


def test_a_point_that_came_after_the_hold_gave_up_is_an_unreachable_rendezvous():
    """The runtime kept B's destroy out of A's execute: the point came, but only once A went on.
    That is the runtime ordering the calls (judged on what ran), not a rule that failed."""
    from harness.protocol.nemesis import nemesis_problems, unreachable_rendezvous

    events = _events(("rules", {"count": "1"}),
                     ("hold", {"rule": "0", "point": "enter", "api": "QnnGraph_execute"}),
                     ("timeout", {"rule": "0", "waited_ms": "10000"}),
                     ("late", {"rule": "0", "point": "leave", "api": "step.destroy_module",
                               "actor": "B"}))
    assert nemesis_problems(RULES, events, finished=True) == []
    (said,) = unreachable_rendezvous(RULES, events)
    assert "waited 10000 ms at enter A:QnnGraph_execute#2" in said
    assert "'B' reached leave B:step.destroy_module#1 only after it went on" in said


def test_a_point_never_reached_stays_a_failed_rule():
    from harness.protocol.nemesis import nemesis_problems, unreachable_rendezvous

    events = _events(("rules", {"count": "1"}),
                     ("hold", {"rule": "0", "point": "enter", "api": "QnnGraph_execute",
                               "actor": "A"}),
                     ("timeout", {"rule": "0", "waited_ms": "10000"}))
    assert unreachable_rendezvous(RULES, events) == []
    (problem,) = nemesis_problems(RULES, events, finished=True)
    assert "rendezvous timed out after 10000 ms" in problem
    # Who waited, where, and for what: the words `harness replay` prints too.
    assert ("thread 'A' waited at enter A:QnnGraph_execute#2 for leave "
            "B:step.destroy_module#1, which no thread reached") in problem


def test_a_hold_the_run_cannot_outlive_is_refused_naming_the_rule():
    """A hold past the runner timeout would end as "runner hung", never as its own timeout.
    Holds are bounded one by one: many short holds may add up to more (they release at once
    when their rendezvous happens)."""
    from harness.protocol.nemesis import check_hold_timeouts

    long = hold("enter", "A:QnnGraph_execute#1", "enter", "B:QnnGraph_execute#1",
                timeout_ms=10**12)
    with pytest.raises(NemesisError, match=r"rule 1 '.*timeout_ms=1000000000000': "
                       r"timeout_ms=1000000000000 is not under the runner timeout \(300 s\)"
                       r".*--runner-timeout"):
        check_hold_timeouts([fail_at("QnnGraph_execute", 1), long], 300)
    default = hold("enter", "A:QnnGraph_execute#1", "enter", "B:QnnGraph_execute#1")
    with pytest.raises(NemesisError, match=r"rule 0 .*timeout_ms=10000 is not under the runner "
                       r"timeout \(10 s\)"):
        check_hold_timeouts([default], 10)
    check_hold_timeouts([default] * 20, 120)  # 200 s together, each under 120 s
    check_hold_timeouts([fail_at("QnnGraph_execute", 1)], 0.5)  # fail rules never wait
