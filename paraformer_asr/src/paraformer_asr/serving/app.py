"""The HTTP service: ``create_app(loaded_model, settings) -> FastAPI``.

    POST /transcribe   multipart form, audio (WAV, FLAC, OGG, ...) in field ``file``, optionally a hotword list in
                       field ``hotwords`` -> {"text", "duration_s", "rtf", "words"}
    GET  /health       model type, checkpoint, device, uptime, limits, batching statistics, failure counters
    GET  /docs         OpenAPI (Swagger) page; the schema itself is at /openapi.json
    WS   /stream       streaming recognition: 16-bit PCM frames in, JSON partial and final transcripts out
                       (serving/streams.py, its protocol and close codes there)
    GET  /             a page that streams the microphone or a file to /stream and shows the transcript

``words`` lists the recognised words with their CIF times, ``[{"word", "start_ms", "end_ms"}]`` (null for an
autoregressive-baseline checkpoint, which has no CIF). ``rtf`` is the request's processing time on the server (feature
extraction, waiting for its batch, the decode) divided by the audio's duration.

``hotwords`` (text, one phrase per line, ``phrase<TAB>weight`` for a weight of its own; decode/hotwords.py) biases this
request's search toward its phrases, in addition to the server's own list (``--hotwords``; a phrase in both takes the
request's weight); phrases without a weight get the server's ``--hotword-weight``. Requests with different lists are
decoded in separate batches.

Audio up to ``long_form.chunk_seconds`` goes through the micro-batcher; longer audio (up to ``max_audio_seconds``)
through the long-recording lane (serving/long_lane.py), decoded window by window from the uploaded file, so short
requests keep being batched and answered while a long one is decoded. Every refused request answers JSON
``{"detail": "<message>"}``: 400 unreadable audio (not an audio format soundfile reads, empty, damaged header, a WAV
cut short in its data chunk, no samples) or a bad ``hotwords`` field (larger than ``max_hotword_bytes``, more than
``max_hotwords`` phrases, a bad weight, characters the model's units cannot write: the message names the line),
413 upload larger than ``max_upload_bytes`` or audio longer than ``max_audio_seconds``, 422 no file in the form
field ``file``, 503 while the server shuts down or when ``max_long_recordings`` long recordings are already queued,
500 only for a fault of the server (its reason logged, the other requests unaffected).

Failure isolation: every upload is decoded and checked (readable, at least one sample, no NaN or Inf sample) before
it joins a micro-batch, so bad input is answered 400 on its own. A clip too short for the encoder (under ~70 ms)
is audio: it gets an empty transcript. If a batch's decode still fails, its requests are decoded one by one
(serving/batcher.py) and only the one at fault gets an error; /health counts these in ``failures``.
"""

from __future__ import annotations

import asyncio
import io
import logging
import time
from typing import BinaryIO
from contextlib import asynccontextmanager

import torch
from fastapi import FastAPI, File, Form, HTTPException, Request, UploadFile, WebSocket
from fastapi.concurrency import run_in_threadpool
from fastapi.exceptions import RequestValidationError
from fastapi.responses import HTMLResponse, JSONResponse
from pydantic import BaseModel

from paraformer_asr import __version__
from paraformer_asr.data.audio import open_audio, read_frames, to_mono
from paraformer_asr.decode.hotwords import HotwordTrie, merge_hotwords, parse_hotwords
from paraformer_asr.errors import CheckpointError, ConfigError, DataError
from paraformer_asr.inference import LoadedModel, features_from_waveform, model_device
from paraformer_asr.serving.batcher import BatcherClosed, GreedyTranscriber, MicroBatcher
from paraformer_asr.serving.long_lane import LaneFull, LongFormLane
from paraformer_asr.serving.settings import ServeSettings
from paraformer_asr.serving.streams import StreamHub, index_page, serve_stream, stream_defaults

