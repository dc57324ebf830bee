"""Each kernel with its engine and its share of its operator's work, read once from the events.

A kernel's operator is the innermost one around its launch (``op_event_id``: a CPU operator, or under
Nsight Systems the NVTX range of ``--pytorch=autograd-shapes-nvtx``; a CUDA graph replay's kernel, the
operator that captured it where the capture is in the profile). The operator's work
(:func:`.flops.work`) is shared among its matrix kernels by their time (the split-K reductions,
epilogues and transposes beside a GEMM get none); an operator with no matrix kernel shares it among all
of its kernels; each replay of a graph does a captured operator's work again (its kernels of one
replay share it). Its least traffic is shared the same way, in bytes of its inputs' type (where the trace
does not record the type, that of its kernels' names; else 4 bytes).
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from traceconv.analyses import intervals as I
from traceconv.analyses.prepare import op_label
from traceconv.analyses.roofline import flops as F
from traceconv.analyses.roofline import tensor_cores as T
from traceconv.analyses.source import Source, literals
from traceconv.analyses.vocabulary import graph_launched

# The ids Kineto writes into each call's arguments: zeroed in the read, so that the calls of one shape
# share one text and are parsed once (:func:`~traceconv.analyses.roofline.flops.work`).
_PER_CALL = "|".join(f'"{k}"' for k in ("External id", "Record function id", "Ev Idx", "Sequence number"))


def read(source: Source) -> pd.DataFrame:
    """The kernels (name, duration, device, trace, anchor: the launch's start, else its own; linked: whether
    the trace holds the launch) with their operator's name and, for the operators whose work can be
    counted, its arguments."""
    families = literals(F.FAMILY_PREFIXES)
    same = f"regexp_replace(args, '({_PER_CALL}): *-?[0-9]+', '\\1: 0', 'g')"
    args = f"CASE WHEN split_part(name, ',', 1) IN ({families}) THEN {same} END" if source.has("args") else "NULL"
    dur = "k.dur_ns" if source.has("dur_ns") else "k.end_ns - k.start_ns"  # key_averages' tables lack some
    launched = source.has("launch_start_ns")
    anchor = "coalesce(k.launch_start_ns, k.start_ns)" if launched else "k.start_ns"
    linked = "k.launch_start_ns IS NOT NULL" if launched else "FALSE"
    replay = "NULL::BIGINT"
    if source.has("launch_name"):
        replay = f"CASE WHEN {graph_launched(source, 'k.launch_name')} THEN k.launch_event_id END"
    # Kernel names by code (a few thousand distinct names, millions of kernels): the names once, not
    # a string per kernel (470 MB of them for the 16x bench export's 2M kernels)
    source.table(
        "roof_names",
        "SELECT name, CAST(row_number() OVER () - 1 AS INTEGER) AS code "
        "FROM (SELECT DISTINCT name FROM events WHERE kind = 'kernel' AND name IS NOT NULL)",
    )
    names = source.arrow("SELECT CAST(name AS VARCHAR) AS name FROM roof_names ORDER BY code")["name"]
    table = source.arrow(
        f"SELECT n.code AS name, {dur} AS dur_ns, CAST(k.device AS BIGINT) AS device, "
        f"coalesce(k.trace_id, '') AS trace_id, {anchor} AS anchor_ns, {linked} AS linked, k.start_ns, "
        f"k.op_event_id, {replay} AS replay, CAST(o.name AS VARCHAR) AS op, o.args FROM events k "
        "JOIN roof_names n ON n.name = k.name "
        # the arguments only of the operators whose work is counted, before the join: the join's table of
        # every operator's arguments took longer than the rest of the query
        f"LEFT JOIN (SELECT trace_id, event_id, name, {args} AS args FROM events WHERE kind IN ('cpu_op', 'nvtx')) o "
        "ON coalesce(o.trace_id, '') = coalesce(k.trace_id, '') AND o.event_id = k.op_event_id "
        f"WHERE k.kind = 'kernel' AND {dur} IS NOT NULL"
    )
    source.run("DROP TABLE roof_names")
    table = table.set_column(
        0, "name", pa.DictionaryArray.from_arrays(table["name"].combine_chunks(), names.combine_chunks())
    )
    for column in ("trace_id", "op", "args"):
        i = table.schema.get_field_index(column)
        table = table.set_column(i, column, pc.dictionary_encode(table[column]))
    frame: pd.DataFrame = table.to_pandas()
    return frame


def has_work(source: Source) -> bool:
    """Whether any operator or range is one whose work can be counted (:data:`.flops.FAMILY_PREFIXES`)."""
    families = literals(F.FAMILY_PREFIXES)
    return bool(
        source.scalar(
            "SELECT count(*) FROM (SELECT 1 FROM events WHERE kind IN ('cpu_op', 'nvtx') "
            f"AND split_part(CAST(name AS VARCHAR), ',', 1) IN ({families}) LIMIT 1)"
        )
    )


def read_grouped(source: Source, bounds: tuple[np.ndarray, np.ndarray] | None = None) -> pd.DataFrame:
    """:func:`read`'s kernels where no operator's work can be counted, so that no window has any FLOPs of
    its own: a row per kernel name, GPU, trace, linked-or-not and inside-or-outside the windows
    (``bounds``: their sorted, disjoint host starts and ends; a kernel is inside where its anchor falls in
    one; None: all inside), ``calls`` of them (``anchor_ns`` and ``start_ns`` the first, ``last_anchor_ns``
    and ``end_ns`` the last), with no operator. The 16x bench export's 2M kernels in 6,399 steps are 114 rows
    (a row per step as well would be 339,204, and grouping them 6 of the summary's 17 s)."""
    dur = "k.dur_ns" if source.has("dur_ns") else "k.end_ns - k.start_ns"
    launched = source.has("launch_start_ns")
    anchor = "coalesce(k.launch_start_ns, k.start_ns)" if launched else "k.start_ns"
    linked = "k.launch_start_ns IS NOT NULL" if launched else "FALSE"
    join, window = "", "TRUE"
    if bounds is not None:
        # a hash join on time buckets: an ASOF join sorted every kernel by its anchor
        within = source.within("roof_windows", *I.union(*bounds))
        join, window = within.join("a"), f"coalesce({within.test('a')}, FALSE)"
    table = source.arrow(
        "SELECT name, sum(dur) AS dur_ns, count(*) AS calls, device, trace_id, min(a) AS anchor_ns, "
        f"max(a) AS last_anchor_ns, linked, {window} AS inside, min(start_ns) AS start_ns, "
        "max(start_ns + dur) AS end_ns, NULL::DOUBLE AS op_event_id, NULL::BIGINT AS replay, "
        "NULL::VARCHAR AS op, NULL::VARCHAR AS args "
        f"FROM (SELECT CAST(k.name AS VARCHAR) AS name, {dur} AS dur, CAST(k.device AS BIGINT) AS device, "
        f"coalesce(k.trace_id, '') AS trace_id, {anchor} AS a, {linked} AS linked, k.start_ns FROM events k "
        f"WHERE k.kind = 'kernel' AND k.name IS NOT NULL AND {dur} IS NOT NULL) {join} GROUP BY ALL"
    )
    if bounds is not None:
        source.run("DROP MACRO IF EXISTS roof_windows; DROP TABLE IF EXISTS roof_windows")
    for column in ("name", "trace_id"):
        i = table.schema.get_field_index(column)
        table = table.set_column(i, column, pc.dictionary_encode(table[column]))
    frame: pd.DataFrame = table.to_pandas().drop(columns="inside")
    return frame


def kernels(frame: pd.DataFrame, tensor_active: Mapping[str, float] | None = None) -> pd.DataFrame:
    """:func:`read`'s kernels with their engine (by name; by Tensor Active where the name does not tell),
    their share of their operator's FLOPs and bytes, and the operator's input type; ``op_key`` numbers
    the operator calls (-1: none), ``op`` is the operator's grouped name."""
    names = frame["name"].astype("category")
    engines = [T.by_metric(T.classify(n), (tensor_active or {}).get(n)) for n in names.cat.categories]
    codes = names.cat.codes.to_numpy()
    out = pd.DataFrame(
        {
            "name": names,
            "dur_ns": frame["dur_ns"].fillna(0).astype("int64").to_numpy(),
            "device": frame["device"].fillna(-1).astype("int64").to_numpy(),
            "trace_id": frame["trace_id"].astype("category"),
            "anchor_ns": frame["anchor_ns"].fillna(0).astype("int64").to_numpy(),
            "linked": frame["linked"].fillna(False).astype(bool).to_numpy(),
            "start_ns": frame["start_ns"].fillna(0).astype("int64").to_numpy(),
        }
    )
    for grouped in ("calls", "end_ns", "last_anchor_ns"):  # read_grouped's rows stand for several kernels
        if grouped in frame.columns:
            out[grouped] = frame[grouped].astype("int64").to_numpy()
    keyed = frame["op_event_id"].notna() & frame["op"].notna()
    key = np.full(len(frame), -1, np.int64)
    calls = frame.loc[keyed, ["trace_id", "op_event_id", "replay"]]
    calls["replay"] = calls["replay"].fillna(-1)  # an operator call, again in each replay of its graph
    key[keyed.to_numpy()] = calls.groupby(["trace_id", "op_event_id", "replay"], sort=False, observed=True).ngroup()
    out["op_key"] = key
    ops = frame["op"].astype("category")
    labels = np.array([op_label(str(c)) for c in ops.cat.categories] + [None], dtype=object)
    out["op"] = pd.Categorical(labels[ops.cat.codes.to_numpy()])  # nsys: many ranges' texts, one operator
    for col in ("rule", "engine"):  # per name, as categories (a code a kernel, not an object)
        out[col] = _per_name([getattr(e, col) for e in engines], codes)
    out["dtype"] = np.array([e.dtype for e in engines] + [None], dtype=object)[codes]
    out["matrix"] = np.array([bool(e.matrix) for e in engines] + [False], dtype=bool)[codes]
    return _with_work(out, frame)


def _with_work(out: pd.DataFrame, frame: pd.DataFrame) -> pd.DataFrame:
    """The operators' work shared out to their kernels (see the module)."""
    key = out["op_key"].to_numpy()
    ops = int(key.max()) + 1 if len(key) else 0
    flops, elements = np.zeros(ops + 1, np.float64), np.zeros(ops + 1, np.float64)  # the last: no operator
    dtypes: list[str | None] = [None] * (ops + 1)
    sizes = np.zeros(ops + 1, np.float64)  # bytes an element of the inputs' type (0: not known)
    has = key >= 0
    first = pd.Series(np.arange(len(key)))[has].groupby(key[has]).first()
    texts, args = frame["op"].astype("category"), frame["args"].to_numpy()
    # the calls of the operators whose work is counted, by their text's code
    counted = np.array([F.counted(str(t)) for t in texts.cat.categories] + [False], dtype=bool)
    rows = first.to_numpy()
    kept = counted[texts.cat.codes.to_numpy()[rows]]
    names = texts.to_numpy()
    seen: dict[object, F.Work | None] = {}
    for k, row in zip(first.index.to_numpy()[kept], rows[kept], strict=True):
        found = F.work(str(names[row]), _text(args[row]), seen)
        if found is not None:
            flops[k], elements[k], dtypes[k] = found.flops, found.elements, found.dtype
            sizes[k] = F.SIZES.get(found.dtype or "", 0)
    at = np.where(has, key, ops)
    dur = out["dur_ns"].to_numpy().astype(np.float64)
    matrix = out["matrix"].to_numpy()
    by_matrix = np.bincount(at, weights=np.where(matrix, dur, 0.0), minlength=ops + 1)
    by_all = np.bincount(at, weights=dur, minlength=ops + 1)
    # a matrix kernel's share of its operator's matrix time; without any, every kernel's of all its time
    own = np.where(by_matrix[at] > 0, np.where(matrix, by_matrix[at], 0.0), by_all[at])
    share = np.where(has & (own > 0), dur / np.where(own > 0, own, 1.0), 0.0)
    op_dtype = np.array(dtypes, dtype=object)[at]
    op_size = sizes[at]
    kernel_size = pd.Series(out["dtype"]).map(F.SIZES).fillna(4).to_numpy(dtype=np.float64)
    size = np.where(op_size > 0, op_size, kernel_size)  # the inputs' type, else the kernel's, else 4 bytes
    out["flops"] = flops[at] * share
    out["moved"] = elements[at] * share * size
    out["op_dtype"] = op_dtype
    out["known"] = flops[at] > 0
    return out


def _per_name(values: list[str | None], codes: np.ndarray) -> pd.Categorical:
    """A value per kernel name, spread to the kernels by their name's code (-1: none)."""
    per = pd.Categorical([*values, None])
    return pd.Categorical.from_codes(per.codes[codes], categories=per.categories)


def _text(value: object) -> str | None:
    return value if isinstance(value, str) else None
