"""The background writer: order, errors re-raised in the producer, and how many batches it holds."""

from __future__ import annotations

import threading
import weakref

import pytest

from traceconv.background import BackgroundWriter


class Batch:
    def __init__(self, n: int) -> None:
        self.n = n


def test_written_in_order_and_errors_reach_the_producer() -> None:
    seen: list[int] = []
    bw = BackgroundWriter(lambda b: seen.append(b.n), depth=0)
    for i in range(50):
        bw.put(Batch(i))
    bw.close()
    assert seen == list(range(50))

    def fail(b: Batch) -> None:
        raise OSError("disk full")

    bw = BackgroundWriter(fail, depth=0)
    bw.put(Batch(0))
    with pytest.raises(OSError, match="disk full"):
        for i in range(1, 10):
            bw.put(Batch(i))
        bw.close()


def test_handoff_returns_once_taken_and_a_written_batch_is_not_kept() -> None:
    """depth=0: put() returns when the thread has the batch (nothing waits in a queue), and the
    thread lets go of a batch once written, not when the next one comes."""
    started, release = threading.Event(), threading.Event()
    written: list[int] = []

    def write(b: Batch) -> None:
        started.set()
        release.wait(10)
        written.append(b.n)

    bw = BackgroundWriter(write, depth=0)
    first = Batch(1)
    ref = weakref.ref(first)
    bw.put(first)  # returns although the write has not finished
    assert started.wait(10) and not written
    del first
    release.set()
    for _ in range(1000):  # the thread finishes the write, then waits for the next batch
        if written:
            break
        threading.Event().wait(0.01)
    threading.Event().wait(0.05)
    assert written == [1]
    assert ref() is None  # freed while the thread waits: not held until the next put
    bw.close()


def test_the_thread_starts_with_the_first_batch() -> None:
    """Not before: a thread started early takes a malloc arena of its own beside the reader's
    read-ahead thread, instead of reusing that thread's once it has ended."""

    def writers() -> int:
        return sum(t.name == "traceconv-writer" for t in threading.enumerate())

    before = writers()
    bw = BackgroundWriter(lambda b: None, depth=0)
    assert writers() == before
    bw.close()  # nothing written: nothing to start or wait for
    bw = BackgroundWriter(lambda b: None, depth=0)
    bw.put(Batch(0))
    assert writers() == before + 1
    bw.close()
    assert writers() == before
