"""Conversions on a Dask distributed cluster: one task per trace, each worker writing its own part.

``traceconv ingest|nsys INPUT... --scheduler ADDRESS`` (or ``DASK_SCHEDULER_ADDRESS``) sends the
conversions to an existing cluster; ``--scheduler local:N`` starts a LocalCluster of N worker
processes. The inputs and the output must be on a filesystem every worker sees at the same path
(a shared mount): a worker opens its input and writes its part itself, atomically, as a local run
does. Dask is the optional extra ``traceconv[dask]``.
"""

from __future__ import annotations

ENV = "DASK_SCHEDULER_ADDRESS"
LOCAL_PREFIX = "local:"

__all__ = ["ENV", "LOCAL_PREFIX"]
