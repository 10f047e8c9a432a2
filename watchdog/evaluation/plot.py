"""`replay --plot OUT.png`: a timeline per contention domain, so a person sees why a finding was raised.

A report says "interference on GPU-… power, ticks 40–95, culprit ml/hog"; a reviewer wants to see it: each pod's
use of the shared resource (the culprit in red, each victim in a colour of its own, named in the legend) with each
victim's trailing baseline band, the domain's clock loss and its power-capped ticks, the finding episodes as shaded
spans and the eviction decisions as marks. Findings that are not about a contention domain (Xid, unauthorized use,
memory, quota) get a panel of their own at the bottom: one row each, a span from first to last tick (an Xid, an
instant, a marker). Every mark has a legend entry. The domains come from the detector's own pure functions
(watchdog.detection.domains_of), fed the replayed ticks. matplotlib is the optional ``plot`` extra and is imported
only here, only when a plot is asked for.

The baseline band drawn is the victim's trailing median ± 2 MAD over BAND_TICKS ticks of its own use: a picture
of "its usual level", not the detector's internal state (which learns per episode and per signal).
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from pathlib import Path
from typing import Any

from watchdog.detection import devices_of, domains_of
from watchdog.evaluation.report_text import plural
from watchdog.evaluation.stages import StepResult

BAND_TICKS = 60
MAX_PANELS = 6
POWER_CAP_BITS = 0x4 | 0x8 | 0x20 | 0x40 | 0x80  # SwPowerCap, HwSlowdown, Sw/HwThermal, HwPowerBrake (nvml.h)
VICTIM_COLOURS = ("tab:blue", "tab:green", "tab:purple", "tab:cyan", "tab:olive", "tab:brown", "tab:pink")
CULPRIT_COLOURS = ("tab:red", "darkred", "salmon")
KIND_COLOURS = {"xid": "black", "unauthorized": "tab:purple", "unauthorized_host": "indigo", "quota": "tab:brown",
                "memory_pressure": "tab:blue", "mig_memory_warning": "tab:cyan", "mps_memory_limit": "tab:olive"}
BAND_LABEL = f"shaded: a victim's usual level (median ± 2 MAD, last {BAND_TICKS} ticks)"
STRIP_LABEL = "strip: power-capped tick (SwPowerCap, HW slowdown/thermal/brake)"


class TimelineRecorder:
    """Called with every replayed StepResult; ``render(path, report=…)`` draws the domains that had findings (or,
    when none had, the first few) into a file, ``figure(report)`` returns the figure. Ticks at or before the last
    one seen are ignored: the same trace replayed again (``--compare``) or a second trace draws nothing twice — the
    plot is of the first trace."""

    def __init__(self) -> None:
        self.ticks: dict[str, list[int]] = defaultdict(list)
        self.activity: dict[str, dict[str, list[tuple[int, float]]]] = defaultdict(lambda: defaultdict(list))
        self.clock_loss: dict[str, list[tuple[int, float]]] = defaultdict(list)
        self.throttled: dict[str, list[tuple[int, int]]] = defaultdict(list)
        self.titles: dict[str, str] = {}
        self.last_tick: int | None = None

    def __call__(self, step: StepResult) -> None:
        tick = step.sample.tick
        if self.last_tick is not None and tick <= self.last_tick:
            return
        self.last_tick = tick
        for domain in domains_of(devices_of(step.sample, step.attribution)):
            key = domain.key
            what = " · ".join(dict.fromkeys((str(domain.kind), domain.resource)))  # a power domain is of power
            self.titles.setdefault(key, f"{what} · GPU {domain.gpu.index}")
            self.ticks[key].append(tick)
            for pod, use in domain.activity.items():
                if use is not None:
                    self.activity[key][pod].append((tick, use))
            if domain.clock_loss is not None:
                self.clock_loss[key].append((tick, domain.clock_loss))
            if domain.reasons is not None:
                self.throttled[key].append((tick, 1 if domain.reasons & POWER_CAP_BITS else 0))

    def _chosen(self, report: dict[str, Any]) -> list[str]:
        with_findings = [f["domain"] for f in report["findings"] if f["domain"] in self.ticks]
        keys = list(dict.fromkeys(with_findings)) or list(self.ticks)
        return keys[:MAX_PANELS]

    def figure(self, report: dict[str, Any]) -> Any:
        """The matplotlib Figure: a panel per chosen domain, then one for the findings no domain panel shows."""
        import matplotlib

        matplotlib.use("Agg")  # files only: no display, no GUI toolkit
        import matplotlib.pyplot as plt

        keys = self._chosen(report) or ["(no domain)"]
        others = [f for f in report["findings"] if f["domain"] not in keys]
        rows = len(keys) + bool(others)
        heights = [3.4] * len(keys) + ([max(1.6, 0.35 * len(others) + 1.0)] if others else [])
        figure, axes = plt.subplots(rows, 1, figsize=(14, sum(heights)), squeeze=False, sharex=True,
                                    gridspec_kw={"height_ratios": heights})
        for row, key in enumerate(keys):
            self._panel(axes[row][0], key, report)
        if others:
            _other_findings(axes[-1][0], others, report)
        axes[-1][0].set_xlabel("tick")
        figure.suptitle(f"{report['trace']['node']}: {plural(report['ticks'], 'tick')}, mode {report['mode']}")
        figure.tight_layout()
        return figure

    def render(self, path: str | Path, *, report: dict[str, Any]) -> Path:
        import matplotlib.pyplot as plt

        figure = self.figure(report)
        figure.savefig(path, dpi=100)
        plt.close(figure)
        return Path(path)

    def _panel(self, ax: Any, key: str, report: dict[str, Any]) -> None:
        findings = [f for f in report["findings"] if f["domain"] == key]
        culprits = list(dict.fromkeys(f["culprit"] for f in findings if f["culprit"]))
        victims = list(dict.fromkeys(v for f in findings for v in f["victims"] if v not in culprits))
        colours = {pod: CULPRIT_COLOURS[i % len(CULPRIT_COLOURS)] for i, pod in enumerate(culprits)}
        colours.update({pod: VICTIM_COLOURS[i % len(VICTIM_COLOURS)] for i, pod in enumerate(victims)})
        ax.set_title(self.titles.get(key, key), fontsize=10, loc="left")
        ax.set_ylabel("use of its share")
        labelled: set[str] = set()

        def once(label: str) -> str | None:  # one legend entry per kind of mark
            if label in labelled:
                return None
            labelled.add(label)
            return label

        for pod, points in sorted(self.activity.get(key, {}).items()):
            ticks, values = zip(*points)
            if pod in colours:
                role = "culprit" if pod in culprits else "victim"
                ax.plot(ticks, values, color=colours[pod], linewidth=2.0 if role == "culprit" else 1.5,
                        label=f"{pod} ({role})")
            else:
                ax.plot(ticks, values, color="0.6", linewidth=0.8, label=once("other pods"))
            if pod in victims:
                low, high = _band(values)
                ax.fill_between(ticks, low, high, color=colours[pod], alpha=0.12, linewidth=0, label=once(BAND_LABEL))
        legend_ax = ax
        clock = self.clock_loss.get(key)
        if clock:
            legend_ax = twin = ax.twinx()
            ticks, values = zip(*clock)
            twin.plot(ticks, values, color="tab:orange", linewidth=1, linestyle="--", label="clock loss")
            throttled = [tick for tick, flag in self.throttled.get(key, []) if flag]
            if throttled:
                twin.scatter(throttled, [1.02] * len(throttled), marker="|", color="tab:orange", s=30,
                             label=STRIP_LABEL)
            twin.set_ylim(0, 1.05)
            twin.set_ylabel("clock loss / power-capped")
        for finding in findings:
            ax.axvspan(finding["first_tick"], finding["last_tick"], color="tab:red", alpha=0.08,
                       label=once(f"{finding['kind']} finding (first–last tick)"))
            ax.text(finding["first_tick"], 0.9, f" {finding['kind']} ({finding['severity']})", fontsize=8,
                    va="top", transform=ax.get_xaxis_transform())
        keys = {f["key"] for f in findings}
        for eviction in report["evictions"]:
            if eviction["finding"]["key"] in keys and eviction["result"] != "cooldown":  # a cooldown repeats a send
                ax.axvline(eviction["tick"], color="black", linewidth=1, linestyle=":",
                           label=once("eviction decision"))
                ax.text(eviction["tick"], 0.02, f" {eviction['result']} {eviction['pod']}", fontsize=8, rotation=90,
                        va="bottom", transform=ax.get_xaxis_transform())
        ax.set_ylim(bottom=0)
        _legend(legend_ax, ax, *([legend_ax] if legend_ax is not ax else []))


def _legend(target: Any, *sources: Any) -> None:
    """One legend on ``target`` (the topmost axes, so no line hides it) for the marks of every axes in ``sources``."""
    handles, labels = [], []
    for source in sources:
        more_handles, more_labels = source.get_legend_handles_labels()
        handles += more_handles
        labels += more_labels
    if handles:
        target.legend(handles, labels, loc="upper left", bbox_to_anchor=(1.08, 1.0), fontsize=8, borderaxespad=0)


def _other_findings(ax: Any, findings: list[dict[str, Any]], report: dict[str, Any]) -> None:
    """One row per finding no domain panel shows: its span (an Xid, an instant: a marker) and its eviction marks."""
    labelled: set[str] = set()
    names = []
    for row, finding in enumerate(findings):
        kind = finding["kind"]
        colour = KIND_COLOURS.get(kind, "tab:red")
        label = None if kind in labelled else f"{kind} finding" + (" (instant)" if kind == "xid" else "")
        labelled.add(kind)
        if kind == "xid":
            ax.scatter([finding["reported_tick"]], [row], marker="X", s=60, color=colour, label=label, zorder=3)
        else:
            ax.hlines(row, finding["first_tick"], finding["last_tick"], color=colour, linewidth=6, label=label)
        who = finding["culprit"] or finding["tenant"] or ", ".join(finding["victims"]) or finding["domain"] or "-"
        names.append(f"{kind}: {who}")
        for eviction in report["evictions"]:
            if eviction["finding"]["key"] == finding["key"] and eviction["result"] != "cooldown":
                mark = None if "eviction" in labelled else "eviction decision"
                labelled.add("eviction")
                ax.scatter([eviction["tick"]], [row], marker="v", s=40, color="black", label=mark, zorder=4)
    ax.set_yticks(range(len(findings)), names, fontsize=8)
    ax.set_ylim(-0.7, len(findings) - 0.3)
    ax.invert_yaxis()
    ax.set_title("findings outside the domains above", fontsize=10, loc="left")
    _legend(ax, ax)


def _band(values: tuple[float, ...]) -> tuple[list[float], list[float]]:
    """Trailing median ± 2 MAD of each point's previous BAND_TICKS values."""
    low, high = [], []
    for index in range(len(values)):
        window = values[max(0, index - BAND_TICKS):index] or values[:1]
        median = statistics.median(window)
        mad = statistics.median(abs(value - median) for value in window)
        low.append(max(0.0, median - 2 * mad))
        high.append(median + 2 * mad)
    return low, high
