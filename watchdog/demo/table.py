"""Renders a Snapshot as the demo's terminal table: one row per GPU, MIG instance and time-sliced pod.

Pure text (no curses), so the same function serves the live screen and a test that reads it.
"""

from __future__ import annotations

from watchdog.model import Attribution, GpuSample, PodRef, Snapshot

REASONS = {0x4: "pwr-cap", 0x8: "hw-slow", 0x20: "sw-therm", 0x40: "hw-therm", 0x80: "pwr-brake"}
HEADER = (
    f"{'GPU':<4}{'INSTANCE':<18}{'GI/CI':<7}{'MEMORY':>17} {'DRAM':>5} {'SM':>5} "
    f"{'CLOCK':>9} {'THROTTLE':<9}{'POWER':>7} {'XID':>4}  {'PROCS':>5}  NAMESPACE/POD"
)


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{value * 100:.0f}%"


def _mem(used: int | None, total: int | None) -> str:
    if used is None or total is None:
        return "-"
    return f"{used / 2**30:.1f}/{total / 2**30:.0f} GiB"


def _throttle(gpu: GpuSample) -> str:
    mask = gpu.clock_event_reasons or 0
    names = [name for bit, name in REASONS.items() if mask & bit]
    return ",".join(names) or "-"


def _owners(attribution: Attribution | None, uuid: str) -> str:
    if attribution is None:
        return "?"
    pods: tuple[PodRef, ...] = attribution.devices.get(uuid, ())
    return ", ".join(p.key for p in pods) or "-"


def _xids(snapshot: Snapshot, gpu: int, gi: int | None) -> int:
    return sum(count for (g, _, i, _), (count, _) in snapshot.xid_counts.items() if g == gpu and i == gi)


def render_table(snapshot: Snapshot) -> str:
    sample, attribution = snapshot.sample, snapshot.attribution
    if sample is None:
        return "waiting for the first sample…"
    lines = [f"node {snapshot.node}  tick {sample.tick}  mode {snapshot.mode}"
             f"{'  EVICTIONS PAUSED' if snapshot.paused else ''}", HEADER]
    for gpu in sample.gpus:
        if gpu.lost:
            lines.append(f"{gpu.index:<4}{gpu.name[:17]:<18}GPU LOST")
            continue
        clock = f"{gpu.sm_clock_mhz:.0f}MHz" if gpu.sm_clock_mhz is not None else "-"
        power = f"{gpu.power_watts:.0f}W" if gpu.power_watts is not None else "-"
        label = gpu.name.replace("NVIDIA ", "")[:17]
        lines.append(
            f"{gpu.index:<4}{label:<18}{'MIG' if gpu.mig_enabled else '-':<7}"
            f"{_mem(gpu.memory_used_bytes, gpu.memory_total_bytes):>17} {_pct(gpu.dram_bw_util if gpu.dram_bw_util is not None else gpu.memory_util):>5} "
            f"{_pct(gpu.sm_util if gpu.sm_util is not None else gpu.gpu_util):>5} {clock:>9} {_throttle(gpu):<9}"
            f"{power:>7} {_xids(snapshot, gpu.index, None):>4}  {len(gpu.processes):>5}  "
            f"{'' if gpu.mig_enabled else _owners(attribution, gpu.uuid)}"
        )
        for mig in gpu.instances:
            lines.append(
                f"{'':<4}  {mig.profile:<16}{mig.gpu_instance}/{mig.compute_instance:<5}"
                f"{_mem(mig.memory_used_bytes, mig.memory_total_bytes):>17} {_pct(mig.dram_bw_util):>5} "
                f"{_pct(mig.sm_util):>5} {'':>9} {'':<9}{'':>7} {_xids(snapshot, gpu.index, mig.gpu_instance):>4}  "
                f"{len(mig.processes):>5}  {_owners(attribution, mig.uuid)}"
            )
        if not gpu.mig_enabled and attribution is not None:
            for process in gpu.processes:
                owner = attribution.processes.get(process.pid)
                used = process.used_memory_bytes
                lines.append(
                    f"{'':<4}  {'pid ' + str(process.pid):<16}{'':<7}"
                    f"{(f'{used / 2**30:.1f} GiB' if used is not None else '-'):>17} {_pct(process.memory_util):>5} "
                    f"{_pct(process.sm_util):>5} {'':>9} {'':<9}{'':>7} {'':>4}  {'':>5}  "
                    f"{owner.key if owner else '?'}"
                )
    lines.append("")
    lines.append(f"findings ({len(snapshot.findings)}):")
    for finding in snapshot.findings[:8]:
        victims = ",".join(v.key for v in finding.victims) or "-"
        culprit = finding.culprit.key if finding.culprit else "-"
        lines.append(f"  {finding.kind:<19}{finding.severity:<9}{finding.domain:<40} victims={victims}"
                     f" culprit={culprit} for {finding.ticks} ticks")
    if snapshot.evictions:
        lines.append("actions: " + "  ".join(
            f"{result}:{reason}:{ns}={n}" for (result, reason, ns), n in sorted(snapshot.evictions.items())))
    stages = "  ".join(f"{s.name}={'ok' if s.success else 'DEGRADED'}" for s in snapshot.stages)
    lines.append(f"stages: {stages}")
    return "\n".join(lines)
