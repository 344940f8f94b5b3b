"""Latency of streaming recognition (``scripts/stream_latency.py``): how long after speech starts the first partial
transcript shows, how long after speech ends the final one comes, and the real-time factor of each chunk; decoded
directly on one thread, and through the service's WebSocket (/stream) by concurrent clients.

Speech start and end: the audible span of each recording (corpus/word_timing.py, ``audible_span``: within 35 dB of its
loudest 5 ms). A recording is fed in pieces of ``piece_ms``, piece k complete at audio time a_k (its end).

Direct (:func:`direct_latency`): the pieces go through ``StreamingFeatures`` and a ``StreamingRecognizer`` on the
calling thread as fast as they can, each call timed (c_k). Fed live, the recognizer would take piece k at a_k or when
it is done with the piece before, whichever is later, so its result shows at f_k = max(a_k, f_{k-1}) + c_k; the final
at max(audio end, f_last) + the finish's time. That is the latency of a live stream on one thread, without waiting
for the audio in real time. RTF per chunk: the compute of the pieces up to the one that completed a chunk, divided
by the chunk's duration (full context: the finish's compute over the audio's duration, under ``rtf_final``).

WebSocket (:func:`websocket_latency`): ``concurrent`` clients, each on its own connection, send their recordings
(cycled) piece by piece at the pace of a microphone (piece k at t0 + a_k / ``pace``; ``pace`` > 1 only to shorten
tests), then the end event; a thread per client timestamps each message as it arrives. Latencies are wall times:
the first non-empty partial less t0 + speech start / pace, the final less t0 + speech end / pace (and audio end).
``mismatched_finals`` counts finals that differ from the direct decoding of the same recording (0 when the service
decodes what the recognizer does).

Contracts:
    summary(values) -> {"median", "p95", "count"} (ms or ratios; None entries when empty)
    speech_span_ms(samples, sample_rate) -> (start_ms, end_ms)
    direct_latency(loaded, recordings, chunk_ms=None, two_pass=None, piece_ms=None) -> report dict
    websocket_latency(url, recordings, concurrent, sample_rate, chunk_ms=None, two_pass=None, piece_ms=100.0,
                      pace=1.0, timeout_s=60.0, expected=None) -> report dict
    served_checkpoint(checkpoint, num_threads=1, max_streams=16, timeout_s=120.0) -> context manager of a base URL
"""

from __future__ import annotations

import contextlib
import json
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from urllib.parse import urlencode

import torch

from paraformer_asr.data.setup import make_frontend
from paraformer_asr.decode.streaming import StreamingFeatures, StreamingRecognizer, chunk_frames
from paraformer_asr.decode.timestamps import frame_clock
from paraformer_asr.errors import DataError
from paraformer_asr.inference import LoadedModel
from paraformer_asr_tools.benchmarks.service_load import percentile
from paraformer_asr_tools.corpus.word_timing import audible_span

FULL_CONTEXT_PIECE_MS = 600.0  # pieces of a full-context stream when no --piece-ms is given

Recording = tuple[str, torch.Tensor]  # (name, samples [N] at the model's rate)


def summary(values: list[float]) -> dict:
    """-> {"median", "p95", "count"} of ``values`` (rounded to 0.001; None without values)."""
    ordered = sorted(values)
    if not ordered:
        return {"median": None, "p95": None, "count": 0}
    return {"median": round(statistics.median(ordered), 3), "p95": round(percentile(ordered, 95), 3),
            "count": len(ordered)}


def speech_span_ms(samples: torch.Tensor, sample_rate: int) -> tuple[float, float]:
    """samples [N] -> (start, end) of the audible part in ms; the whole recording when it is silent."""
    first, last = audible_span(samples, sample_rate)
    if last == 0:
        first, last = 0, samples.numel()
    return first * 1000.0 / sample_rate, last * 1000.0 / sample_rate


