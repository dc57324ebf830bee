"""What the analyses test names against: the kinds of GPU work, and the distinct kinds and names of
an input, read once per Source (:func:`kind_counts`, :func:`gpu_names`), with the rules tested on
those few names rather than on every row: communication kernels, CUDA graph launches."""

from __future__ import annotations

import re
from collections.abc import Callable

from traceconv.analyses.source import Source, one_of

GPU_KINDS = ("kernel", "memcpy", "memset")
# GPU work: the GPU rows, and CUDA graphs that Nsight Systems traced whole (one row an execution).
GPU_WORK_KINDS = (*GPU_KINDS, "graph")
GPU_WORK = f"kind IN {GPU_WORK_KINDS}"
GPU_NAMES = "gpu_names"  # what the Source keeps :func:`gpu_names` as (``prepare`` fills it in its own read)
GRAPH_LAUNCH = re.compile(r"^(cuda|hip|cu)Graph(Launch|Replay)")


def kind_counts(source: Source) -> dict[str | None, int]:
    """The rows of each kind, read once per Source."""

    def read() -> dict[str | None, int]:
        rows = source.arrow("SELECT CAST(kind AS VARCHAR) AS kind, count(*) AS n FROM events GROUP BY kind").to_pylist()
        return {r["kind"]: int(r["n"]) for r in rows}

    got: dict[str | None, int] = source.kept("kind_counts", read)
    return got


def gpu_names(source: Source) -> list[tuple[str, str | None, str | None]]:
    """Each distinct (kind, name, launch call's name) of the GPU work, read once per Source: what the
    analyses test names against (communication kernels, graph launches, Triton kernels)."""

    def read() -> list[tuple[str, str | None, str | None]]:
        launch = "launch_name" if source.has("launch_name") else "NULL"
        rows = source.arrow(
            f"SELECT DISTINCT CAST(kind AS VARCHAR) AS kind, CAST(name AS VARCHAR) AS name, CAST({launch} AS VARCHAR) "
            f"AS launch FROM events WHERE {GPU_WORK}"
        ).to_pylist()
        return [(str(r["kind"]), r["name"], r["launch"]) for r in rows]

    got: list[tuple[str, str | None, str | None]] = source.kept(GPU_NAMES, read)
    return got


def launch_names(source: Source, test: Callable[[str], bool]) -> list[str]:
    """The launch calls' names of the GPU work that pass ``test``."""
    return sorted({n for _, _, n in gpu_names(source) if n is not None and test(n)})


COMM_KERNELS = ("nccl", "rccl")  # what the name of a communication kernel holds (in any case)


def comm_kernels(source: Source) -> list[str]:
    """The names of the GPU work that communicates (NCCL's and RCCL's kernels), among the few distinct
    names: tested once per name, not on every row."""
    return sorted(
        {
            n
            for k, n, _ in gpu_names(source)
            if k not in ("memcpy", "memset") and n and any(c in n.lower() for c in COMM_KERNELS)
        }
    )


def graph_launched(source: Source, column: str = "launch_name") -> str:
    """SQL: whether a GPU row was launched by a call that launches a graph, a call named
    ``^(cuda|hip|cu)Graph(Launch|Replay)`` (``column``: the call's name; null where it has none;
    ``false`` where no call does)."""
    return one_of(column, launch_names(source, lambda n: bool(GRAPH_LAUNCH.match(n))))


def graph_replayed(source: Source, column: str = "launch_name") -> str:
    """SQL: :func:`graph_launched`, false (not null) where the row has no launch call."""
    return f"coalesce({graph_launched(source, column)}, false)"
