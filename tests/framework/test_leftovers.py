"""Which leftover workspaces a session may reclaim, by the lease's rules, without a device
(harness.devices.leftovers): a workspace of a session that lost its lease (its owner on
another host, the lease stale or held by another session) is gone; one whose owner holds the
lease, or runs on this host, is live."""

from pathlib import PurePosixPath

from harness.devices.lease import Holder
from harness.devices.leftovers import LeaseState, classify

STALE_S = 120
WS = PurePosixPath("/data/local/tmp/executorch-hil-lost0001-gw0")


def other_host(token: str, **fields: str) -> dict[str, str]:
    return {"token": token, "host": "another-host", "hostboot": "b00t", "pid": "4242",
            "session": "lost", "worker": "gw0", **fields}


def test_a_session_that_lost_its_lease_to_another_leaves_a_workspace_that_is_gone():
    lease = LeaseState.of(Holder(other_host("tok-new", age="3")), STALE_S)
    assert lease.live and not lease.ours
    left = classify(WS, other_host("tok-old"), 5900, lease)
    assert left.state == "gone", left
    assert "its owner does not hold the device's lease" in left.reason
    assert "held by" in left.reason and left.size() == "5.8 MB"


def test_a_workspace_whose_owner_holds_only_a_stale_lease_is_gone():
    lease = LeaseState.of(Holder(other_host("tok-old", age=str(STALE_S + 1))), STALE_S)
    assert not lease.live
    left = classify(WS, other_host("tok-old"), 100, lease)
    assert left.state == "gone" and "the device's lease is stale" in left.reason, left


def test_a_workspace_whose_owner_holds_a_fresh_lease_is_live():
    lease = LeaseState.of(Holder(other_host("tok-old", age="5")), STALE_S)
    left = classify(WS, other_host("tok-old"), 100, lease)
    assert left.state == "live", left


def test_a_gone_workspace_its_session_kept_is_removed_only_when_asked():
    left = classify(WS, other_host("tok-old", keep="1"), None, LeaseState.of(None, STALE_S))
    assert left.state == "kept" and "--keep-workspace" in left.reason, left
