"""A Dask client for ``--scheduler``: an existing scheduler's address, or ``local:N``."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator
from typing import Any

from traceconv.errors import ToolMissingError, TraceconvError, UsageError
from traceconv.fleet import LOCAL_PREFIX

CONNECT_TIMEOUT_S = 30


def _distributed() -> Any:
    try:
        import distributed
    except ImportError:
        raise ToolMissingError(
            None,
            "--scheduler needs Dask distributed, which is not installed",
            "install it with `pip install 'traceconv[dask]'`, or leave --scheduler and DASK_SCHEDULER_ADDRESS unset",
        ) from None
    return distributed


def local_workers(address: str) -> int | None:
    """N of ``local:N``; None for the address of a scheduler."""
    if not address.startswith(LOCAL_PREFIX):
        return None
    text = address[len(LOCAL_PREFIX) :]
    if not text.isdigit() or int(text) < 1:
        raise UsageError(None, f"--scheduler {address}: N of local:N must be a whole number from 1", "e.g. local:4")
    return int(text)


@contextlib.contextmanager
def client(address: str) -> Iterator[Any]:
    """A connected ``distributed.Client``, closed (with its LocalCluster, if it started one) on exit."""
    distributed = _distributed()
    workers = local_workers(address)
    with contextlib.ExitStack() as stack:
        if workers is not None:
            cluster = distributed.LocalCluster(
                n_workers=workers,
                threads_per_worker=1,
                processes=True,
                dashboard_address=None,
                silence_logs=logging.CRITICAL,  # its start and stop (heartbeats cut short) are not news
            )
            stack.enter_context(cluster)
            target: Any = cluster
        else:
            target = address
        try:
            dask_client = distributed.Client(target, timeout=CONNECT_TIMEOUT_S, set_as_default=False)
        except (OSError, TimeoutError) as exc:
            raise TraceconvError(
                None,
                f"cannot reach the Dask scheduler at {address} ({exc})",
                "start it (`dask scheduler`, then `dask worker ADDRESS` on each machine) or check the address",
            ) from exc
        stack.enter_context(dask_client)
        yield dask_client
