"""Dynamic micro-batching: concurrent requests are decoded together in one padded batch.

A worker thread takes the oldest queued request, then waits at most ``max_wait_ms`` for more (taking whatever
is already queued even after that), up to ``max_batch_size`` requests. Their features go through the package's
collation into one padded batch and ONE batched greedy decode; each request's future gets its own result. Under
light load a request waits at most ``max_wait_ms``; under heavy load batches fill up and throughput grows.

Failure isolation: when a batch's decode raises, its requests are decoded again one by one, so only a request that
fails on its own gets the exception (counted in ``stats()["isolated_failures"]``, the reason logged); the others get
their results. The service validates every request (decoded, non-empty, finite samples) before it is submitted.

Contracts:
    GreedyTranscriber(loaded, device)(utterances: list of B (features [T_i, F], duration_s) or (features, duration_s,
        hotwords: a HotwordTrie or None)) -> list of B Recognition
    MicroBatcher(transcribe, max_batch_size, max_wait_ms).submit(request) -> Future of transcribe([request])[0]
    MicroBatcher.wait_idle(timeout_s) -> True once no request is queued or being decoded (False on timeout)
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections import Counter
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any, Callable

import torch

from paraformer_asr.data.batching import Collator
from paraformer_asr.decode.search import transcribe_batches
from paraformer_asr.decode.timestamps import frame_clock, word_times
from paraformer_asr.inference import LoadedModel

log = logging.getLogger(__name__)


class BatcherClosed(RuntimeError):
    """The batcher is not running (not started yet, or shut down): no new requests are taken."""


@dataclass
class Recognition:
    """text; words: [{"word", "start_ms", "end_ms"}] with CIF times, or None for a model without them (the
    autoregressive baseline)."""

    text: str
    words: list[dict] | None


class GreedyTranscriber:
    """B utterances (features [T_i, F], duration in seconds, optionally the request's HotwordTrie) -> B Recognition,
    through one padded batch and one batched decode (greedy unless ``search`` says otherwise; with token times when
    the model gives them). Utterances with a hotword list of their own are decoded with it, one batch per distinct
    list (the others with ``search``'s)."""

    def __init__(self, loaded: LoadedModel, device: torch.device, search: dict | None = None):
        self.loaded = loaded
        self.search = search or {"method": "greedy"}  # DecodingOptions.search_arguments: method, beam_size, lm...
        self.device = device
        self.collate = Collator(loaded.tokenizer.pad_id)
        self.clock = frame_clock(loaded.cfg) if loaded.model.gives_timestamps else None

    def __call__(self, utterances: list[tuple]) -> list[Recognition]:
        lists = [utterance[2] if len(utterance) > 2 else None for utterance in utterances]
        rows_by_list: dict[tuple | None, list[int]] = {}  # equal lists (their entries) decode together
        for row, hotwords in enumerate(lists):
            rows_by_list.setdefault(None if hotwords is None else hotwords.entries, []).append(row)
        results: list[Recognition | None] = [None] * len(utterances)
        for rows in rows_by_list.values():
            hotwords = lists[rows[0]]
            search = self.search if hotwords is None else {**self.search, "hotwords": hotwords}
            recognised = self._decode([utterances[row][:2] for row in rows], search)
            for row, recognition in zip(rows, recognised):
                results[row] = recognition
        return results

    def _decode(self, utterances: list[tuple[torch.Tensor, float]], search: dict) -> list[Recognition]:
        """One padded batch of (features [T_i, F], duration_s), decoded with ``search``."""
        no_tokens = torch.zeros(0, dtype=torch.long)
        items = [{"id": str(index), "features": feats, "tokens": no_tokens, "text": "", "duration_s": duration_s}
                 for index, (feats, duration_s) in enumerate(utterances)]  # feats [T_i, F]
        batch = self.collate(items)  # features [B, T_max, F], feat_mask [B, T_max]
        transcripts, _ = transcribe_batches(self.loaded.model, [batch], self.device, **search, clock=self.clock)
        tokenizer = self.loaded.tokenizer
        return [Recognition(tokenizer.decode(t.hyp_tokens), self._words(t)) for t in transcripts]

    def _words(self, transcript) -> list[dict] | None:
        if transcript.token_times is None:
            return None
        return word_times(self.loaded.tokenizer.pieces(transcript.hyp_tokens), transcript.token_times)


@dataclass
class _Request:
    payload: Any  # one utterance for ``transcribe`` (the service: (features [T, F], duration_s))
    future: Future


_STOP = object()  # queue sentinel put by close(): everything queued before it is still decoded


class MicroBatcher:
    def __init__(self, transcribe: Callable[[list[Any]], list[Any]], max_batch_size: int,
                 max_wait_ms: float):
        if max_batch_size < 1 or max_wait_ms < 0:
            raise ValueError(f"need max_batch_size >= 1 and max_wait_ms >= 0, got {max_batch_size}, {max_wait_ms}")
        self.transcribe = transcribe
        self.max_batch_size = max_batch_size
        self.max_wait_s = max_wait_ms / 1000.0
        self._queue: queue.SimpleQueue = queue.SimpleQueue()
        self._lock = threading.Lock()  # guards _accepting/_thread, _pending and the statistics
        self._idle = threading.Condition(self._lock)  # notified when _pending drops to 0
        self._pending = 0  # requests submitted and not yet answered
        self._accepting = False
        self._thread: threading.Thread | None = None
        self._batch_sizes: Counter[int] = Counter()
        self._decode_seconds = 0.0
        self._split_batches = 0  # batches whose decode failed and were decoded again one request at a time
        self._isolated_failures = 0  # requests that failed when decoded alone

    def start(self) -> None:
        with self._lock:
            if self._thread is not None:
                raise RuntimeError("the batcher was already started")
            self._thread = threading.Thread(target=self._work, name="asr-micro-batcher", daemon=True)
            self._accepting = True
            self._thread.start()

    def submit(self, payload: Any) -> Future:
        """Queue one utterance (what ``transcribe`` takes per item); the future resolves to its result."""
        future: Future = Future()
        with self._lock:  # a request accepted here is queued before close()'s sentinel, so it is decoded
            if not self._accepting:
                raise BatcherClosed("the transcription worker is not running")
            self._pending += 1
            self._queue.put(_Request(payload, future))
        return future

    def wait_idle(self, timeout_s: float) -> bool:
        """Wait until no request is queued or being decoded, at most ``timeout_s``; -> whether it is idle."""
        with self._idle:
            return self._idle.wait_for(lambda: self._pending == 0, timeout_s)

    def close(self, timeout_s: float = 30.0) -> None:
        """Stop taking requests, decode the ones already queued, and end the worker thread."""
        with self._lock:
            if not self._accepting:
                return
            self._accepting = False
            self._queue.put(_STOP)
            thread = self._thread
        thread.join(timeout_s)

    def stats(self) -> dict:
        with self._lock:
            batches = sum(self._batch_sizes.values())
            requests = sum(size * count for size, count in self._batch_sizes.items())
            return {
                "batches": batches,
                "requests": requests,
                "mean_batch_size": requests / batches if batches else 0.0,
                "max_batch_size_seen": max(self._batch_sizes, default=0),
                "batch_size_counts": {str(size): self._batch_sizes[size] for size in sorted(self._batch_sizes)},
                "decode_seconds": self._decode_seconds,
                "queued": self._queue.qsize(),
                "split_batches": self._split_batches,
                "isolated_failures": self._isolated_failures,
            }

    def _work(self) -> None:
        stopping = False
        while not stopping:
            first = self._queue.get()
            if first is _STOP:
                return
            batch, stopping = self._collect(first)
            self._decode(batch)

    def _collect(self, first: _Request) -> tuple[list[_Request], bool]:
        """-> (up to max_batch_size requests, whether the stop sentinel was met)."""
        batch = [first]
        deadline = time.monotonic() + self.max_wait_s
        while len(batch) < self.max_batch_size:
            remaining = deadline - time.monotonic()
            try:
                item = self._queue.get(timeout=remaining) if remaining > 0 else self._queue.get_nowait()
            except queue.Empty:
                break
            if item is _STOP:
                return batch, True
            batch.append(item)
        return batch, False

    def _decode(self, batch: list[_Request]) -> None:
        try:
            self._decode_live(batch)
        finally:
            with self._idle:
                self._pending -= len(batch)
                if self._pending == 0:
                    self._idle.notify_all()

    def _decode_live(self, batch: list[_Request]) -> None:
        live = [request for request in batch if request.future.set_running_or_notify_cancel()]
        if not live:
            return
        try:
            self._decode_together(live)
        except Exception as exc:  # one request may be at fault: decode them one by one, the worker keeps serving
            if len(live) == 1:
                self._fail(live[0], exc)
                return
            log.warning("a batch of %d requests failed (%s: %s); decoding them one by one", len(live),
                        type(exc).__name__, exc)
            with self._lock:
                self._split_batches += 1
            for request in live:
                try:
                    self._decode_together([request])
                except Exception as alone_exc:
                    self._fail(request, alone_exc)

    def _decode_together(self, requests: list[_Request]) -> None:
        """One decode of ``requests``; each future gets its result. Raises what ``transcribe`` raises."""
        start = time.perf_counter()
        results = self.transcribe([request.payload for request in requests])
        with self._lock:
            self._batch_sizes[len(requests)] += 1
            self._decode_seconds += time.perf_counter() - start
        for request, result in zip(requests, results):
            request.future.set_result(result)

    def _fail(self, request: _Request, exc: Exception) -> None:
        log.warning("a request failed on its own: %s: %s", type(exc).__name__, exc)
        with self._lock:
            self._isolated_failures += 1
        request.future.set_exception(exc)
