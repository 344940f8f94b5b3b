"""The service's lane for long recordings: decoded window by window on their own thread, beside the micro-batcher.

A recording longer than the long-form ``chunk_seconds`` never enters the micro-batcher (one of them would hold a
batch of short requests for seconds or minutes). It is queued here and decoded by ``transcribe_long`` on this
lane's worker thread, one recording at a time. Before each batch of windows the lane yields to the short requests:
it waits while the micro-batcher has requests queued or being decoded, at most ``yield_ms`` per window batch (so
a steady stream of short requests slows a long recording down but cannot stall it). At most ``max_queued``
recordings wait or run at once; more are refused (503) rather than piling their uploads up in memory.

The lane's thread lowers its own scheduling priority (Linux: the thread's nice value, ``niceness``; 0 keeps it): when
the cores are busy, the operating system runs the short requests' threads first. On a machine with few cores, each
lane's torch operations run on the calling thread's own intra-op threads: with ``--num-threads N`` the two lanes may
use 2N threads together; N = 1 leaves one core to each on two cores.

Contract:
    LongFormLane(loaded, device, options, batcher, yield_ms=200.0, max_queued=4, niceness=10, search=None)
        start(); submit(source, name, hotwords=None) -> Future of a Recognition (text, words); close(timeout_s=30.0);
        stats()
"""

from __future__ import annotations

import logging
import os
import queue
import threading
import time
from concurrent.futures import Future
from dataclasses import dataclass
from typing import BinaryIO

import torch

from paraformer_asr.decode.hotwords import HotwordTrie
from paraformer_asr.decode.longform import LongFormOptions, transcribe_long
from paraformer_asr.errors import DataError
from paraformer_asr.inference import LoadedModel
from paraformer_asr.serving.batcher import BatcherClosed, MicroBatcher, Recognition

log = logging.getLogger(__name__)


class LaneFull(RuntimeError):
    """Too many long recordings are queued or being decoded; the request may be retried later."""


@dataclass
class _Job:
    source: BinaryIO  # a seekable file object of the upload
    name: str
    future: Future
    hotwords: HotwordTrie | None = None  # the request's own list (None: the server's)


_STOP = object()


class LongFormLane:
    def __init__(self, loaded: LoadedModel, device: torch.device, options: LongFormOptions, batcher: MicroBatcher,
                 yield_ms: float = 200.0, max_queued: int = 4, niceness: int = 10, search: dict | None = None):
        if yield_ms < 0 or max_queued < 1:
            raise ValueError(f"need yield_ms >= 0 and max_queued >= 1, got {yield_ms}, {max_queued}")
        self.loaded = loaded
        self.device = device
        self.options = options
        self.search = search or {}  # DecodingOptions.search_arguments (greedy when empty)
        self.batcher = batcher
        self.yield_s = yield_ms / 1000.0
        self.max_queued = max_queued
        self.niceness = niceness
        self._queue: queue.SimpleQueue = queue.SimpleQueue()
        self._lock = threading.Lock()  # guards the counters and _accepting
        self._accepting = False
        self._closing = threading.Event()
        self._thread: threading.Thread | None = None
        self._waiting_or_running = 0
        self._recordings = 0
        self._windows = 0
        self._audio_seconds = 0.0
        self._decode_seconds = 0.0
        self._yield_seconds = 0.0
        self._failures = 0  # recordings whose decode failed by a server fault (not unreadable samples: those are 400)

    def start(self) -> None:
        with self._lock:
            if self._thread is not None:
                raise RuntimeError("the long-recording lane was already started")
            self._thread = threading.Thread(target=self._work, name="asr-long-form-lane", daemon=True)
            self._accepting = True
            self._thread.start()

    def submit(self, source: BinaryIO, name: str, hotwords: HotwordTrie | None = None) -> Future:
        """Queue one recording (a seekable file object), decoded with the request's ``hotwords`` when given (else
        the server's search); the future resolves to its Recognition. BatcherClosed when the lane is not running,
        LaneFull when ``max_queued`` recordings are already waiting or running."""
        future: Future = Future()
        with self._lock:
            if not self._accepting:
                raise BatcherClosed("the long-recording worker is not running")
            if self._waiting_or_running >= self.max_queued:
                raise LaneFull(f"{self._waiting_or_running} long recordings are already queued or being decoded "
                               f"(the limit is {self.max_queued}); retry later")
            self._waiting_or_running += 1
            self._queue.put(_Job(source, name, future, hotwords))
        return future

    def close(self, timeout_s: float = 30.0) -> None:
        """Stop taking recordings; the one being decoded and the queued ones end with BatcherClosed (at the next
        window batch), then the worker thread ends."""
        with self._lock:
            if not self._accepting:
                return
            self._accepting = False
            self._closing.set()
            self._queue.put(_STOP)
            thread = self._thread
        thread.join(timeout_s)

    def stats(self) -> dict:
        with self._lock:
            return {"recordings": self._recordings, "windows": self._windows,
                    "audio_seconds": round(self._audio_seconds, 3), "decode_seconds": round(self._decode_seconds, 3),
                    "yield_seconds": round(self._yield_seconds, 3), "queued_or_running": self._waiting_or_running,
                    "failures": self._failures}

    def _work(self) -> None:
        lower_thread_priority(self.niceness)
        while True:
            job = self._queue.get()
            if job is _STOP:
                return
            self._run(job)

    def _run(self, job: _Job) -> None:
        try:
            if not job.future.set_running_or_notify_cancel():
                return
            search = self.search if job.hotwords is None else {**self.search, "hotwords": job.hotwords}
            try:
                result = transcribe_long(self.loaded, job.source, self.device, self.options, name=job.name,
                                         pause=self._yield_to_short_requests, **search)
            except (BatcherClosed, DataError) as exc:  # shutting down, or samples found unreadable: the client's 400
                job.future.set_exception(exc)
                return
            except Exception as exc:  # a server fault, handed to this request alone; the lane keeps serving
                log.warning("long recording %s failed: %s: %s", job.name, type(exc).__name__, exc)
                with self._lock:
                    self._failures += 1
                job.future.set_exception(exc)
                return
            with self._lock:
                self._recordings += 1
                self._windows += result.num_windows
                self._audio_seconds += result.duration_s
                self._decode_seconds += result.seconds
            job.future.set_result(Recognition(result.text, result.words))
        finally:
            with self._lock:
                self._waiting_or_running -= 1

    def _yield_to_short_requests(self) -> None:
        """Called before each window batch: end the job when closing, else wait (at most yield_ms) while the
        micro-batcher has work."""
        if self._closing.is_set():
            raise BatcherClosed("the server is shutting down")
        started = time.perf_counter()
        self.batcher.wait_idle(self.yield_s)
        with self._lock:
            self._yield_seconds += time.perf_counter() - started


def lower_thread_priority(niceness: int) -> bool:
    """Raise the calling thread's nice value by ``niceness`` (Linux schedules threads by their own nice value);
    -> whether it was done (False where the platform has no per-thread priority)."""
    if niceness <= 0 or not hasattr(os, "setpriority"):
        return False
    try:
        thread_id = threading.get_native_id()
        os.setpriority(os.PRIO_PROCESS, thread_id, os.getpriority(os.PRIO_PROCESS, thread_id) + niceness)
    except OSError:
        return False
    return True
