"""The typed results of ``traceconv ranks``: one row per rank, one per collective, the stragglers.

A *rank* is one process's GPU: the GPU rows of one device in one trace (PyTorch: one trace per
rank) or of one process and device in an Nsight Systems export. Its ``rank`` is Kineto's
``distributedInfo.rank`` (the ``rank`` column), null when the trace does not say; ``label`` names
it in tables and in the JSON's maps (the rank number, else ``trace_id:pid``).
"""

from __future__ import annotations

import dataclasses

from traceconv.analyses.finding import Finding


@dataclasses.dataclass(frozen=True)
class Breakdown:
    """A GPU's time over one scope: unions of its compute kernels, communication kernels and copies."""

    window_ns: int  # the scope's length
    compute_ns: int  # union of the kernels that are not communication
    comm_ns: int  # union of the NCCL/RCCL (collective) kernels
    copy_ns: int  # union of memcpy and memset
    idle_ns: int  # nothing of the three runs
    overlap_ns: int  # communication while a compute kernel runs on the same GPU
    overlap_pct: float | None  # overlap_ns as a share of comm_ns; null without communication
    exposed_comm_ns: int  # communication with no compute beside it: comm_ns - overlap_ns


@dataclasses.dataclass(frozen=True)
class RankRow:
    """One rank: who it is, its window, its steps, its GPU time over the window (and over the steps)."""

    rank: int | None
    label: str
    trace_id: str
    pid: int | None  # the process (PyTorch: of the CUDA calls; nsys: of the GPU rows)
    device: int | None
    start_ns: int  # first GPU activity of the device
    end_ns: int  # last GPU activity of the device
    window_ns: int
    compute_ns: int
    comm_ns: int
    copy_ns: int
    idle_ns: int
    overlap_ns: int
    overlap_pct: float | None
    exposed_comm_ns: int
    steps: int
    step_ns: int | None  # the median step (warm-up left out), null without steps
    in_steps: Breakdown | None  # the same figures clipped to the steps
    collectives: int  # communication kernels
    matched: int  # of them, matched with every other rank of their group in the input
    wait_ns: int  # time spent in matched collectives before the last rank arrived
    last_arrivals: int  # matched collectives this rank arrived at last
    clock_offset_ns: int | None  # added to this rank's times to put them on the reference's clock


@dataclasses.dataclass(frozen=True)
class Collective:
    """One collective instance matched across the ranks of its process group."""

    collective: str
    process_group: str
    seq: int  # position in the group's sequence (the reference rank's numbering)
    ranks: list[str]
    dtype: str | None
    in_nelems: int | None
    out_nelems: int | None
    bytes: int | None  # NCCL-tests' S: the larger of input and output, in bytes
    group_size: int
    algorithm: str | None  # from the kernel name: RING_LL, TREE_SIMPLE ...
    start_ns: dict[str, int]  # per rank, on the reference clock
    dur_ns: dict[str, int]
    skew_ns: int  # latest minus earliest start
    last_rank: str
    time_ns: int  # the last arriver's kernel: the collective once everyone is there
    algbw_gbps: float | None
    busbw_gbps: float | None


@dataclasses.dataclass(frozen=True)
class Straggler:
    """A rank that slows the others, by the STRAGGLER threshold (:mod:`.verdicts`)."""

    label: str
    rank: int | None
    basis: str  # "compute per step", "compute" (over the window), or "arrival"
    time_ns: int  # its compute (per step); "arrival": each other rank's wait for it, per step
    median_ns: int  # the ranks' median compute; "arrival": the median step (window)
    over_pct: float  # over the median, in %; "arrival": time_ns as a share of median_ns
    last_arrivals: int
    matched: int
    others_wait_ns: int  # what the other ranks waited in the collectives it arrived last at


@dataclasses.dataclass(frozen=True)
class RanksReport:
    """What ``traceconv ranks`` shows and writes as JSON (``results.plain``)."""

    source: str
    ranks: list[RankRow]
    collectives: list[Collective]
    unmatched: int  # communication kernels not matched on every rank of their group
    reference: str | None  # the rank whose clock the offsets refer to
    clock_offsets_ns: dict[str, int | None]
    stragglers: list[Straggler]
    findings: list[Finding]
    notes: list[str]
