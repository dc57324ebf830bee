"""What each GPU can do at most: a table of peaks, one row a model, each with the document it comes from.

Figures are the vendors' own, for one device as PyTorch sees it: dense tensor-core (AMD: matrix-core)
TFLOP/s per type, without the 2:4 sparsity that datasheets print beside them (their "*" figures are
halved here); fp32 and fp64 on the CUDA cores (AMD: vector units); memory bandwidth in GB/s (10^9 bytes).
A field the document does not give, or the GPU does not have (TF32 and bf16 on a V100, fp8 before Ada
and Hopper), is ``None``. Where a vendor prints several figures the one used is said in ``note``
(GeForce cards: tensor figures with fp32 accumulation, as PyTorch runs them; an MI250X holds two GCDs,
each a device of its own: half of the package's figures).

A device is matched by its name (Kineto's ``deviceProperties``, Nsight Systems' ``TARGET_INFO_GPU``),
and by its memory where the name does not tell the variants apart (A100 40 and 80 GB). ``--peak
NAME=VALUE`` overrides a figure (:func:`overridden`) or picks a row for a GPU the table does not know
(``--peak gpu="H100 SXM"``).
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from traceconv.errors import UsageError

DTYPES = ("fp64", "fp32", "tf32", "bf16", "fp16", "fp8")
# --peak names: the fields of Peaks (TFLOP/s, bandwidth in GB/s), and ``gpu`` (a row of the table by its key)
FIELDS = ("fp64", "fp64_tensor", "fp32", "tf32", "bf16", "fp16", "fp8", "bandwidth_gbps")


@dataclass(frozen=True)
class Peaks:
    """Dense peaks of one device: TFLOP/s per type and engine, and memory bandwidth in GB/s."""

    fp64: float | None = None  # CUDA cores (AMD: vector)
    fp64_tensor: float | None = None
    fp32: float | None = None  # CUDA cores (AMD: vector)
    tf32: float | None = None  # tensor cores from here on
    bf16: float | None = None
    fp16: float | None = None
    fp8: float | None = None
    bandwidth_gbps: float | None = None

    def tensor(self, dtype: str) -> float | None:
        """The tensor-core peak of ``dtype`` (fp32 as 3xTF32, as CUTLASS emulates it: a third of TF32)."""
        if dtype == "3xtf32":
            return self.tf32 / 3 if self.tf32 else None
        value: float | None = self.fp64_tensor if dtype == "fp64" else getattr(self, dtype, None)
        return value if dtype != "fp32" else None

    def cuda(self, dtype: str) -> float | None:
        """The CUDA-core peak of ``dtype``: fp64's own, every other type at fp32's rate."""
        return self.fp64 if dtype == "fp64" else self.fp32

    def tensor_fix(self, dtype: str) -> tuple[str, float, float] | None:
        """For matrix work in ``dtype`` on the CUDA cores: the type the fix runs it in on the tensor cores
        (fp32: TF32 where that is at least twice fp32's rate, else bf16, else fp16; a 16-bit type: its own),
        that type's tensor peak, and the CUDA cores' peak; None where the peaks are not known."""
        cuda = self.cuda(dtype)
        options = [dtype]
        if dtype in ("fp32", "tf32"):
            options = ["tf32"] if self.tf32 and self.fp32 and self.tf32 >= 2 * self.fp32 else []
            options += ["bf16", "fp16"]
        for fix in options:
            peak = self.tensor(fix)
            if peak and cuda:
                return fix, peak, cuda
        return None

    def mfu_basis(self) -> tuple[str, float | None]:
        """MFU is quoted against the dense bf16 tensor peak (fp16 where a GPU has no bf16)."""
        return ("bf16", self.bf16) if self.bf16 else ("fp16", self.fp16)


@dataclass(frozen=True)
class Model:
    key: str  # "H100 SXM": what --peak gpu= takes
    pattern: str  # a regular expression on the lower-cased device name
    peaks: Peaks
    source: str  # the document the figures come from: its title and URL
    min_memory_gb: float = 0.0  # variants told apart by their memory: this much at least (10^9 bytes)
    note: str = ""


_V100 = "NVIDIA V100 Tensor Core GPU datasheet, https://images.nvidia.com/content/technologies/volta/pdf/volta-v100-datasheet-update-us-1165301-r5.pdf"
_A100 = "NVIDIA A100 Tensor Core GPU datasheet, https://www.nvidia.com/content/dam/en-zz/Solutions/Data-Center/a100/pdf/nvidia-a100-datasheet-us-nvidia-1758950-r4-web.pdf"
_H100 = "NVIDIA H100 Tensor Core GPU datasheet, https://resources.nvidia.com/en-us-tensor-core/nvidia-tensor-core-gpu-datasheet"
_H200 = "NVIDIA H200 Tensor Core GPU product page and datasheet, https://www.nvidia.com/en-us/data-center/h200/"
_B200 = (
    "NVIDIA HGX platform specifications (HGX B200, one GPU = 1/8 of it), https://www.nvidia.com/en-us/data-center/hgx/"
)
_L4 = "NVIDIA L4 Tensor Core GPU datasheet, https://resources.nvidia.com/en-us-data-center-overview/l4-gpu-datasheet"
_L40S = "NVIDIA L40S GPU datasheet, https://resources.nvidia.com/en-us-l40s/l40s-datasheet-28413"
_A10 = "NVIDIA A10 Tensor Core GPU datasheet, https://www.nvidia.com/content/dam/en-zz/Solutions/Data-Center/a10/pdf/a10-datasheet.pdf"
_ADA = "NVIDIA Ada GPU Architecture whitepaper, appendix A, https://images.nvidia.com/aem-dam/Solutions/geforce/ada/nvidia-ada-gpu-architecture.pdf"
_MI250X = "AMD Instinct MI200 series datasheet (MI250X), https://www.amd.com/system/files/documents/amd-instinct-mi200-datasheet.pdf"
_MI300X = "AMD Instinct MI300X accelerator datasheet, https://www.amd.com/content/dam/amd/en/documents/instinct-tech-docs/data-sheets/amd-instinct-mi300x-data-sheet.pdf"
_MI325X = "AMD Instinct MI325X accelerator datasheet, https://www.amd.com/content/dam/amd/en/documents/instinct-tech-docs/product-briefs/instinct-mi325x-datasheet.pdf"
SOURCES = {
    "V100": _V100,
    "A100": _A100,
    "H100": _H100,
    "H200": _H200,
    "B200": _B200,
    "L4": _L4,
    "L40S": _L40S,
    "A10": _A10,
    "Ada": _ADA,
    "MI250X": _MI250X,
    "MI300X": _MI300X,
    "MI325X": _MI325X,
}
NOTES = {
    "V100 SXM2": "V100 DGXS (DGX Station) taken as SXM2",
    "RTX 4090": "tensor figures with fp32 accumulation (GeForce runs fp16 accumulation twice as fast)",
    "MI250X (one GCD)": "an MI250X is two GCDs, each a device: half of the package's figures",
}
# Most specific first: the first row whose pattern (and memory, GB at least) matches is the device's.
# TFLOP/s dense; "-": not given / not there. fp64t: fp64 on tensor cores; GB/s: memory bandwidth.
_ROWS = r"""
key              | pattern    | fp64  | fp64t | fp32  | tf32  | bf16   | fp16   | fp8    | GB/s   | GB | source
H100 NVL         | h100.*nvl  | 30    | 60    | 60    | 417.5 | 835.5  | 835.5  | 1670.5 | 3900   | 0  | H100
H100 PCIe        | h100.*pcie | 26    | 51    | 51    | 378   | 756.5  | 756.5  | 1513   | 2000   | 0  | H100
H100 SXM         | h100       | 34    | 67    | 67    | 494.5 | 989.5  | 989.5  | 1979   | 3350   | 0  | H100
H200 NVL         | h200.*nvl  | 30    | 60    | 60    | 417.5 | 835.5  | 835.5  | 1670.5 | 4800   | 0  | H200
H200 SXM         | h200       | 34    | 67    | 67    | 494.5 | 989.5  | 989.5  | 1979   | 4800   | 0  | H200
B200             | \bb200     | 37    | 37    | 75    | 1125  | 2250   | 2250   | 4500   | 8000   | 0  | B200
A100 PCIe 80GB   | a100.*pcie | 9.7   | 19.5  | 19.5  | 156   | 312    | 312    | -      | 1935   | 60 | A100
A100 PCIe 40GB   | a100.*pcie | 9.7   | 19.5  | 19.5  | 156   | 312    | 312    | -      | 1555   | 0  | A100
A100 SXM 80GB    | a100       | 9.7   | 19.5  | 19.5  | 156   | 312    | 312    | -      | 2039   | 60 | A100
A100 SXM 40GB    | a100       | 9.7   | 19.5  | 19.5  | 156   | 312    | 312    | -      | 1555   | 0  | A100
V100S PCIe       | v100s      | 8.2   | -     | 16.4  | -     | -      | 130    | -      | 1134   | 0  | V100
V100 PCIe        | v100.*pcie | 7     | -     | 14    | -     | -      | 112    | -      | 900    | 0  | V100
V100 SXM2        | v100       | 7.8   | -     | 15.7  | -     | -      | 125    | -      | 900    | 0  | V100
L40S             | l40s       | -     | -     | 91.6  | 183   | 362.05 | 362.05 | 733    | 864    | 0  | L40S
L4               | \bl4\b     | -     | -     | 30.3  | 60    | 121    | 121    | 242.5  | 300    | 0  | L4
A10              | \ba10\b    | -     | -     | 31.2  | 62.5  | 125    | 125    | -      | 600    | 0  | A10
RTX 4090         | rtx 4090   | -     | -     | 82.6  | 82.6  | 165.2  | 165.2  | 330.3  | 1008   | 0  | Ada
MI250X (one GCD) | mi250x     | 23.95 | 47.85 | 23.95 | -     | 191.5  | 191.5  | -      | 1638.4 | 0  | MI250X
MI325X           | mi325x     | 81.7  | 163.4 | 163.4 | 653.7 | 1307.4 | 1307.4 | 2614.9 | 6000   | 0  | MI325X
MI300X           | mi300x     | 81.7  | 163.4 | 163.4 | 653.7 | 1307.4 | 1307.4 | 2614.9 | 5300   | 0  | MI300X
"""


def _table(text: str) -> tuple[Model, ...]:
    rows = [[cell.strip() for cell in line.split("|")] for line in text.strip().splitlines()[1:]]
    return tuple(
        Model(
            key=r[0],
            pattern=r[1],
            peaks=Peaks(*(None if v == "-" else float(v) for v in r[2:10])),
            source=SOURCES[r[11]],
            min_memory_gb=float(r[10]),
            note=NOTES.get(r[0], ""),
        )
        for r in rows
    )


TABLE = _table(_ROWS)
BY_KEY = {m.key.lower(): m for m in TABLE}
# ROCm builds of Kineto that write no device name: an MI300-class device told by its 304 CUs and memory.
_UNNAMED_AMD = ((304, 230.0, "MI300X"), (304, 1e9, "MI325X"))  # 192 GB, 256 GB


def match(name: str | None, memory_bytes: int | None = None, sms: int | None = None) -> Model | None:
    """The table's row for a device of this name (and memory, CU count), None for one it does not know."""
    text = (name or "").strip().lower()
    gb = (memory_bytes or 0) / 1e9
    if not text:
        for cus, below_gb, key in _UNNAMED_AMD:
            if sms == cus and gb and gb < below_gb:
                return BY_KEY[key.lower()]
        return None
    for model in TABLE:
        if re.search(model.pattern, text) and (not model.min_memory_gb or gb >= model.min_memory_gb):
            return model
    return None


def overridden(peaks: Peaks | None, overrides: Mapping[str, float]) -> Peaks | None:
    """``peaks`` with ``--peak`` figures in place (a GPU the table does not know: those figures alone)."""
    figures = {k: v for k, v in overrides.items() if k in FIELDS}
    if not figures:
        return peaks
    return dataclasses.replace(peaks or Peaks(), **figures)


def parse(items: Sequence[str]) -> dict[str, float | str]:
    """``--peak NAME=VALUE`` options: a figure of :data:`FIELDS` (a positive number) or ``gpu=<a key of the
    table>``; a UsageError that says what is allowed for anything else."""
    out: dict[str, float | str] = {}
    for item in items:
        name, sep, value = (part.strip() for part in item.partition("="))
        name = "bandwidth_gbps" if name.lower() in ("bandwidth", "bw") else name.lower()
        if name == "gpu" and sep:
            if value.lower() not in BY_KEY:
                raise UsageError(
                    None, f"--peak gpu={value!r} is not in the table", f"choose from {', '.join(m.key for m in TABLE)}"
                )
            out["gpu"] = BY_KEY[value.lower()].key
            continue
        try:
            number = float(value) if sep and name in FIELDS else -1.0
        except ValueError:
            number = -1.0
        if number <= 0:
            raise UsageError(
                None,
                f"--peak {item!r} is not NAME=VALUE with a positive number",
                f"NAME is one of {', '.join(FIELDS)} (TFLOP/s; bandwidth in GB/s) or gpu; e.g. --peak bf16=989.5",
            )
        out[name] = number
    return out
