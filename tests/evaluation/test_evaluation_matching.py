"""Scoring rules on synthetic findings: what counts as a hit, a false positive, a miss, and how latency is taken."""

import pytest

from watchdog.evaluation.matching import matches, score, scored_kind
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


def test_lingering_finding_is_one_true_episode_but_shows_as_overhang_and_false_ticks() -> None:
    truth = parse_truth({"interference": [{"victim": "p/a", "culprit": "b/x", "onset": 100, "offset": 200}],
                         "slack_ticks": 10}, source="t")
    # reported 5 ticks before onset, lingers 100 ticks past offset + slack
    lingering = finding("interference", reported=95, last=310, victims=["p/a"], culprit="b/x")
    k = score([lingering], truth).kinds["interference"]
    assert (k.precision, k.recall) == (1.0, 1.0)  # by episodes it is still correct …
    assert k.overhangs == [100] and k.overhang_median == 100 and k.overhang_max == 100  # … but it lingered
    assert k.finding_ticks == 216 and k.true_finding_ticks == 111  # ticks 100–210 inside the window
    assert k.precision_ticks == pytest.approx(111 / 216)
    scored = score([lingering], truth)
    assert [(f["last_tick"], ticks) for f, ticks in scored.overhanging] == [(310, 100)]


def test_false_episode_ticks_count_against_precision_by_ticks() -> None:
    truth = parse_truth({"interference": [{"victim": "p/a", "culprit": "b/x", "onset": 10, "offset": 20}],
                         "slack_ticks": 0}, source="t")
    scored = score([finding("interference", reported=10, last=19, victims=["p/a"], culprit="b/x"),
                    finding("interference", reported=50, last=79, victims=["p/a"], culprit="b/q")], truth)
    k = scored.kinds["interference"]
    assert (k.finding_ticks, k.true_finding_ticks, k.overhangs) == (40, 10, [0])
    assert k.precision_ticks == pytest.approx(0.25) and not scored.overhanging


def test_flapping_finding_counts_duplicate_episodes_per_truth_entry() -> None:
    truth = parse_truth({"interference": [{"victim": "p/a", "culprit": "b/x", "onset": 100, "offset": 200}]},
                        source="t")
    episodes = [finding("interference", reported=start, last=start + 9, victims=["p/a"], culprit="b/x")
                for start in (102, 130, 170)]
    scored = score(episodes, truth)
    k = scored.kinds["interference"]
    assert (k.findings, k.true_findings, k.detected, k.duplicates) == (3, 3, 1, 2)
    [(kind, entry, count)] = scored.flapping
    assert (kind, entry.culprit, count) == ("interference", "b/x", 3)


def test_open_truth_has_no_overhang_and_windows_of_several_entries_are_not_double_counted() -> None:
    truth = parse_truth({"memory_pressure": [{"culprit": "b/g", "onset": 10, "offset": 30},
                                             {"culprit": "b/g", "onset": 20}]}, source="t")
    k = score([finding("memory_pressure", reported=15, last=60, culprit="b/g")], truth).kinds["memory_pressure"]
    assert k.overhangs == [] and k.overhang_median is None  # one matched entry never ends
    assert (k.finding_ticks, k.true_finding_ticks) == (46, 46)


