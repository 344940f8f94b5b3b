"""The service's streaming recognition: one WebSocket per utterance at ``/stream``, and the page served at ``/``.

Protocol (docs/usage.md, "Streaming"):

    client -> server   binary frames: 16-bit little-endian mono PCM at ``sample_rate`` Hz (query parameter; default
                       the model's rate; another rate is resampled on the server), a whole number of samples each;
                       a text frame {"event": "end"} when the audio is over
    server -> client   {"type": "partial", "text", "audio_ms"} each time the partial transcript changes;
                       {"type": "final", "text", "words": [{"word", "start_ms", "end_ms"}], "audio_ms"} after "end",
                       then the close (1000); {"type": "error", "detail"} and a close code when the stream is refused

Optional query parameters ``chunk_ms`` (the encoder's chunk, rounded to encoder frames; default the checkpoint's
``model.streaming.decode_chunk_size``; 0: full context, the transcript only at the end) and ``two_pass``
(true / false; default the checkpoint's ``model.streaming.two_pass``).

Close codes: 1007 a binary frame with an odd number of bytes; 1003 a text frame other than the end event; 1008 a
bad query parameter, a checkpoint that cannot stream, or no message for ``stream_idle_seconds``; 1009 more audio
than ``max_stream_seconds``; 1013 ``max_streams`` streams already open; 1001 the server is shutting down; 1011 a
fault of the server (logged). Each of these ends its own stream only.

Isolation: every stream has its own state (resampler, front end, recognizer) and its model work runs on the
:class:`StreamHub`'s worker threads, never on the event loop; the loop only moves messages. One stream's work runs
one call at a time (its handler awaits each), so streams need no locks; the model itself is shared (eval mode,
read-only). A model trained without streaming (``model.streaming.enabled`` false) is decoded with full context at
the stream's end: its attention was never restricted to chunks, so partial transcripts would need the whole
utterance again at every piece; such a stream gets its final and no partials, and asking it for ``chunk_ms`` > 0 is
refused (1008).

Contracts:
    pcm_samples(data) -> samples [n] float32 in [-1, 1)            StreamRefused (1007) for an odd byte count
    stream_options(query, loaded) -> StreamOptions                  StreamRefused (1008) naming the parameter
    StreamSession(loaded, options, max_seconds).accept(data) -> the changed partial text or None; .finish() -> the
        final message
    stream_defaults(loaded) -> {"available", "sample_rate", "chunk_ms", "two_pass", "partials"} or {"available",
        "reason"}
    StreamHub(max_streams, defaults=None).slot(); await .run(function, *args); .close(); .stats()
    serve_stream(websocket, loaded, settings, hub)                  the /stream handler
    index_page() -> the page's HTML
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import logging
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from importlib import resources
from typing import Callable, Iterator, Mapping

import numpy as np
import torch
from fastapi import WebSocket
from fastapi.websockets import WebSocketDisconnect

from paraformer_asr.data.resample import StreamingResampler
from paraformer_asr.data.setup import make_frontend
from paraformer_asr.decode.streaming import StreamingFeatures, StreamingRecognizer, chunk_frames
from paraformer_asr.decode.timestamps import frame_clock, word_times
from paraformer_asr.errors import ConfigError
from paraformer_asr.inference import LoadedModel
from paraformer_asr.serving.settings import ServeSettings

MIN_SAMPLE_RATE, MAX_SAMPLE_RATE = 4000, 192000  # what microphones and sound cards record at
PCM_SCALE = 32768.0  # 16-bit PCM -> [-1, 1), as soundfile reads it
END_EVENT = {"event": "end"}

# WebSocket close codes (RFC 6455, section 7.4.1)
NORMAL, GOING_AWAY, UNSUPPORTED_DATA, INVALID_PAYLOAD, POLICY_VIOLATION, TOO_BIG, SERVER_ERROR, TRY_AGAIN_LATER = (
    1000, 1001, 1003, 1007, 1008, 1009, 1011, 1013)

log = logging.getLogger(__name__)


class StreamRefused(Exception):
    """A stream ends with an error message and ``code``: bad input or parameters, a limit reached, shutdown."""

    def __init__(self, code: int, detail: str):
        super().__init__(detail)
        self.code = code
        self.detail = detail


@dataclass(frozen=True)
class StreamOptions:
    """One stream's parameters: the client's ``sample_rate`` (Hz), the encoder's ``chunk_size`` (encoder frames, 0:
    full context) and ``two_pass`` (the final from a full-context pass)."""

    sample_rate: int
    chunk_size: int
    two_pass: bool


def pcm_samples(data: bytes) -> torch.Tensor:
    """A binary frame of 16-bit little-endian PCM -> samples [n] float32 in [-1, 1). StreamRefused (1007) when it
    does not hold a whole number of samples."""
    if len(data) % 2:
        raise StreamRefused(INVALID_PAYLOAD, f"a binary frame of {len(data)} bytes is not 16-bit PCM: every frame "
                                             f"must hold whole samples (an even number of bytes)")
    return torch.from_numpy(np.frombuffer(data, dtype="<i2").astype(np.float32) / PCM_SCALE)


def stream_options(query: Mapping[str, str], loaded: LoadedModel) -> StreamOptions:
    """The query parameters of a /stream request -> StreamOptions; StreamRefused (1008) naming a bad parameter, and
    for ``chunk_ms`` > 0 on a checkpoint trained without streaming."""
    streaming = loaded.cfg.model.streaming
    sample_rate = _integer(query.get("sample_rate"), "sample_rate", loaded.cfg.data.sample_rate)
    if not MIN_SAMPLE_RATE <= sample_rate <= MAX_SAMPLE_RATE:
        raise StreamRefused(POLICY_VIOLATION, f"query parameter 'sample_rate' must be an integer number of Hz in "
                                              f"[{MIN_SAMPLE_RATE}, {MAX_SAMPLE_RATE}], got {sample_rate}")
    chunk_size = streaming.decode_chunk_size if streaming.enabled else 0
    if "chunk_ms" in query:
        try:
            chunk_size = chunk_frames(float(query["chunk_ms"]), frame_clock(loaded.cfg))
        except (ValueError, ConfigError):
            raise StreamRefused(POLICY_VIOLATION, f"query parameter 'chunk_ms' must be a number of ms >= 0 (0: full "
                                                  f"context), got {query['chunk_ms']!r}") from None
        if chunk_size > 0 and not streaming.enabled:
            raise StreamRefused(POLICY_VIOLATION, "this checkpoint was trained without streaming "
                                                  "(model.streaming.enabled false): its streams are decoded with full "
                                                  "context at their end; leave 'chunk_ms' out or give 0")
    two_pass = streaming.two_pass
    if "two_pass" in query:
        value = query["two_pass"].lower()
        if value not in ("true", "false", "1", "0"):
            raise StreamRefused(POLICY_VIOLATION, f"query parameter 'two_pass' must be true or false, got "
                                                  f"{query['two_pass']!r}")
        two_pass = value in ("true", "1")
    return StreamOptions(sample_rate, chunk_size, two_pass)


def _integer(text: str | None, name: str, default: int) -> int:
    if text is None:
        return default
    try:
        return int(text)
    except ValueError:
        raise StreamRefused(POLICY_VIOLATION, f"query parameter '{name}' must be an integer, got {text!r}") from None


class StreamSession:
    """One stream's audio to text: PCM frames at the client's rate -> :class:`StreamingResampler` (to the model's
    rate) -> :class:`StreamingFeatures` (front end and normaliser) -> :class:`StreamingRecognizer`. One call at a
    time. ConfigError when the checkpoint cannot stream (not a CIF Paraformer, an ONNX export, a normaliser with the
    utterance mean)."""

    def __init__(self, loaded: LoadedModel, options: StreamOptions, max_seconds: float):
        self.loaded = loaded
        self.options = options
        self.max_samples = int(max_seconds * options.sample_rate)
        self.max_seconds = max_seconds
        self.recognizer = StreamingRecognizer(loaded.model, options.chunk_size, options.two_pass)
        self.features = StreamingFeatures(make_frontend(loaded.cfg), loaded.normalizer)
        self.resampler = StreamingResampler(options.sample_rate, loaded.cfg.data.sample_rate)
        self.received = 0  # samples at the client's rate
        self.decoded = 0  # samples at the model's rate
        self.shown = ""

    @property
    def audio_ms(self) -> int:
        """The audio received so far, in whole ms."""
        return round(self.received * 1000 / self.options.sample_rate)

    def accept(self, data: bytes) -> str | None:
        """One binary frame -> the partial transcript when it changed, else None. StreamRefused for an odd byte
        count (1007) and for audio past ``max_seconds`` (1009)."""
        samples = pcm_samples(data)  # [n]
        if self.received + samples.numel() > self.max_samples:
            raise StreamRefused(TOO_BIG, f"the stream's audio is longer than the limit of {self.max_seconds:g} s")
        self.received += samples.numel()
        text = self.loaded.tokenizer.decode(self._push(self.resampler.accept(samples)))
        if text == self.shown:
            return None
        self.shown = text
        return text

    def finish(self) -> dict:
        """The end of the audio -> the final message: {"type": "final", "text", "words", "audio_ms"}."""
        self._push(self.resampler.finish())
        self.recognizer.accept(self.features.finish())
        tokens = self.recognizer.finish()
        duration_s = self.decoded / self.loaded.cfg.data.sample_rate
        times = self.recognizer.token_times(frame_clock(self.loaded.cfg), duration_s)
        words = word_times(self.loaded.tokenizer.pieces(tokens), times)
        return {"type": "final", "text": self.loaded.tokenizer.decode(tokens), "words": words,
                "audio_ms": self.audio_ms}

    def _push(self, samples: torch.Tensor) -> list[int]:
        """samples [n] at the model's rate -> the partial transcript's token ids."""
        self.decoded += samples.numel()
        return self.recognizer.accept(self.features.accept(samples))


def stream_defaults(loaded: LoadedModel) -> dict:
    """What a stream without query parameters gets, for /health and the page: {"available": true, "sample_rate",
    "chunk_ms" (0: full context), "two_pass", "partials"}, or {"available": false, "reason"} for a checkpoint that
    cannot stream."""
    streaming = loaded.cfg.model.streaming
    options = StreamOptions(loaded.cfg.data.sample_rate, streaming.decode_chunk_size if streaming.enabled else 0,
                            streaming.two_pass)
    try:
        StreamSession(loaded, options, max_seconds=1.0)
    except ConfigError as exc:
        return {"available": False, "reason": str(exc)}
    return {"available": True, "sample_rate": options.sample_rate,
            "chunk_ms": options.chunk_size * frame_clock(loaded.cfg).encoder_frame_ms, "two_pass": options.two_pass,
            "partials": options.chunk_size > 0}


class StreamHub:
    """The service's streams: at most ``max_streams`` open at once (:meth:`slot`), their model work on a pool of as
    many worker threads (:meth:`run`), and counters for /health (with ``defaults``, :func:`stream_defaults`)."""

    def __init__(self, max_streams: int, defaults: dict | None = None):
        self.max_streams = max_streams
        self.defaults = defaults or {}
        self.executor = ThreadPoolExecutor(max_workers=max_streams, thread_name_prefix="asr-stream")
        self._lock = threading.Lock()
        self._closed = False
        self._open = 0
        self._counts = {"admitted": 0, "completed": 0, "left": 0, "refused": 0, "busy": 0, "failures": 0}
        self._audio_seconds = 0.0
        self._work_seconds = 0.0

    @contextlib.contextmanager
    def slot(self) -> Iterator[None]:
        """Hold one of the ``max_streams`` places while a stream is open; StreamRefused (1013) when none is free,
        (1001) once the hub is closed."""
        with self._lock:
            if self._closed:
                raise StreamRefused(GOING_AWAY, "the server is shutting down")
            if self._open >= self.max_streams:
                self._counts["busy"] += 1
                raise StreamRefused(TRY_AGAIN_LATER, f"{self._open} streams are already open (the limit is "
                                                     f"{self.max_streams}); retry later")
            self._open += 1
            self._counts["admitted"] += 1
        try:
            yield
        finally:
            with self._lock:
                self._open -= 1

    async def run(self, function: Callable, *args):
        """``function(*args)`` on a worker thread; its result (or exception) once done."""
        started = time.perf_counter()
        try:
            return await asyncio.get_running_loop().run_in_executor(self.executor, functools.partial(function, *args))
        except RuntimeError as exc:
            if self._closed:  # the pool was shut down under this stream
                raise StreamRefused(GOING_AWAY, "the server is shutting down") from exc
            raise
        finally:
            with self._lock:
                self._work_seconds += time.perf_counter() - started

    def count(self, outcome: str, audio_ms: int = 0) -> None:
        """Count a stream's end (and its audio): 'completed', 'left' (the client closed before its final), 'refused'
        (its input or parameters, or a checkpoint that cannot stream) or 'failures' (a fault of the server)."""
        with self._lock:
            self._counts[outcome] += 1
            self._audio_seconds += audio_ms / 1000.0

    def close(self) -> None:
        """Refuse new streams and stop the worker threads once the work they have is done."""
        with self._lock:
            self._closed = True
        self.executor.shutdown(wait=True, cancel_futures=True)

    def stats(self) -> dict:
        with self._lock:
            return {**self.defaults, "open": self._open, "max_streams": self.max_streams, **self._counts,
                    "audio_seconds": round(self._audio_seconds, 3), "work_seconds": round(self._work_seconds, 3)}


async def serve_stream(websocket: WebSocket, loaded: LoadedModel, settings: ServeSettings, hub: StreamHub) -> None:
    """The /stream handler: accept the connection, then decode its audio until the end event (module docstring);
    every refusal is answered with an error message and its close code, for this stream alone."""
    await websocket.accept()
    session = None
    try:
        options = stream_options(websocket.query_params, loaded)
        with hub.slot():
            try:
                session = await hub.run(StreamSession, loaded, options, settings.max_stream_seconds)
            except ConfigError as exc:
                raise StreamRefused(POLICY_VIOLATION, f"this checkpoint cannot stream: {exc}") from None
            await _converse(websocket, session, settings.stream_idle_seconds, hub)
        hub.count("completed", session.audio_ms)
    except StreamRefused as exc:
        if exc.code not in (TRY_AGAIN_LATER, GOING_AWAY):
            hub.count("refused", session.audio_ms if session else 0)
        await _close_with_error(websocket, exc.code, exc.detail)
    except WebSocketDisconnect:  # the client left before the final: nothing to answer
        hub.count("left", session.audio_ms if session else 0)
    except Exception as exc:  # a fault of the server, for this stream only
        log.exception("a stream failed after %s ms of audio", session.audio_ms if session else 0)
        hub.count("failures", session.audio_ms if session else 0)
        await _close_with_error(websocket, SERVER_ERROR, f"the server failed to decode this stream "
                                                         f"({type(exc).__name__}); the error was logged")


async def _converse(websocket: WebSocket, session: StreamSession, idle_seconds: float, hub: StreamHub) -> None:
    """Audio frames until the end event, a partial message whenever the transcript changes, then the final."""
    while True:
        try:
            message = await asyncio.wait_for(websocket.receive(), idle_seconds)
        except asyncio.TimeoutError:
            raise StreamRefused(POLICY_VIOLATION, f"no message for {idle_seconds:g} s; the stream was closed") from None
        if message["type"] == "websocket.disconnect":
            raise WebSocketDisconnect(message.get("code", NORMAL))
        if message.get("bytes") is not None:
            text = await hub.run(session.accept, message["bytes"])
            if text is not None:
                await websocket.send_json({"type": "partial", "text": text, "audio_ms": session.audio_ms})
        elif _is_end_event(message.get("text")):
            break
        else:
            raise StreamRefused(UNSUPPORTED_DATA, f"a text frame must be {json.dumps(END_EVENT)}, got "
                                                  f"{message.get('text', '')[:80]!r}")
    await websocket.send_json(await hub.run(session.finish))
    await websocket.close(NORMAL)


def _is_end_event(text: str | None) -> bool:
    try:
        return json.loads(text) == END_EVENT if text is not None else False
    except ValueError:
        return False


async def _close_with_error(websocket: WebSocket, code: int, detail: str) -> None:
    """Send {"type": "error", "detail"} and close with ``code``; nothing when the client is already gone."""
    try:
        await websocket.send_json({"type": "error", "detail": detail})
        await websocket.close(code)
    except (WebSocketDisconnect, RuntimeError):
        pass


def index_page() -> str:
    """The page served at / (serving/static/index.html): record the microphone or stream a file to /stream."""
    return resources.files(__package__).joinpath("static", "index.html").read_text(encoding="utf-8")