UPLOAD_FIELD = "file"
UPLOAD_NAME = "uploaded file"  # how error messages name the upload
HOTWORDS_FIELD = "hotwords"
_DRAIN_FACTOR = 4  # an oversized body up to this many times the limit is read and dropped before answering 413

log = logging.getLogger(__name__)


class Word(BaseModel):
    word: str
    start_ms: int
    end_ms: int


class Transcription(BaseModel):
    text: str
    duration_s: float
    rtf: float
    words: list[Word] | None


class Health(BaseModel):
    status: str
    model_type: str
    checkpoint: str
    device: str
    uptime_s: float
    sample_rate: int
    limits: dict
    batching: dict
    long_form: dict
    streams: dict
    failures: dict


class ErrorBody(BaseModel):
    detail: str


def create_app(loaded_model: LoadedModel, settings: ServeSettings) -> FastAPI:
    """A FastAPI app serving ``loaded_model`` (an audio-trained checkpoint) within ``settings``' limits."""
    if loaded_model.cfg.data.kind != "manifest":
        raise CheckpointError(f"{loaded_model.path} was trained on '{loaded_model.cfg.data.kind}' features, not "
                              f"audio; the service needs a checkpoint trained with data.kind: manifest")
    device = model_device(loaded_model.model)
    # method, beam_size, lm, lm_weight and the rescoring options
    search = settings.decoding.search_arguments(loaded_model)
    batcher = MicroBatcher(GreedyTranscriber(loaded_model, device, search), settings.max_batch_size,
                           settings.max_wait_ms)
    lane = LongFormLane(loaded_model, device, settings.long_form, batcher, settings.long_yield_ms,
                        settings.max_long_recordings, search=search)
    streams = StreamHub(settings.max_streams, stream_defaults(loaded_model))
    started = time.monotonic()

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        batcher.start()
        lane.start()
        try:
            yield
        finally:
            await run_in_threadpool(lane.close)
            await run_in_threadpool(batcher.close)
            await run_in_threadpool(streams.close)

    app = FastAPI(title="paraformer_asr speech recognition", version=__version__, lifespan=lifespan,
                  description="Transcribe audio uploads with a Paraformer checkpoint; concurrent requests are "
                              "decoded together in dynamic micro-batches.")
    app.add_middleware(UploadSizeLimit, max_bytes=settings.max_upload_bytes)
    app.add_exception_handler(RequestValidationError, _missing_upload_answer)
    app.state.batcher = batcher
    app.state.long_form_lane = lane
    app.state.streams = streams

    errors = {code: {"model": ErrorBody} for code in (400, 413, 422, 500, 503)}

    @app.post("/transcribe", response_model=Transcription, responses=errors)
    async def transcribe(file: UploadFile = File(..., description="an audio file: WAV (any PCM width, float, "
                                                                  "A-law, mu-law), FLAC, OGG, MP3, ..."),
                         hotwords: str | None = Form(None, description="phrases to bias the search toward (names, "
                                                                       "terms), one a line, phrase<TAB>weight for a "
                                                                       "weight of its own; added to the server's "
                                                                       "list")):
        start = time.perf_counter()
        request_hotwords = None
        if hotwords is not None:
            request_hotwords = await run_in_threadpool(hotwords_from_field, hotwords, loaded_model, settings)
        upload = file.file  # a seekable file object (in memory, or spooled to disk when large)
        duration_s = await run_in_threadpool(upload_duration, upload, settings.max_audio_seconds)
        try:
            if duration_s > settings.long_form.chunk_seconds:
                future = lane.submit(upload, UPLOAD_NAME, request_hotwords)
            else:
                features, duration_s = await run_in_threadpool(features_from_upload, upload, loaded_model,
                                                               settings.max_audio_seconds)
                utterance = (features, duration_s) if request_hotwords is None else (features, duration_s,
                                                                                      request_hotwords)
                future = batcher.submit(utterance)
            recognition = await asyncio.wrap_future(future)
        except HTTPException:  # the upload's own 400 / 413
            raise
        except (BatcherClosed, LaneFull) as exc:
            raise HTTPException(status_code=503, detail=str(exc)) from None
        except DataError as exc:  # a long upload whose samples turn out unreadable
            raise HTTPException(status_code=400, detail=str(exc)) from None
        except Exception as exc:  # a fault of the server, never of the (validated) upload
            log.exception("decoding an upload of %.3f s failed", duration_s)
            raise HTTPException(status_code=500, detail=f"the server failed to decode this upload "
                                                        f"({type(exc).__name__}); the error was logged") from None
        return Transcription(text=recognition.text, duration_s=duration_s,
                             rtf=(time.perf_counter() - start) / duration_s, words=recognition.words)

    @app.get("/health", response_model=Health)
    def health() -> Health:
        batching, long_form, streaming = batcher.stats(), lane.stats(), streams.stats()
        failures = {"short_requests": batching["isolated_failures"], "split_batches": batching["split_batches"],
                    "long_recordings": long_form["failures"], "streams": streaming["failures"]}
        return Health(status="ok", model_type=loaded_model.cfg.model.type, checkpoint=str(loaded_model.path),
                      device=str(device), uptime_s=time.monotonic() - started,
                      sample_rate=loaded_model.cfg.data.sample_rate, limits=settings.to_dict(),
                      batching=batching, long_form=long_form, streams=streaming, failures=failures)

    @app.websocket("/stream")
    async def stream(websocket: WebSocket) -> None:
        await serve_stream(websocket, loaded_model, settings, streams)

    @app.get("/", response_class=HTMLResponse, include_in_schema=False)
    def page() -> HTMLResponse:
        return HTMLResponse(index_page())

    return app


