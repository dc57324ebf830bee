"""What every reader derives once a GPU row knows its launching call: queue and wall time.

The definitions are NVIDIA's (``nsys stats --report cuda_kern_exec_trace``): queue time is
from the launching call's return to the start of the work, null when the work started first;
wall time is from the call's start to whichever ends last, the call or the work. Every input
may be null (no launching call in the trace, a row without a time): the result is then null.
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

Col = Any  # a pyarrow Array of int64 nanoseconds (or a ChunkedArray)


def queue_and_wall(start_ns: Col, end_ns: Col, launch_start_ns: Col, launch_end_ns: Col) -> tuple[pa.Array, pa.Array]:
    """``queue_ns`` and ``wall_ns`` of GPU rows from their own and their launching call's times."""
    queue = pc.subtract(start_ns, launch_end_ns)
    queue = pc.if_else(pc.greater_equal(queue, 0), queue, None)
    wall = pc.subtract(pc.max_element_wise(launch_end_ns, end_ns, skip_nulls=False), launch_start_ns)
    return queue, wall