def test_mig_fill_warning_is_scored_as_memory_warning_not_quota() -> None:
    truth = parse_truth({"quota": [{"tenant": "ml", "onset": 80, "offset": 220}],
                         "memory_warning": [{"pod": "batch/cache", "gpu": 0, "instance": 0, "onset": 100,
                                             "offset": 200}]}, source="t")
    warning = {**finding("mig_memory_warning", reported=103, last=199, culprit="batch/cache", tenant="batch"),
               "key": "mig-memory/MIG-1", "severity": "warning"}
    breach = {**finding("quota", reported=83, last=219, tenant="ml"), "key": "quota/ml/memory", "severity": "critical"}
    scored = score([warning, breach], truth, hysteresis={"quota": 4, "memory_warning": 4})
    assert scored_kind(warning) == "memory_warning" and scored_kind(breach) == "quota"
    # the row follows the kind alone: a quota WARNING is still a quota finding
    assert scored_kind({**breach, "severity": "warning", "key": "quota/mig-memory/MIG-1"}) == "quota"
    q, w = scored.kinds["quota"], scored.kinds["memory_warning"]
    assert (q.findings, q.true_findings, q.detected) == (1, 1, 1)
    assert (w.findings, w.true_findings, w.detected, w.latencies) == (1, 1, 1, [3])
    wrong_pod = {**warning, "culprit": "prod/serve"}
    assert score([wrong_pod], truth).kinds["memory_warning"].precision == 0.0
    # without a memory_warning label the warning is a false positive of its own row, never a quota miss or hit
    unlabelled = score([warning], parse_truth({"quota": [{"tenant": "batch", "onset": 100}]}, source="t"))
    assert unlabelled.kinds["memory_warning"].findings == 1 and unlabelled.kinds["quota"].detected == 0


@pytest.mark.parametrize(
    ("truth", "message"),
    [
        ({"memory_warning": [{"onset": 3}]}, r"truth\.memory_warning\.0\.pod: Field required"),
        ({"memory_warning": [{"pod": "x", "onset": 3}]}, r"truth\.memory_warning\.0\.pod: String should match"),
        ({"no_evictions": [{"onset": 9, "offset": 2}]}, r"offset \(2\) is before onset \(9\)"),
        ({"no_evictions": [{"onset": 9, "why": "x"}]}, r"truth\.no_evictions\.0\.why: Extra inputs"),
    ],
)
def test_new_truth_lists_name_the_bad_field(truth: dict, message: str) -> None:
    with pytest.raises(TruthError, match=message):
        parse_truth(truth, source="s.yaml")


def test_recall_by_ticks_counts_observed_critical_ticks_inside_the_window() -> None:
    truth = parse_truth({"interference": [{"victim": "prod/a", "culprit": "batch/b", "onset": 10, "offset": 20}]},
                        source="t")
    hit = finding("interference", reported=12, last=40, victims=["prod/a"], culprit="batch/b")
    ticks = {t: True for t in range(12, 41)}
    ticks.update({15: False, 16: False})  # a WARNING is not actionable
    del ticks[17]  # not observed (kept open blind)
    scored = score([hit], truth, episode_ticks={(hit["key"], 12): ticks}, end_tick=100)
    kind = scored.kinds["interference"]
    assert kind.coverages == [pytest.approx(5 / 10)]  # 12, 13, 14, 18, 19 of 10..19
    assert kind.recall_ticks_median == kind.recall_ticks_min == pytest.approx(0.5)


def test_recall_by_ticks_for_open_windows_and_missed_entries() -> None:
    truth = parse_truth({"interference": [{"victim": "prod/a", "culprit": "batch/b", "onset": 90},
                                          {"victim": "prod/a", "culprit": "batch/c", "onset": 10, "offset": 20}]},
                        source="t")
    hit = finding("interference", reported=95, last=99, victims=["prod/a"], culprit="batch/b")
    scored = score([hit], truth, episode_ticks={(hit["key"], 95): {t: True for t in range(95, 100)}}, end_tick=99)
    assert scored.kinds["interference"].coverages == [pytest.approx(0.5), 0.0]  # open window ends with the run
    assert score([hit], truth).kinds["interference"].coverages == []  # not measured without the ticks


def test_report_only_kind_counts_its_warning_ticks() -> None:
    truth = parse_truth({"memory_warning": [{"pod": "batch/cache", "onset": 0, "offset": 4}]}, source="t")
    warning = {**finding("mig_memory_warning", reported=0, last=3, culprit="batch/cache"), "key": "mig-memory/MIG-1",
               "severity": "warning"}
    scored = score([warning], truth, episode_ticks={("mig-memory/MIG-1", 0): dict.fromkeys(range(4), False)},
                   end_tick=10)
    assert scored.kinds["memory_warning"].coverages == [1.0]