def hotwords_from_field(text: str, loaded: LoadedModel, settings: ServeSettings) -> HotwordTrie | None:
    """A request's ``hotwords`` form field -> the trie of the server's list and the request's phrases over the model's
    units (decode/hotwords.py), or None when the field lists nothing (the server's list alone). HTTPException 400
    naming the problem: a field over ``settings.max_hotword_bytes`` bytes or ``settings.max_hotwords`` phrases, a bad
    weight (the line named), characters the model's units cannot write."""
    size = len(text.encode("utf-8"))
    if size > settings.max_hotword_bytes:
        raise HTTPException(status_code=400, detail=f"the {HOTWORDS_FIELD} field holds {size} bytes; the limit is "
                                                    f"{settings.max_hotword_bytes}")
    try:
        entries = parse_hotwords(text.splitlines(), settings.decoding.hotword_weight, f"the {HOTWORDS_FIELD} field")
        if len(entries) > settings.max_hotwords:
            raise ConfigError(f"the {HOTWORDS_FIELD} field lists {len(entries)} phrases; the limit is "
                              f"{settings.max_hotwords}")
        if not entries:
            return None
        merged = merge_hotwords(settings.decoding.hotwords or (), entries)
        return settings.decoding.hotword_trie(merged, loaded.tokenizer)
    except ConfigError as exc:
        raise HTTPException(status_code=400, detail=str(exc)) from None


def upload_duration(upload: BinaryIO, max_audio_seconds: float) -> float:
    """The duration (seconds) an uploaded file's header announces, nothing decoded. HTTPException 400 for
    unreadable audio, 413 for audio longer than ``max_audio_seconds``."""
    upload.seek(0)
    try:
        with open_audio(upload, UPLOAD_NAME) as handle:
            duration_s = handle.frames / handle.samplerate
    except DataError as exc:
        raise HTTPException(status_code=400, detail=str(exc)) from None
    if duration_s > max_audio_seconds:
        raise HTTPException(status_code=413, detail=f"audio is {duration_s:.2f} s long; the limit is "
                                                    f"{max_audio_seconds:g} s")
    upload.seek(0)
    return duration_s