def direct_latency(loaded: LoadedModel, recordings: list[Recording], chunk_ms: float | None = None,
                   two_pass: bool | None = None, piece_ms: float | None = None) -> dict:
    """Each recording decoded as a live stream on this thread (module docstring) -> {"chunk_frames", "two_pass",
    "piece_ms", "recordings", "first_partial_ms", "final_after_speech_end_ms", "final_after_audio_end_ms",
    "rtf_per_chunk", "rtf_final", "finals"} (finals: each recording's final text, by name)."""
    clock = frame_clock(loaded.cfg)
    chunk = None if chunk_ms is None else chunk_frames(chunk_ms, clock)
    settings = StreamingRecognizer(loaded.model, chunk, two_pass)  # the chunk and two-pass every stream gets
    chunk_ms_used = settings.chunk_size * clock.encoder_frame_ms
    piece_ms = piece_ms or chunk_ms_used or FULL_CONTEXT_PIECE_MS
    first_partials, after_speech, after_audio, chunk_rtfs, final_rtfs, finals = [], [], [], [], [], {}
    for name, samples in recordings:
        recognizer = StreamingRecognizer(loaded.model, settings.chunk_size, settings.two_pass)
        timeline = _timed_stream(loaded, recognizer, samples, piece_ms)
        start_ms, end_ms = speech_span_ms(samples, loaded.cfg.data.sample_rate)
        if timeline["first_partial_at"] is not None:
            first_partials.append(timeline["first_partial_at"] - start_ms)
        after_speech.append(timeline["final_at"] - end_ms)
        after_audio.append(timeline["final_at"] - timeline["audio_ms"])
        chunk_rtfs += [compute / chunk_ms_used for compute in timeline["chunk_compute_ms"]]
        final_rtfs.append(timeline["finish_compute_ms"] / timeline["audio_ms"])
        finals[name] = timeline["text"]
    return {"chunk_frames": settings.chunk_size, "two_pass": settings.two_pass, "piece_ms": piece_ms,
            "recordings": len(recordings), "first_partial_ms": summary(first_partials),
            "final_after_speech_end_ms": summary(after_speech), "final_after_audio_end_ms": summary(after_audio),
            "rtf_per_chunk": summary(chunk_rtfs), "rtf_final": summary(final_rtfs), "finals": finals}


def _timed_stream(loaded: LoadedModel, recognizer: StreamingRecognizer, samples: torch.Tensor,
                  piece_ms: float) -> dict:
    """One recording through the front end and ``recognizer`` in pieces, each call timed -> {"first_partial_at",
    "final_at", "audio_ms" (ms of audio time), "chunk_compute_ms" (compute per completed chunk), "finish_compute_ms",
    "text"}."""
    rate = loaded.cfg.data.sample_rate
    features = StreamingFeatures(make_frontend(loaded.cfg), loaded.normalizer)
    piece = max(1, round(piece_ms * rate / 1000.0))
    free_at, first_partial_at, pending_ms, chunk_compute_ms = 0.0, None, 0.0, []
    for start in range(0, samples.numel(), piece):
        arrives_at = min(start + piece, samples.numel()) * 1000.0 / rate
        encoded = recognizer.stream.encoded_frames
        began = time.perf_counter()
        partial = recognizer.accept(features.accept(samples[start:start + piece]))
        compute_ms = (time.perf_counter() - began) * 1000.0
        free_at = max(arrives_at, free_at) + compute_ms
        pending_ms += compute_ms
        chunks = (recognizer.stream.encoded_frames - encoded) // max(recognizer.chunk_size, 1)
        if recognizer.chunk_size > 0 and chunks > 0:
            chunk_compute_ms += [pending_ms / chunks] * chunks
            pending_ms = 0.0
        if partial and first_partial_at is None:
            first_partial_at = free_at
    audio_ms = samples.numel() * 1000.0 / rate
    began = time.perf_counter()
    recognizer.accept(features.finish())
    tokens = recognizer.finish()
    finish_compute_ms = (time.perf_counter() - began) * 1000.0
    return {"first_partial_at": first_partial_at, "final_at": max(audio_ms, free_at) + finish_compute_ms,
            "audio_ms": audio_ms, "chunk_compute_ms": chunk_compute_ms, "finish_compute_ms": finish_compute_ms,
            "text": loaded.tokenizer.decode(tokens)}


