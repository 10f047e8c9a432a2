"""The few panel shapes both gpu-watchdog dashboards are made of, built with grafana-foundation-sdk.

Both dashboards share one datasource variable, the same `node` and `namespace` filters and the same handful of panel
kinds, so they are defined once here; the dashboard modules only say *what* to show. Panel ids are handed out by
a counter in build order, so regenerating gives byte-identical JSON (a diff means the dashboard really changed).
The SDK is pinned to Grafana 11.6 (`grafana-foundation-sdk==1769699379!11.6.0`, schemaVersion 41): a plain install
picks an older Grafana 10.1 build with schemaVersion 36 (the SDK's PyPI versions are `<epoch>!<grafana version>`
and the 10.1 build carries the highest epoch).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

from grafana_foundation_sdk.builders import stat, table, timeseries
from grafana_foundation_sdk.builders.common import ReduceDataOptions, VizLegendOptions
from grafana_foundation_sdk.builders.dashboard import (
    Dashboard,
    DashboardLink,
    DatasourceVariable,
    QueryVariable,
    Row,
    ThresholdsConfig,
)
from grafana_foundation_sdk.builders.prometheus import Dataquery
from grafana_foundation_sdk.models.common import (
    BigValueColorMode,
    BigValueGraphMode,
    GraphDrawStyle,
    LegendDisplayMode,
    LegendPlacement,
)
from grafana_foundation_sdk.models.dashboard import (
    DashboardLinkType,
    DataSourceRef,
    DataTransformerConfig,
    DynamicConfigValue,
    MatcherConfig,
    Threshold,
    ThresholdsMode,
    VariableRefresh,
    VariableSort,
)
from grafana_foundation_sdk.models.prometheus import PromQueryFormat

DATASOURCE = DataSourceRef(type_val="prometheus", uid="${datasource}")
NODE = 'node=~"$node"'
NAMESPACE = 'namespace=~"$namespace"'
# "All" must match series whose label is empty too (MIG instances no single pod owns, Xids NVML could not place):
# Grafana's default All value is the alternation of the listed values, which would hide them.
MATCH_ANYTHING = ".*"


def events_in(counter: str, window: str) -> str:
    """PromQL for the events `counter` counted within `window`, a series' first sample included.

    gpu-watchdog creates an event counter (`xid_errors_total`, `evictions_total`, …) on its first event, so the
    series is born at 1 and `increase()` — which only sees steps between samples — reads 0 for it: a panel showed
    no Xid while `xid_errors_total` was 1. A series that did not exist `window` ago therefore counts with its whole
    value (every event it counted happened inside the window); older series count by `increase()`. The alerts use
    the same form (docs/alerting.md, "Counters are born at 1").
    """
    return f"(({counter} unless {counter} offset {window}) or increase({counter}[{window}]))"


def variables() -> list:
    """datasource, node (multi, All) and namespace (multi, All), in that order."""
    node = (
        QueryVariable("node")
        .label("Node")
        .datasource(DATASOURCE)
        .query("label_values(gpu_watchdog_ready, node)")
        .refresh(VariableRefresh.ON_TIME_RANGE_CHANGED)
        .sort(VariableSort.ALPHABETICAL_ASC)
        .multi(True)
        .include_all(True)
        .all_value(MATCH_ANYTHING)
    )
    namespace = (
        QueryVariable("namespace")
        .label("Namespace")
        .datasource(DATASOURCE)
        .query('label_values(gpu_watchdog_pod_info{node=~"$node"}, namespace)')
        .refresh(VariableRefresh.ON_TIME_RANGE_CHANGED)
        .sort(VariableSort.ALPHABETICAL_ASC)
        .multi(True)
        .include_all(True)
        .all_value(MATCH_ANYTHING)
    )
    return [DatasourceVariable("datasource").label("Data source").type("prometheus"), node, namespace]


def related_dashboards() -> DashboardLink:
    """A drop-down to the other gpu-watchdog dashboards that keeps the time range and the variables."""
    return (
        DashboardLink("gpu-watchdog")
        .type(DashboardLinkType.DASHBOARDS)
        .tags(["gpu-watchdog"])
        .as_dropdown(True)
        .include_vars(True)
        .keep_time(True)
    )


@dataclass(frozen=True, slots=True)
class Query:
    """One PromQL target of a panel; `instant` queries feed tables and stats."""

    expr: str
    legend: str = ""
    instant: bool = False


@dataclass(slots=True)
class PanelIds:
    """Hands out panel ids 1, 2, 3… in build order (rows included), unique within one dashboard."""

    last: int = field(default=0)

    def next(self) -> int:
        self.last += 1
        return self.last


def dashboard(
    *, title: str, uid: str, description: str, tags: list[str], sections: tuple[tuple[str, Callable], ...]
) -> Dashboard:
    """A gpu-watchdog dashboard: shared header, variables and links, then one row per (title, panel builder)."""
    ids = PanelIds()
    built = (
        Dashboard(title)
        .uid(uid)
        .description(description)
        .tags(tags)
        .refresh("30s")
        .time("now-6h", "now")
        .variables(variables())
        .link(related_dashboards())
    )
    for row_title, panels in sections:
        built = built.with_row(Row(row_title).id(ids.next()))
        for panel in panels(ids):
            built = built.with_panel(panel)
    return built


def _targets(queries: tuple[Query, ...], *, as_table: bool = False) -> list[Dataquery]:
    targets = []
    for index, query in enumerate(queries):
        target = Dataquery().expr(query.expr).ref_id(chr(ord("A") + index))
        if query.legend:
            target = target.legend_format(query.legend)
        if query.instant:
            target = target.instant()
        if as_table:
            target = target.format(PromQueryFormat.TABLE)
        targets.append(target)
    return targets


def time_series(
    ids: PanelIds,
    *,
    title: str,
    description: str,
    queries: tuple[Query, ...],
    unit: str = "short",
    span: int = 12,
    height: int = 8,
    ratio: bool = False,
    bars: bool = False,
    right: tuple[Query, ...] = (),
    right_unit: str = "short",
) -> timeseries.Panel:
    """A time series panel; `ratio` pins the axis to 0–100 %, `bars` draws counts per interval. `right` queries
    are drawn against a second axis on the right in `right_unit` (two quantities of one subject in one panel)."""
    panel = (
        timeseries.Panel()
        .id(ids.next())
        .title(title)
        .description(description)
        .datasource(DATASOURCE)
        .unit("percentunit" if ratio else unit)
        .span(span)
        .height(height)
        .targets(_targets(queries + right))
        .legend(
            VizLegendOptions()
            .show_legend(True)
            .display_mode(LegendDisplayMode.TABLE)
            .placement(LegendPlacement.BOTTOM)
            .calcs(["lastNotNull", "max"])
        )
    )
    if ratio:
        panel = panel.min(0).max(1)
    if bars:
        panel = panel.draw_style(GraphDrawStyle.BARS).fill_opacity(80)
    for index in range(len(queries), len(queries) + len(right)):  # the right queries' refIds follow the left ones
        panel = panel.with_override(
            MatcherConfig(id_val="byFrameRefID", options=chr(ord("A") + index)),
            [DynamicConfigValue(id_val="unit", value=right_unit),
             DynamicConfigValue(id_val="custom.axisPlacement", value="right")],
        )
    return panel


def single_stat(
    ids: PanelIds,
    *,
    title: str,
    description: str,
    query: Query,
    red_at: float | None = None,
    unit: str = "short",
    span: int = 4,
) -> stat.Panel:
    """A big number; turns red at `red_at` and above (None: never)."""
    steps = [Threshold(value=None, color="green")]
    if red_at is not None:
        steps.append(Threshold(value=red_at, color="red"))
    return (
        stat.Panel()
        .id(ids.next())
        .title(title)
        .description(description)
        .datasource(DATASOURCE)
        .unit(unit)
        .span(span)
        .height(4)
        .targets(_targets((Query(query.expr, query.legend, instant=True),)))
        .thresholds(ThresholdsConfig().mode(ThresholdsMode.ABSOLUTE).steps(steps))
        .reduce_options(ReduceDataOptions().calcs(["lastNotNull"]).values(False))
        .color_mode(BigValueColorMode.BACKGROUND)
        .graph_mode(BigValueGraphMode.NONE)
    )


def label_table(
    ids: PanelIds,
    *,
    title: str,
    description: str,
    query: Query,
    unit: str = "short",
    span: int = 12,
    height: int = 8,
) -> table.Panel:
    """An instant query shown as one row per series, its labels as columns (Time and __name__ hidden)."""
    hide = DataTransformerConfig(id_val="organize", options={"excludeByName": {"Time": True, "__name__": True}})
    return (
        table.Panel()
        .id(ids.next())
        .title(title)
        .description(description)
        .datasource(DATASOURCE)
        .unit(unit)
        .span(span)
        .height(height)
        .targets(_targets((Query(query.expr, query.legend, instant=True),), as_table=True))
        .with_transformation(hide)
    )
