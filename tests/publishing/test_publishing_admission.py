"""Who a full listener keeps (publishing/admission.py), without sockets."""

from __future__ import annotations

import pytest

from watchdog.publishing.admission import Admission, ConnectionTable, Verdict


def table(capacity: int = 4, *, per_client: int | None = None, reserve: int = 1) -> ConnectionTable[str]:
    return ConnectionTable(capacity=capacity, per_client=per_client or capacity // 2, probe_reserve=reserve)


def fill(connections: ConnectionTable[str], *arrivals: tuple[str, str]) -> None:
    for name, peer in arrivals:
        assert connections.admit(name, peer).verdict is Verdict.SERVE


def test_below_the_cap_everyone_is_served_and_nobody_evicted():
    connections = table()
    for name, peer in [("a", "10.0.0.1"), ("b", "10.0.0.2"), ("c", "10.0.0.3")]:
        admission = connections.admit(name, peer)
        assert (admission.verdict, admission.evict) == (Verdict.SERVE, ())
    assert len(connections) == 3


def test_past_its_share_a_client_loses_its_own_oldest_idle_connection():
    connections = table()
    fill(connections, ("a1", "attacker"), ("a2", "attacker"), ("s", "scraper"))
    admission = connections.admit("a3", "attacker")
    assert (admission.verdict, admission.evict) == (Verdict.SERVE, ("a1",))
    assert "a1" not in connections and len(connections) == 3


def test_past_its_share_a_busy_connection_is_skipped_and_an_all_busy_client_refused():
    connections = table()
    fill(connections, ("a1", "attacker"), ("a2", "attacker"))
    connections.started("a1")
    assert connections.admit("a3", "attacker").evict == ("a2",)
    connections.started("a3")
    assert connections.admit("a4", "attacker").verdict is Verdict.REFUSE
    assert "a4" not in connections


def test_at_the_cap_the_oldest_idle_connection_of_the_biggest_holder_goes():
    connections = table()
    fill(connections, ("s", "scraper"), ("x1", "x"), ("y1", "y"), ("y2", "y"))
    admission = connections.admit("probe", "kubelet")
    assert (admission.verdict, admission.evict) == (Verdict.SERVE, ("y1",))


def test_busy_connections_are_never_evicted_and_probes_then_get_the_reserve():
    connections = table(2, per_client=2, reserve=1)
    fill(connections, ("a", "p"), ("b", "q"))
    connections.started("a")
    connections.started("b")
    admission = connections.admit("probe", "kubelet")
    assert (admission.verdict, admission.evict) == (Verdict.PROBES_ONLY, ())
    assert connections.probes_only("probe")
    connections.started("probe")
    assert connections.admit("late", "r").verdict is Verdict.REFUSE
    connections.finished("probe")  # an idle reserve connection makes room for the next probe
    assert connections.admit("next", "r") == Admission(Verdict.PROBES_ONLY, ("probe",))


def test_a_finished_request_makes_its_connection_evictable_again():
    connections = table(1, per_client=1, reserve=0)
    fill(connections, ("a", "p"))
    connections.started("a")
    assert connections.admit("b", "q").verdict is Verdict.REFUSE
    connections.finished("a")
    assert connections.idle("a")
    assert connections.admit("b", "q").evict == ("a",)


def test_forgetting_closed_and_evicted_connections():
    connections = table()
    fill(connections, ("a", "p"), ("b", "p"))
    evicted = connections.admit("c", "p").evict
    connections.forget(evicted[0])  # its connection_lost comes later: a no-op
    connections.forget("b")
    assert len(connections) == 1 and "c" in connections
    assert connections.admit("d", "p").verdict is Verdict.SERVE


@pytest.mark.parametrize("options, field", [
    ({"capacity": 0, "per_client": 1, "probe_reserve": 0}, "capacity"),
    ({"capacity": 1, "per_client": 0, "probe_reserve": 0}, "per_client"),
    ({"capacity": 1, "per_client": 1, "probe_reserve": -1}, "probe_reserve"),
])
def test_limits_out_of_range_are_refused_with_their_name(options, field):
    with pytest.raises(ValueError, match=f"{field}="):
        ConnectionTable(**options)