def features_from_upload(data: bytes | BinaryIO, loaded: LoadedModel,
                         max_audio_seconds: float) -> tuple[torch.Tensor, float]:
    """Uploaded audio (bytes or a seekable file object; any format soundfile reads) -> (features [T, F] through
    the model's front end and normaliser, duration in seconds).

    Read once: the header gives the duration, which is checked before any sample is decoded. Raises
    HTTPException 400 for unreadable audio (the message names the 'uploaded file'), 413 for audio longer than
    ``max_audio_seconds``."""
    source = io.BytesIO(data) if isinstance(data, bytes) else data
    source.seek(0)
    try:
        with open_audio(source, UPLOAD_NAME) as handle:
            duration_s = handle.frames / handle.samplerate
            if duration_s > max_audio_seconds:
                raise HTTPException(status_code=413, detail=f"audio is {duration_s:.2f} s long; the limit is "
                                                            f"{max_audio_seconds:g} s")
            samples = read_frames(handle, UPLOAD_NAME)  # [C, N]
            sample_rate = handle.samplerate
    except DataError as exc:
        raise HTTPException(status_code=400, detail=str(exc)) from None
    waveform = to_mono(samples, sample_rate, loaded.cfg.data.sample_rate)  # [N]
    return features_from_waveform(waveform, loaded), duration_s


async def _missing_upload_answer(request: Request, exc: RequestValidationError) -> JSONResponse:
    problems = "; ".join(f"{'.'.join(str(part) for part in error['loc'])}: {error['msg']}" for error in exc.errors())
    return JSONResponse(status_code=422, content={
        "detail": f"send the audio file as multipart/form-data in the field '{UPLOAD_FIELD}' ({problems})"})


class UploadSizeLimit:
    """ASGI middleware: request bodies larger than ``max_bytes`` get 413 before the app sees them.

    The body is read here (counted as it arrives, never more than ``max_bytes`` kept) and handed on to the app.
    An oversized body up to ``_DRAIN_FACTOR * max_bytes`` is read to its end and dropped before answering, so
    that a client that sends its whole body before reading gets the 413 rather than a reset connection; a larger
    one is answered at once and the connection closed.
    """

    def __init__(self, app, max_bytes: int):
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = _content_length(scope)
        if declared is not None and declared > self.max_bytes:
            if declared <= _DRAIN_FACTOR * self.max_bytes:
                await _drain(receive, declared)
            await self._refuse(scope, receive, send, declared)
            return
        chunks: list[bytes] = []
        size = 0
        more_body = True
        while more_body:
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            chunk = message.get("body", b"")
            size += len(chunk)
            more_body = message.get("more_body", False)
            if size > self.max_bytes:
                if more_body:
                    size += await _drain(receive, _DRAIN_FACTOR * self.max_bytes - size)
                await self._refuse(scope, receive, send, size)
                return
            chunks.append(chunk)
        await self.app(scope, _replay(b"".join(chunks), receive), send)

    async def _refuse(self, scope, receive, send, size: int) -> None:
        detail = f"upload of {size} bytes is larger than the limit of {self.max_bytes} bytes"
        await JSONResponse(status_code=413, content={"detail": detail})(scope, receive, send)


def _content_length(scope) -> int | None:
    for name, value in scope.get("headers", []):
        if name == b"content-length":
            try:
                return int(value)
            except ValueError:
                return None
    return None


async def _drain(receive, budget: int) -> int:
    """Read and drop body chunks until the body ends or ``budget`` bytes were read; -> bytes read."""
    read = 0
    while read < budget:
        message = await receive()
        if message["type"] != "http.request":
            break
        read += len(message.get("body", b""))
        if not message.get("more_body", False):
            break
    return read


def _replay(body: bytes, receive):
    """An ASGI receive callable that gives the already-read body once, then defers to the real receive."""
    sent = False

    async def replayed_receive():
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return replayed_receive
