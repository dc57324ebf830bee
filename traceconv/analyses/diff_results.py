"""The results of ``traceconv diff``: what changed between two runs, per step."""

from __future__ import annotations

import dataclasses

from traceconv.analyses.results import op_label


@dataclasses.dataclass(frozen=True)
class CopyTotals:
    count: float
    bytes: int
    dur_ns: int


@dataclasses.dataclass(frozen=True)
class OpShare:
    """An operator's syncs per step."""

    name: str
    region: str | None
    count: float
    dur_ns: int

    @property
    def label(self) -> str:
        return op_label(self.name, self.region)


@dataclasses.dataclass(frozen=True)
class SyncShare:
    count: float
    dur_ns: int
    ops: list[OpShare]


@dataclasses.dataclass(frozen=True)
class SyncShares(SyncShare):
    result_waits: SyncShare
    staging: SyncShare


@dataclasses.dataclass(frozen=True)
class DeviceChange:
    busy_ns: int
    idle_ns: int
    window_ns: int
    status: str  # "appeared", "disappeared" or "kept"


@dataclasses.dataclass(frozen=True)
class CopyChange:
    count: float
    bytes: int
    dur_ns: int
    status: str


@dataclasses.dataclass(frozen=True)
class OpChange:
    name: str
    region: str | None
    status: str
    count: float
    dur_ns: int
    before: float
    after: float

    @property
    def label(self) -> str:
        return op_label(self.name, self.region)


@dataclasses.dataclass(frozen=True)
class SyncChange:
    count: float
    dur_ns: int
    ops: list[OpChange]


@dataclasses.dataclass(frozen=True)
class SyncChanges(SyncChange):
    result_waits: SyncChange
    staging: SyncChange


@dataclasses.dataclass(frozen=True)
class KeptFinding:
    code: str
    before: float
    after: float
    severity: list[str]  # before, after


@dataclasses.dataclass(frozen=True)
class FindingChanges:
    gone: list[str]
    new: list[str]
    kept: list[KeptFinding]
