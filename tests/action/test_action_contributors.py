"""Several pods driving one contention never block relief.

Two low-priority batch pods cap a GPU only together; the detector names the one that tipped the cap and lists the
other among the victims, because its clock fell too. That victim is not above the culprit's priority: it must not
veto the relief of the serving pod, and among the pods that drive the contention the lowest priority goes first.
Whoever goes, `protects` lists exactly the victims strictly above it.
"""

from __future__ import annotations

from action_builders import attribution, finding, pod, ref
from watchdog.action import decide
from watchdog.action.decision import CO_DRIVER_USE_SHARE
from watchdog.config.action import ActionPolicy
from watchdog.model import EvictionResult as R

POLICY = ActionPolicy()
SERVE = pod("serve", ns="prod", priority=100_000)


def one(f, *pods):
    [d] = decide([f], attribution(*pods), policy=POLICY, now=0.0)
    return d


def use(**by_pod: float) -> dict[str, float]:
    names = {"serve": "prod", "sweep": "research", "finetune": "vision", "train": "batch", "tiny": "tools",
             "ds": "infra", "boss": "ml"}
    return {f"{names[name]}/{name}": value for name, value in by_pod.items()}


def test_two_contributors_the_lower_priority_one_goes_and_protects_the_serving_pod():
    train, sweep = pod("train", ns="batch", priority=100), pod("sweep", ns="research", priority=50)
    f = finding(culprit=train, victims=(sweep, SERVE), usage=use(train=0.24, sweep=0.24, serve=0.36))
    d = one(f, train, sweep, SERVE)
    assert d.result is None and d.request.pod == ref(sweep)
    assert d.request.protects == ((ref(SERVE), 100_000),)


def test_three_contributors_relief_in_order_and_protects_exactly_those_above():
    train = pod("train", ns="batch", priority=30)
    sweep, finetune = pod("sweep", ns="research", priority=10), pod("finetune", ns="vision", priority=20)
    f = finding(culprit=train, victims=(sweep, finetune, SERVE),
                usage=use(train=0.24, sweep=0.24, finetune=0.24, serve=0.11))
    d = one(f, train, sweep, finetune, SERVE)
    assert d.result is None and d.request.pod == ref(sweep)
    assert d.request.protects == ((ref(finetune), 20), (ref(SERVE), 100_000))


def test_a_small_victim_is_no_co_driver_and_vetoes_nothing():
    train, tiny = pod("train", ns="batch", priority=100), pod("tiny", ns="tools", priority=5)
    small = 0.24 * CO_DRIVER_USE_SHARE * 0.9
    d = one(finding(culprit=train, victims=(tiny, SERVE), usage=use(train=0.24, tiny=small, serve=0.36)),
            train, tiny, SERVE)
    assert d.result is None and d.request.pod == ref(train)
    assert d.request.protects == ((ref(SERVE), 100_000),)  # tiny is not above the culprit: not protected either


def test_without_per_pod_use_only_the_culprit_is_a_candidate():
    train, sweep = pod("train", ns="batch", priority=100), pod("sweep", ns="research", priority=50)
    d = one(finding(culprit=train, victims=(sweep, SERVE)), train, sweep, SERVE)
    assert d.result is None and d.request.pod == ref(train)


def test_a_protected_co_driver_is_skipped_for_the_next_in_relief_order():
    train, ds = pod("train", ns="batch", priority=100), pod("ds", ns="infra", priority=1, owner_kind="DaemonSet")
    d = one(finding(culprit=train, victims=(ds, SERVE), usage=use(train=0.24, ds=0.3, serve=0.36)), train, ds, SERVE)
    assert d.result is None and d.request.pod == ref(train)


def test_a_terminating_co_driver_stops_everything_its_share_is_being_freed():
    train = pod("train", ns="batch", priority=100)
    sweep = pod("sweep", ns="research", priority=50, deleting=True)
    d = one(finding(culprit=train, victims=(sweep, SERVE), usage=use(train=0.24, sweep=0.24, serve=0.36)),
            train, sweep, SERVE)
    assert d.result is R.ALREADY_EVICTED and "research/sweep" in d.detail


def test_a_culprit_above_every_victim_still_evicts_nobody():
    # The high-priority pod's own ramp capped the GPU; the batch pod beside it lost clock (a trap scenario): the
    # batch pod drives the draw too, but its eviction would protect nobody above it.
    boss, sweep = pod("boss", ns="ml", priority=100_000), pod("sweep", ns="research", priority=50)
    d = one(finding(culprit=boss, victims=(sweep,), usage=use(boss=0.5, sweep=0.24)), boss, sweep)
    assert d.result is R.NOT_LOWER_PRIORITY and d.request.protects == ()


def test_equal_priority_the_named_culprit_goes_first():
    train, sweep = pod("train", ns="batch", priority=100), pod("sweep", ns="research", priority=100)
    d = one(finding(culprit=train, victims=(sweep, SERVE), usage=use(train=0.2, sweep=0.3, serve=0.36)),
            train, sweep, SERVE)
    assert d.request.pod == ref(train) and d.request.protects == ((ref(SERVE), 100_000),)


def test_the_request_says_why_a_co_driver_goes_instead_of_the_named_culprit():
    train, sweep = pod("train", ns="batch", priority=100), pod("sweep", ns="research", priority=50)
    f = finding(culprit=train, victims=(sweep, SERVE), usage=use(train=0.24, sweep=0.24, serve=0.36))
    message = one(f, train, sweep, SERVE).request.message
    assert "evicting research/sweep (priority 50) relieves prod/serve (priority 100000)" in message
    assert "drives the contention with batch/train (priority 100)" in message


def test_co_drivers_only_reorder_a_relief_the_culprit_itself_would_bring():
    # A protected culprit (here a DaemonSet's pod) is no reason to evict the steady pod beside it instead.
    train = pod("train", ns="batch", priority=100, owner_kind="DaemonSet")
    sweep = pod("sweep", ns="research", priority=50)
    d = one(finding(culprit=train, victims=(sweep, SERVE), usage=use(train=0.24, sweep=0.24, serve=0.36)),
            train, sweep, SERVE)
    assert d.result is R.PROTECTED and d.request.pod == ref(train)
    # Nor is a culprit above every victim but one (the trap scenario trap-victim-own-ramp-power, where the
    # high-priority pod's own ramp capped the GPU): the steady batch pod is not evicted to protect the other victim.
    boss, tiny = pod("boss", ns="ml", priority=100_000), pod("tiny", ns="tools", priority=20_000)
    d = one(finding(culprit=boss, victims=(sweep, tiny), usage=use(boss=0.3, sweep=0.3, tiny=0.05)), boss, sweep, tiny)
    assert d.result is R.NOT_LOWER_PRIORITY and d.request.pod == ref(boss)
