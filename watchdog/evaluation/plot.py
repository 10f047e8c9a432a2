"""`replay --plot OUT.png`: a timeline per contention domain, so a person sees why a finding was raised.

A report says "interference on GPU-… power, ticks 40–95, culprit ml/hog"; a reviewer wants to see it: each pod's
use of the shared resource (the culprit in red, victims in blue) with the victim's trailing baseline band, the
domain's clock loss and throttle reasons, the finding episodes as shaded spans and the eviction decisions as
marks. The domains come from the detector's own pure functions (watchdog.detection.domains_of), fed the replayed
ticks. matplotlib is the optional ``plot`` extra and is imported only here, only when a plot is asked for.

The baseline band drawn is the victim's trailing median ± 2 MAD over BAND_TICKS ticks of its own use: a picture
of "its usual level", not the detector's internal state (which learns per episode and per signal).
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from pathlib import Path
from typing import Any

from watchdog.detection import devices_of, domains_of
from watchdog.evaluation.stages import StepResult

BAND_TICKS = 60
MAX_PANELS = 6
POWER_CAP_BITS = 0x4 | 0x8 | 0x20 | 0x40 | 0x80  # SwPowerCap, HwSlowdown, Sw/HwThermal, HwPowerBrake (nvml.h)


class TimelineRecorder:
    """Called with every replayed StepResult; ``render(path, report=…)`` draws the domains that had findings (or,
    when none had, the first few). Ticks at or before the last one seen are ignored: the same trace replayed again
    (``--compare``) or a second trace draws nothing twice — the plot is of the first trace."""

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
            self.titles.setdefault(key, f"{domain.kind} · {domain.resource} · GPU {domain.gpu.index}")
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

    def render(self, path: str | Path, *, report: dict[str, Any]) -> Path:
        import matplotlib

        matplotlib.use("Agg")  # files only: no display, no GUI toolkit
        import matplotlib.pyplot as plt

        keys = self._chosen(report) or ["(no domain)"]
        figure, axes = plt.subplots(len(keys), 1, figsize=(12, 3.4 * len(keys)), squeeze=False)
        for row, key in enumerate(keys):
            self._panel(axes[row][0], key, report)
        axes[-1][0].set_xlabel("tick")
        figure.suptitle(f"{report['trace']['node']}: {report['ticks']} ticks, mode {report['mode']}")
        figure.tight_layout()
        figure.savefig(path, dpi=100)
        plt.close(figure)
        return Path(path)

    def _panel(self, ax: Any, key: str, report: dict[str, Any]) -> None:
        findings = [f for f in report["findings"] if f["domain"] == key]
        culprits = {f["culprit"] for f in findings if f["culprit"]}
        victims = {v for f in findings for v in f["victims"]}
        ax.set_title(self.titles.get(key, key), fontsize=10, loc="left")
        ax.set_ylabel("use of its share")
        for pod, points in sorted(self.activity.get(key, {}).items()):
            ticks, values = zip(*points)
            color, width = ("tab:red", 2.0) if pod in culprits else ("tab:blue", 1.5) if pod in victims \
                else ("0.6", 0.8)
            ax.plot(ticks, values, color=color, linewidth=width, label=pod if color != "0.6" else None)
            if pod in victims:
                low, high = _band(values)
                ax.fill_between(ticks, low, high, color="tab:blue", alpha=0.12, linewidth=0)
        clock = self.clock_loss.get(key)
        if clock:
            twin = ax.twinx()
            ticks, values = zip(*clock)
            twin.plot(ticks, values, color="tab:orange", linewidth=1, linestyle="--", label="clock loss")
            throttled = [tick for tick, flag in self.throttled.get(key, []) if flag]
            twin.scatter(throttled, [1.02] * len(throttled), marker="|", color="tab:orange", s=30)
            twin.set_ylim(0, 1.05)
            twin.set_ylabel("clock loss / throttled")
        for finding in findings:
            ax.axvspan(finding["first_tick"], finding["last_tick"], color="tab:red", alpha=0.08)
            ax.text(finding["first_tick"], 0.9, f" {finding['kind']} ({finding['severity']})", fontsize=8,
                    va="top", transform=ax.get_xaxis_transform())
        keys = {f["key"] for f in findings}
        for eviction in report["evictions"]:
            if eviction["finding"]["key"] in keys and eviction["result"] != "cooldown":  # a cooldown repeats a send
                ax.axvline(eviction["tick"], color="black", linewidth=1, linestyle=":")
                ax.text(eviction["tick"], 0.02, f" {eviction['result']} {eviction['pod']}", fontsize=8, rotation=90,
                        va="bottom", transform=ax.get_xaxis_transform())
        ax.set_ylim(bottom=0)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(loc="upper right", fontsize=8)


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
