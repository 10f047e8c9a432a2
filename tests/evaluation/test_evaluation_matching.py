"""Scoring rules on synthetic findings: what counts as a hit, a false positive, a miss, and how latency is taken."""

import pytest

from watchdog.evaluation.matching import matches, score
from watchdog.evaluation.truth import TruthError, parse_truth


def finding(kind: str, *, reported: int, last: int, victims=(), culprit=None, tenant=None, domain="d",
            evidence=None) -> dict:
    return {"kind": kind, "key": f"{kind}:{culprit}:{reported}", "domain": domain, "reported_tick": reported,
            "first_tick": reported, "last_tick": last, "victims": list(victims), "culprit": culprit,
            "tenant": tenant, "evidence": evidence or {}}


def test_interference_needs_culprit_victim_and_overlap() -> None:
    truth = parse_truth({"interference": [{"victim": "prod/a", "culprit": "batch/b", "onset": 60, "offset": 100}],
                         "slack_ticks": 5}, source="t")
    entry = truth.interference[0]
    assert matches(kind="interference", finding=finding("interference", reported=64, last=90, victims=["prod/a"],
                                           culprit="batch/b"), entry=entry, slack=5)
    # wrong culprit, wrong victim, wrong kind
    assert not matches(kind="interference", finding=finding("interference", reported=64, last=90, victims=["prod/a"],
                                               culprit="batch/c"), entry=entry, slack=5)
    assert not matches(kind="interference", finding=finding("interference", reported=64, last=90, victims=["prod/z"],
                                               culprit="batch/b"), entry=entry, slack=5)
    assert not matches(kind="interference", finding=finding("memory_pressure", reported=64, last=90, victims=["prod/a"],
                                               culprit="batch/b"), entry=entry, slack=5)
    # before onset entirely, and after offset + slack
    assert not matches(kind="interference", finding=finding("interference", reported=10, last=59, victims=["prod/a"],
                                               culprit="batch/b"), entry=entry, slack=5)
    assert not matches(kind="interference", finding=finding("interference", reported=106, last=120, victims=["prod/a"],
                                               culprit="batch/b"), entry=entry, slack=5)
    assert matches(kind="interference", finding=finding("interference", reported=105, last=120, victims=["prod/a"],
                                           culprit="batch/b"), entry=entry, slack=5)


def test_open_ended_truth_and_other_kinds() -> None:
    truth = parse_truth({
        "memory_pressure": [{"culprit": "batch/grow", "onset": 50}],
        "quota": [{"tenant": "ml", "onset": 30, "offset": 40}],
        "unauthorized": [{"pod": "ml/sneaky", "onset": 20}],
        "xid": [{"gpu": 1, "instance": 2, "xid": 13, "at": 70}],
    }, source="t")
    pressure = finding("memory_pressure", reported=900, last=901, culprit="batch/grow")
    assert matches(pressure, entry=truth.memory_pressure[0], kind="memory_pressure", slack=0)
    ml, web = finding("quota", reported=35, last=36, tenant="ml"), finding("quota", reported=35, last=36, tenant="web")
    assert matches(ml, entry=truth.quota[0], kind="quota", slack=0)
    assert not matches(web, entry=truth.quota[0], kind="quota", slack=0)
    sneaky = finding("unauthorized", reported=25, last=26, culprit="ml/sneaky")
    assert matches(sneaky, entry=truth.unauthorized[0], kind="unauthorized", slack=0)

    def xid(evidence: dict, *, domain: str = "d", reported: int = 70) -> bool:
        return matches(finding("xid", reported=reported, last=300, domain=domain, evidence=evidence),
                       entry=truth.xid[0], kind="xid", slack=3, gpu_uuids={1: "GPU-one", 0: "GPU-zero"})

    assert xid({"xid": 13, "gpu_instance": 2}, domain="gi/GPU-one/2")
    assert not xid({"xid": 13}, domain="gi/GPU-zero/2")  # other GPU, told by its UUID
    assert not xid({"xid": 79}, domain="gi/GPU-one/2")  # other Xid
    assert not xid({"gpu_index": 1, "xid": 13, "gpu_instance": 5})  # other instance
    assert not xid({"xid": 13}, domain="gi/GPU-one/2", reported=80)  # after at + slack


def test_score_counts_precision_recall_and_latency() -> None:
    truth = parse_truth({"interference": [
        {"victim": "p/a", "culprit": "b/x", "onset": 100, "offset": 200},
        {"victims": ["p/c", "p/d"], "culprit": "b/y", "onset": 50},
        {"victim": "p/e", "culprit": "b/z", "onset": 10, "offset": 20},
    ]}, source="t")
    findings = [
        finding("interference", reported=104, last=150, victims=["p/a"], culprit="b/x"),
        finding("interference", reported=160, last=190, victims=["p/a"], culprit="b/x"),  # same truth, 2nd episode
        finding("interference", reported=58, last=70, victims=["p/d"], culprit="b/y"),
        finding("interference", reported=58, last=70, victims=["p/q"], culprit="b/w"),  # false positive
        finding("quota", reported=5, last=6, tenant="ml"),  # false positive of another kind
    ]
    scored = score(findings, truth, hysteresis={"interference": 3})
    k = scored.kinds["interference"]
    assert (k.findings, k.true_findings, k.truths, k.detected) == (4, 3, 3, 2)
    assert k.precision == pytest.approx(0.75) and k.recall == pytest.approx(2 / 3)
    assert sorted(k.latencies) == [4, 8] and k.latency_median == 6 and k.latency_max == 8
    assert k.latency_median_after_hysteresis == 3
    assert [f["culprit"] for f in scored.false_positives] == ["b/w", None]
    assert [(kind, entry.culprit) for kind, entry in scored.misses] == [("interference", "b/z")]
    q = scored.kinds["quota"]
    assert q.precision == 0.0 and q.recall is None


def test_benign_truth_scores_no_findings_as_undefined_not_perfect() -> None:
    scored = score([], parse_truth({}, source="t"))
    assert scored.kinds["interference"].precision is None and scored.kinds["interference"].recall is None


def test_latency_is_never_negative() -> None:
    truth = parse_truth({"unauthorized": [{"pod": "a/b", "onset": 20}]}, source="t")
    scored = score([finding("unauthorized", reported=15, last=40, culprit="a/b")], truth)
    assert scored.kinds["unauthorized"].latencies == [0]


@pytest.mark.parametrize(
    ("truth", "message"),
    [
        ({"interference": [{"victim": "a/b", "onset": 3}]}, r"truth\.interference\.0\.culprit: Field required"),
        ({"interference": [{"culprit": "a/b", "onset": 3}]}, r"give `victim` or `victims`"),
        ({"quota": [{"tenant": "ml", "onset": 9, "offset": 2}]}, r"offset \(2\) is before onset \(9\)"),
        ({"unauthorized": [{"pod": "nopod", "onset": 1}]}, r"truth\.unauthorized\.0\.pod: String should match"),
        ({"xid": [{"gpu": 0, "xid": 13, "at": 1, "cuplrit": "a/b"}]}, r"truth\.xid\.0\.cuplrit: Extra inputs"),
        ({"expect_evictions": ["justname"]}, r"'justname' is not 'namespace/name'"),
    ],
)
def test_bad_truth_names_the_field(truth: dict, message: str) -> None:
    with pytest.raises(TruthError, match=message):
        parse_truth(truth, source="s.yaml")
