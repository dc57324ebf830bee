"""The GPU a profile ran on, as the profile describes it, and the peaks the roofline holds it to.

PyTorch traces describe each GPU in Kineto's ``deviceProperties`` (``id``: the kernels' ``device``;
``name``, ``numSms``, ``computeMajor``/``computeMinor``, ``totalGlobalMem``); Nsight Systems exports in
``TARGET_INFO_GPU`` (``id``, ``name``, ``smCount``, ``computeMajor``/``computeMinor``, ``totalMemory``,
``memoryBandwidth``, ``cuDevice``), which the reader keeps as ``gpus``, with ``TARGET_INFO_CUDA_DEVICE``
(``cuda_devices``: which GPU each process' CUDA device id is; without it, ``cuDevice``). Where a
trace's GPUs differ, the one that ran the most kernel time is the roofline's. Its peaks are the table's row for its name
(:mod:`.peaks`), with ``--peak`` figures in place; a GPU the table does not know has none but those
given, and a note that says how to give them.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from traceconv.analyses.roofline import peaks as P


@dataclass(frozen=True)
class Gpu:
    """One GPU as a profile describes it."""

    cuda_id: int | None  # the kernels' ``device``
    name: str | None
    sms: int | None
    compute_capability: str | None  # "9.0"
    memory_bytes: int | None
    bandwidth_gbps: float | None = None  # Nsight Systems' own figure (TARGET_INFO_GPU memoryBandwidth)


@dataclass(frozen=True)
class Device:
    """The GPU the roofline measures against: the profile's description and the peaks used."""

    name: str | None  # as the profile names it
    model: str | None  # the row of the table of peaks ("H100 SXM"); None: not in it
    sms: int | None
    compute_capability: str | None
    memory_bytes: int | None
    peaks: P.Peaks | None  # None: unknown (not in the table, no --peak)
    source: str | None  # where the peaks come from: the vendor's document, and/or --peak
    overridden: list[str]  # the figures --peak set
    note: str | None = None


def gpus(metadata: Sequence[Mapping[str, Any]]) -> list[Gpu]:
    """Every GPU the inputs' metadata describes (Kineto's ``deviceProperties``, Nsight Systems' ``gpus``)."""
    out: list[Gpu] = []
    for meta in metadata:
        for props in _dicts(meta.get("deviceProperties")):
            out.append(_gpu(props, props.get("id"), "numSms", "totalGlobalMem"))
        to_cuda = {row.get("gpuId"): row.get("cudaId") for row in _dicts(meta.get("cuda_devices"))}
        for row in _dicts(meta.get("gpus")):
            gpu_id = row.get("id", row.get("deviceId"))
            cuda = to_cuda.get(gpu_id, row.get("cuDevice", gpu_id))  # the process' CUDA id, else the system's
            found = _gpu(row, cuda, "smCount", "totalMemory", "numMultiprocessors")
            bandwidth = _whole(row.get("memoryBandwidth"))
            out.append(Gpu(**{**found.__dict__, "bandwidth_gbps": bandwidth / 1e9 if bandwidth else None}))
    return out


def _dicts(value: Any) -> list[dict[str, Any]]:
    return [v for v in value if isinstance(v, dict)] if isinstance(value, list) else []


def _whole(value: Any) -> int | None:
    return int(value) if isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0 else None


def _gpu(row: Mapping[str, Any], cuda_id: Any, sms: str, memory: str, old_sms: str = "") -> Gpu:
    major = row.get("computeMajor", row.get("computeCapabilityMajor"))
    minor = row.get("computeMinor", row.get("computeCapabilityMinor"))
    name = row.get("name")
    return Gpu(
        cuda_id=cuda_id if isinstance(cuda_id, int) and not isinstance(cuda_id, bool) and cuda_id >= 0 else None,
        name=name if isinstance(name, str) else None,
        sms=_whole(row.get(sms, row.get(old_sms))),
        compute_capability=f"{major}.{minor}" if isinstance(major, int) and isinstance(minor, int) else None,
        memory_bytes=_whole(row.get(memory)),
    )


def pick(found: Sequence[Gpu], kernel_ns: Mapping[int, int]) -> Gpu | None:
    """The GPU that ran the most kernel time (``kernel_ns``: per CUDA device id); the first one described
    where the kernels' devices name none of them. Inputs of several traces may describe one CUDA id as
    different GPUs: the description most of them give is the one taken, whatever their order."""
    if not found:
        return None
    by_id: dict[int, list[Gpu]] = {}
    for g in found:
        if g.cuda_id is not None:
            by_id.setdefault(g.cuda_id, []).append(g)
    busiest = sorted(((ns, d) for d, ns in kernel_ns.items() if d in by_id), reverse=True)
    if not busiest:
        return found[0]
    described = by_id[busiest[0][1]]
    votes = Counter(described)
    return max(votes, key=lambda g: (votes[g], str(g.name), g.sms or 0, g.memory_bytes or 0))


def device(
    metadata: Sequence[Mapping[str, Any]], kernel_ns: Mapping[int, int], overrides: Mapping[str, float | str]
) -> Device:
    """The roofline's GPU and its peaks (see the module); ``overrides``: :func:`.peaks.parse`'s."""
    gpu = pick(gpus(metadata), kernel_ns)
    model = P.BY_KEY[str(overrides["gpu"]).lower()] if "gpu" in overrides else None
    if model is None and gpu is not None:
        model = P.match(gpu.name, gpu.memory_bytes, gpu.sms)
    figures = {k: float(v) for k, v in overrides.items() if k in P.FIELDS}
    peaks = P.overridden(model.peaks if model else None, figures)
    source = "; ".join(
        s for s in (model.source if model else "", "--peak " + ", ".join(figures) if figures else "") if s
    )
    return Device(
        name=gpu.name if gpu else None,
        model=model.key if model else None,
        sms=gpu.sms if gpu else None,
        compute_capability=gpu.compute_capability if gpu else None,
        memory_bytes=gpu.memory_bytes if gpu else None,
        peaks=peaks,
        source=source or None,
        overridden=sorted(figures),
        note=_note(gpu, model, peaks),
    )


def _note(gpu: Gpu | None, model: P.Model | None, peaks: P.Peaks | None) -> str | None:
    if model is not None and peaks is not None:
        return model.note or None
    what = f"{gpu.name!r}" if gpu and gpu.name else "the GPU (the profile does not name it)"
    measured = (
        f" (the profile measured {gpu.bandwidth_gbps:,.0f} GB/s of memory bandwidth)"
        if gpu and gpu.bandwidth_gbps
        else ""
    )
    if peaks is not None:
        return f"{what} is not in traceconv's table of peaks: the figures given with --peak are used{measured}"
    return (
        f"{what} is not in traceconv's table of peaks, so achieved FLOP/s are not set against a peak{measured}: "
        "give its dense datasheet figures, e.g. --peak bf16=989.5 --peak fp32=67 --peak bandwidth=3350 "
        '(TFLOP/s, GB/s), or --peak gpu="H100 SXM" for a GPU of the table'
    )