def websocket_latency(url: str, recordings: list[Recording], concurrent: int, sample_rate: int,
                      chunk_ms: float | None = None, two_pass: bool | None = None, piece_ms: float = 100.0,
                      pace: float = 1.0, timeout_s: float = 60.0, expected: dict | None = None) -> dict:
    """``concurrent`` clients stream ``recordings`` (cycled, each client at least one) to ``url``'s /stream at
    ``pace`` times real time (module docstring) -> {"concurrent", "streams", "errors", "error_samples",
    "first_partial_ms", "final_after_speech_end_ms", "final_after_audio_end_ms", "mismatched_finals"} (against
    ``expected``, final texts by recording name; None without it)."""
    from websockets.sync.client import connect  # the optional 'serve' extra

    query = {"sample_rate": sample_rate, **({} if chunk_ms is None else {"chunk_ms": chunk_ms}),
             **({} if two_pass is None else {"two_pass": str(two_pass).lower()})}
    address = f"{url.replace('http://', 'ws://', 1)}/stream?{urlencode(query)}"
    rounds = max(1, -(-len(recordings) // concurrent))
    jobs = [[recordings[(client + concurrent * turn) % len(recordings)] for turn in range(rounds)]
            for client in range(concurrent)]

    def client(job: list[Recording]) -> list[dict]:
        results = []
        for name, samples in job:
            with connect(address, open_timeout=timeout_s, max_size=None) as connection:
                results.append({"name": name, **_paced_stream(connection, samples, sample_rate, piece_ms, pace,
                                                              timeout_s)})
        return results

    with ThreadPoolExecutor(max_workers=concurrent) as pool:
        streams = [result for results in pool.map(client, jobs) for result in results]
    errors = [stream["error"] for stream in streams if stream["error"] is not None]
    finished = [stream for stream in streams if stream["error"] is None]
    mismatched = None if expected is None else sum(stream["text"] != expected[stream["name"]] for stream in finished)
    return {"concurrent": concurrent, "streams": len(streams), "errors": len(errors), "error_samples": errors[:5],
            "piece_ms": piece_ms, "pace": pace,
            "first_partial_ms": summary([s["first_partial_ms"] for s in finished if s["first_partial_ms"] is not None]),
            "final_after_speech_end_ms": summary([s["final_after_speech_end_ms"] for s in finished]),
            "final_after_audio_end_ms": summary([s["final_after_audio_end_ms"] for s in finished]),
            "mismatched_finals": mismatched}


def _paced_stream(connection, samples: torch.Tensor, sample_rate: int, piece_ms: float, pace: float,
                  timeout_s: float) -> dict:
    """One recording sent on ``connection`` at the pace of a microphone, its messages timestamped by a receiving
    thread -> {"text", "error", "first_partial_ms", "final_after_speech_end_ms", "final_after_audio_end_ms"}."""
    pcm = (samples * 32768.0).round().clamp(-32768, 32767).to(torch.int16).numpy().astype("<i2").tobytes()
    messages: list[tuple[float, dict]] = []
    receiver = threading.Thread(target=_receive_all, args=(connection, messages, timeout_s), daemon=True)
    receiver.start()
    from websockets.exceptions import ConnectionClosed

    piece = 2 * max(1, round(piece_ms * sample_rate / 1000.0))  # bytes
    started = time.perf_counter()
    try:
        for start in range(0, len(pcm), piece):
            due = started + min(start + piece, len(pcm)) / 2 / sample_rate / pace  # the piece's end, recorded
            time.sleep(max(0.0, due - time.perf_counter()))
            connection.send(pcm[start:start + piece])
        connection.send(json.dumps({"event": "end"}))
    except ConnectionClosed:  # the server ended the stream early: its error message says why
        pass
    receiver.join(timeout_s)
    ends = [(at, message) for at, message in messages if message["type"] in ("final", "error")]
    final_at, final = ends[0] if ends else (None, {"type": "error", "detail": "no final and no error message"})
    if final["type"] == "error":
        return {"text": None, "error": final["detail"], "first_partial_ms": None,
                "final_after_speech_end_ms": None, "final_after_audio_end_ms": None}
    speech_start, speech_end = (started + ms / 1000.0 / pace for ms in speech_span_ms(samples, sample_rate))
    audio_end = started + samples.numel() / sample_rate / pace
    first = next((at for at, message in messages if message["type"] == "partial" and message["text"]), None)
    return {"text": final["text"], "error": None,
            "first_partial_ms": None if first is None else (first - speech_start) * 1000.0,
            "final_after_speech_end_ms": (final_at - speech_end) * 1000.0,
            "final_after_audio_end_ms": (final_at - audio_end) * 1000.0}


def _receive_all(connection, messages: list, timeout_s: float) -> None:
    """Append (arrival time, message) until the server closes the connection."""
    from websockets.exceptions import ConnectionClosed

    try:
        while True:
            text = connection.recv(timeout=timeout_s)
            messages.append((time.perf_counter(), json.loads(text)))
    except (ConnectionClosed, TimeoutError):
        return


@contextlib.contextmanager
def served_checkpoint(checkpoint: str | Path, num_threads: int = 1, max_streams: int = 16,
                      timeout_s: float = 120.0):
    """The service (``python -m paraformer_asr.serving.command``, what scripts/serve.py runs) for ``checkpoint`` in
    its own process on a free loopback port (torch on ``num_threads`` threads) -> its base URL while the block runs;
    stopped after. DataError when it does not come up."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    command = [sys.executable, "-m", "paraformer_asr.serving.command", "--checkpoint", str(checkpoint),
               "--port", str(port), "--num-threads", str(num_threads), "--max-streams", str(max_streams)]
    errors = tempfile.TemporaryFile()  # a file, not a pipe: a chatty server cannot fill it and stall
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=errors)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + timeout_s
        while not _answers(url):
            if process.poll() is not None:
                errors.seek(0)
                raise DataError(f"the server for {checkpoint} stopped: "
                                f"{errors.read().decode('utf-8', 'replace')[-800:]}")
            if time.monotonic() > deadline:
                raise DataError(f"the server for {checkpoint} did not answer within {timeout_s:g} s")
            time.sleep(0.1)
        yield url
    finally:
        process.terminate()
        process.wait(timeout=30)
        errors.close()


def _answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(url + "/health", timeout=2) as answer:
            return answer.status == 200
    except OSError:
        return False

