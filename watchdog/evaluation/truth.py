"""The ground truth a labelled scenario carries: what detection should find, when, and whom enforce should evict.

Labels are written by the scenario's author from what the scenario *does* (which pod ramps up when), never from
what the detector happens to report; this module only gives them a validated shape so that a typo in a label
(`cuplrit:`) is an error naming the field instead of a silently missed finding. docs/evaluation.md documents it.
"""

from __future__ import annotations

from typing import Any, Mapping

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

POD_KEY_PATTERN = r"^[^/\s]+/[^/\s]+$"


class _Label(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Window(_Label):
    onset: int = Field(..., ge=0, description="Tick the situation starts (the cause begins to bite).")
    offset: int | None = Field(None, ge=0, description="Tick it ends; None = until the scenario ends.")

    @model_validator(mode="after")
    def _ordered(self) -> Window:
        if self.offset is not None and self.offset < self.onset:
            raise ValueError(f"offset ({self.offset}) is before onset ({self.onset})")
        return self


class InterferenceTruth(Window):
    victim: str | None = Field(None, pattern=POD_KEY_PATTERN, description="The hurt pod 'ns/name' …")
    victims: tuple[str, ...] = Field((), description="… or several; a finding must name at least one of them.")
    culprit: str = Field(..., pattern=POD_KEY_PATTERN, description="The antagonist 'ns/name'.")
    report_only: bool = Field(False, description="Expected as a report-only WARNING (a gi or pcie domain judged "
                              "by a proxy, without the tenant's override): tick recall counts its observed ticks.")

    @property
    def all_victims(self) -> frozenset[str]:
        return frozenset(self.victims) | ({self.victim} if self.victim else set())

    @model_validator(mode="after")
    def _has_victim(self) -> InterferenceTruth:
        if not self.all_victims:
            raise ValueError("give `victim` or `victims`")
        return self


class CulpritUnknownTruth(Window):
    """A victim degraded where no neighbour's use can be read (an A100 MIG without borrowed activity): the
    report-only finding kind ``interference_culprit_unknown``, which names victims and never a culprit."""

    victim: str | None = Field(None, pattern=POD_KEY_PATTERN, description="The hurt pod 'ns/name' …")
    victims: tuple[str, ...] = Field((), description="… or several; a finding must name at least one of them.")

    @property
    def all_victims(self) -> frozenset[str]:
        return frozenset(self.victims) | ({self.victim} if self.victim else set())

    @model_validator(mode="after")
    def _has_victim(self) -> CulpritUnknownTruth:
        if not self.all_victims:
            raise ValueError("give `victim` or `victims`")
        return self


class MemoryPressureTruth(Window):
    culprit: str | None = Field(None, pattern=POD_KEY_PATTERN, description="The growing pod; None = any culprit.")
    victims: tuple[str, ...] = Field((), description="Pods sharing the device; if given, a finding must name one.")
    gpu: int | None = Field(None, ge=0, description="GPU index of the device, for the reader (not matched).")
    instance: int | None = Field(None, ge=0, description="GPU instance id of the device, for the reader.")


class QuotaTruth(Window):
    tenant: str = Field(..., min_length=1, description="The tenant over its limit.")


class UnauthorizedTruth(Window):
    pod: str = Field(..., pattern=POD_KEY_PATTERN, description="The pod using a device it was not given.")


class UnauthorizedHostTruth(Window):
    """A process in no pod on a device given to pods (scenario ``host_processes``): the report-only finding kind
    ``unauthorized_host``, matched by the process's command and, when listed, the pods the device was given to."""

    command: str = Field(..., min_length=1, max_length=15, description="The process's /proc/<pid>/comm.")
    victims: tuple[str, ...] = Field((), description="Pods the device was given to ('ns/name'); any one matches.")


class MemoryWarningTruth(Window):
    """A MIG instance filled past ``quota.memory_warning_ratio``: the report-only WARNING the quota detector raises
    (finding kind ``mig_memory_warning``, key ``mig-memory/<uuid>``). It is about one instance's fill, not a
    tenant's quota, so it is labelled and scored apart from ``quota``."""

    pod: str = Field(..., pattern=POD_KEY_PATTERN, description="The pod holding most memory on the full instance.")
    gpu: int | None = Field(None, ge=0, description="GPU index of the instance, for the reader (not matched).")
    instance: int | None = Field(None, ge=0, description="Index into the GPU's `mig` list, for the reader.")


class MpsMemoryLimitTruth(Window):
    """An MPS client near its pinned device-memory limit (the device plugin's memory / replicas): the report-only
    finding kind ``mps_memory_limit`` (detection/mps_memory.py), matched by the client pod."""

    pod: str = Field(..., pattern=POD_KEY_PATTERN, description="The client near its limit ('ns/name').")
    gpu: int | None = Field(None, ge=0, description="GPU index, for the reader (not matched).")


class QuietWindow(Window):
    """Ticks in which no eviction request may be sent, e.g. while the data that would justify one is missing."""

    reason: str = Field("", description="Why nothing may be sent then, for the reader.")


class XidTruth(_Label):
    at: int = Field(..., ge=0, description="Tick the Xid is raised.")
    gpu: int = Field(..., ge=0, description="GPU index.")
    instance: int | None = Field(
        None, ge=0, description="Index into the GPU's `mig` list (as in the scenario's xids), None for a whole GPU."
    )
    xid: int = Field(..., gt=0, description="The Xid number.")
    pods: tuple[str, ...] = Field((), description="Pods on the faulted domain (for the reader; not matched).")

    @property
    def onset(self) -> int:
        return self.at

    @property
    def offset(self) -> int:
        return self.at


class Truth(_Label):
    interference: tuple[InterferenceTruth, ...] = ()
    memory_pressure: tuple[MemoryPressureTruth, ...] = ()
    quota: tuple[QuotaTruth, ...] = ()
    unauthorized: tuple[UnauthorizedTruth, ...] = ()
    xid: tuple[XidTruth, ...] = ()
    memory_warning: tuple[MemoryWarningTruth, ...] = ()
    culprit_unknown: tuple[CulpritUnknownTruth, ...] = ()
    unauthorized_host: tuple[UnauthorizedHostTruth, ...] = ()
    mps_memory_limit: tuple[MpsMemoryLimitTruth, ...] = ()
    slack_ticks: int = Field(10, ge=0, description="A finding may still overlap this many ticks after an offset.")
    expect_evictions: tuple[str, ...] | None = Field(
        None, description="Exactly the pods enforce mode must evict ('ns/name'); None = not checked."
    )
    no_evictions: tuple[QuietWindow, ...] = Field(
        (), description="Windows in which no eviction request may be sent (checked like expect_evictions)."
    )

    @field_validator("expect_evictions")
    @classmethod
    def _pod_keys(cls, value: tuple[str, ...] | None) -> tuple[str, ...] | None:
        for key in value or ():
            if "/" not in key:
                raise ValueError(f"{key!r} is not 'namespace/name'")
        return value

    def entries(self, kind: str) -> tuple[Any, ...]:
        return getattr(self, kind)


class TruthError(ValueError):
    """A scenario's `truth` that does not validate; the message names each invalid field."""


def parse_truth(data: Mapping[str, Any] | None, *, source: str) -> Truth:
    try:
        return Truth.model_validate(dict(data or {}))
    except ValidationError as exc:
        lines = [f"truth.{'.'.join(str(p) for p in err['loc'])}: {err['msg']}" for err in exc.errors()]
        raise TruthError(f"{source}: " + "; ".join(lines)) from None
