"""The service's long-recording lane: short requests are answered while a long recording is decoded, the lane
yields to the micro-batcher, its queue is bounded, shutdown ends long jobs; the long-upload load scenario."""

import http.client
import json
import threading
import time
from concurrent.futures import Future

import pytest
import torch

pytest.importorskip("fastapi", reason="the ASR service needs the optional 'serve' extra (pip install -e .[serve])")
pytest.importorskip("uvicorn", reason="the ASR service needs the optional 'serve' extra (pip install -e .[serve])")
pytest.importorskip("python_multipart", reason="the ASR service needs the optional 'serve' extra")

import paraformer_asr.serving.long_lane as long_lane_module  # noqa: E402
from paraformer_asr.data.audio import write_audio  # noqa: E402
from paraformer_asr.decode.longform import LongFormOptions, LongTranscript  # noqa: E402
from paraformer_asr.inference import load_trained_model  # noqa: E402
from paraformer_asr.serving.app import create_app  # noqa: E402
from paraformer_asr.serving.batcher import BatcherClosed, MicroBatcher, Recognition  # noqa: E402
from paraformer_asr.serving.long_lane import LaneFull, LongFormLane  # noqa: E402
from paraformer_asr.serving.settings import ServeSettings  # noqa: E402
from paraformer_asr_tools.benchmarks.service_load import (loopback_address, multipart_body, request_json,  # noqa: E402
                                                          run_long_upload_scenario)

from asr_helpers import SPEECH_RATE, served, speech_like  # noqa: E402

pytestmark = pytest.mark.slow  # a live server per module: the full suite runs these, the fast loop does not

WAIT_S = 60  # bound on every wait; never reached when things work


class GatedTranscriber:
    """A micro-batcher transcriber that answers each utterance with its payload, after ``gate`` opens."""

    def __init__(self):
        self.gate = threading.Event()
        self.gate.set()

    def __call__(self, payloads):
        assert self.gate.wait(WAIT_S)
        return [Recognition(str(p), None) for p in payloads]


def started_batcher(transcriber) -> MicroBatcher:
    batcher = MicroBatcher(transcriber, max_batch_size=4, max_wait_ms=0)
    batcher.start()
    return batcher


def test_wait_idle_returns_once_no_request_is_queued_or_decoded():
    transcriber = GatedTranscriber()
    batcher = started_batcher(transcriber)
    try:
        assert batcher.wait_idle(0.0)
        transcriber.gate.clear()
        future = batcher.submit("a")
        assert not batcher.wait_idle(0.05)  # being decoded
        transcriber.gate.set()
        assert batcher.wait_idle(WAIT_S) and future.result(WAIT_S).text == "a"
    finally:
        batcher.close()


def blocking_long_form(monkeypatch, pauses: int = 3):
    """Replace the lane's transcribe_long by one that calls pause() ``pauses`` times, stopping at the first until
    ``release`` is set. -> (entered, release) events."""
    entered, release = threading.Event(), threading.Event()

    def fake_transcribe_long(loaded, source, device, options, name=None, pause=None, **kwargs):
        for index in range(pauses):
            pause()
            if index == 0:
                entered.set()
                assert release.wait(WAIT_S)
        return LongTranscript(f"long {source}", [], [], 60.0, pauses, 0.1, 0.05)

    monkeypatch.setattr(long_lane_module, "transcribe_long", fake_transcribe_long)
    return entered, release


def test_short_requests_are_answered_while_a_long_recording_is_decoded(monkeypatch):
    entered, release = blocking_long_form(monkeypatch)
    batcher = started_batcher(GatedTranscriber())
    lane = LongFormLane(None, torch.device("cpu"), LongFormOptions(), batcher, yield_ms=50, max_queued=2)
    lane.start()
    try:
        long_future = lane.submit("recording", "upload")
        assert entered.wait(WAIT_S)
        shorts = [batcher.submit(f"short{i}") for i in range(5)]
        assert [f.result(WAIT_S).text for f in shorts] == [f"short{i}" for i in range(5)]
        assert not long_future.done() and lane.stats()["queued_or_running"] == 1
        release.set()
        assert long_future.result(WAIT_S).text == "long recording"
        stats = lane.stats()
        assert stats["recordings"] == 1 and stats["windows"] == 3 and stats["queued_or_running"] == 0
    finally:
        release.set()
        lane.close()
        batcher.close()


def test_the_lane_waits_for_busy_short_requests_at_most_yield_ms_per_window_batch(monkeypatch):
    monkeypatch.setattr(long_lane_module, "transcribe_long",
                        lambda *a, pause=None, **k: [pause() for _ in range(3)] and
                        LongTranscript("", [], [], 1.0, 3, 0.0, 0.0))
    transcriber = GatedTranscriber()
    batcher = started_batcher(transcriber)
    lane = LongFormLane(None, torch.device("cpu"), LongFormOptions(), batcher, yield_ms=100, max_queued=1)
    lane.start()
    try:
        transcriber.gate.clear()  # a short request stays in decoding: the batcher is busy throughout
        short = batcher.submit("s")
        started = time.perf_counter()
        lane.submit("r", "upload").result(WAIT_S)
        waited = time.perf_counter() - started
        assert 0.3 <= waited < 5.0  # three window batches, each after at most 100 ms of yielding
        assert lane.stats()["yield_seconds"] >= 0.3
        transcriber.gate.set()
        assert short.result(WAIT_S).text == "s"
    finally:
        transcriber.gate.set()
        lane.close()
        batcher.close()


def test_the_long_queue_is_bounded_and_shutdown_ends_long_jobs(monkeypatch):
    entered, release = blocking_long_form(monkeypatch)
    batcher = started_batcher(GatedTranscriber())
    lane = LongFormLane(None, torch.device("cpu"), LongFormOptions(), batcher, yield_ms=0, max_queued=2)
    with pytest.raises(BatcherClosed):
        lane.submit("r", "upload")  # not started
    lane.start()
    running = lane.submit("a", "upload")
    assert entered.wait(WAIT_S)
    queued = lane.submit("b", "upload")
    with pytest.raises(LaneFull, match="the limit is 2"):
        lane.submit("c", "upload")
    closer = threading.Thread(target=lane.close)
    closer.start()
    release.set()
    closer.join(WAIT_S)
    with pytest.raises(BatcherClosed):
        running.result(WAIT_S)  # ended at its next window batch
    with pytest.raises(BatcherClosed):
        queued.result(WAIT_S)
    with pytest.raises(BatcherClosed):
        lane.submit("d", "upload")
    batcher.close()


def test_lowering_the_lane_thread_priority_changes_only_that_thread():
    import os

    if not hasattr(os, "setpriority"):
        pytest.skip("no per-thread priorities on this platform")
    result = {}

    def lowered():
        result["done"] = long_lane_module.lower_thread_priority(5)
        result["nice"] = os.getpriority(os.PRIO_PROCESS, threading.get_native_id())

    before = os.getpriority(os.PRIO_PROCESS, threading.get_native_id())
    thread = threading.Thread(target=lowered)
    thread.start()
    thread.join(WAIT_S)
    assert result["done"] and result["nice"] == min(19, before + 5)
    assert os.getpriority(os.PRIO_PROCESS, threading.get_native_id()) == before
    assert not long_lane_module.lower_thread_priority(0)


# ---------------------------------------------------------------- over HTTP, with a real (tiny) model


@pytest.fixture(scope="module")
def long_server(tone_checkpoint):
    """The app with long recordings from 2 s on (chunk_seconds), up to 60 s; yields (base URL, app)."""
    loaded = load_trained_model(tone_checkpoint, torch.device("cpu"))
    settings = ServeSettings(max_upload_bytes=4_000_000, max_audio_seconds=60.0, max_batch_size=4, max_wait_ms=2.0,
                             long_form=LongFormOptions(chunk_seconds=2.0, overlap_seconds=0.4, batch_windows=2),
                             long_yield_ms=20.0, max_long_recordings=2)
    app = create_app(loaded, settings)
    with served(app, WAIT_S) as url:
        yield url, app


def wav_bytes(tmp_path, seconds: float, seed: int) -> bytes:
    path = tmp_path / f"{seconds}_{seed}.wav"
    write_audio(path, speech_like(seconds, seed), SPEECH_RATE)
    return path.read_bytes()


def post(url: str, data: bytes, timeout_s: float = WAIT_S) -> tuple[int, dict]:
    body, content_type = multipart_body(data)
    connection = http.client.HTTPConnection(*loopback_address(url), timeout=timeout_s)
    try:
        return request_json(connection, "POST", "/transcribe", body, content_type)
    finally:
        connection.close()


def test_a_long_upload_is_decoded_in_its_lane_while_a_short_one_is_answered(long_server, tmp_path):
    url, app = long_server
    lane = app.state.long_form_lane
    entered, release = threading.Event(), threading.Event()
    original = lane._yield_to_short_requests

    def held_pause():  # hold the long recording inside its decode until the short request is answered
        entered.set()
        assert release.wait(WAIT_S)
        original()

    lane._yield_to_short_requests = held_pause
    long_answer: Future = Future()
    threading.Thread(target=lambda: long_answer.set_result(post(url, wav_bytes(tmp_path, 12.0, 1))),
                     daemon=True).start()
    try:
        assert entered.wait(WAIT_S)
        status, short = post(url, wav_bytes(tmp_path, 1.5, 2))
        assert status == 200 and short["duration_s"] == pytest.approx(1.5)
        assert not long_answer.done()
    finally:
        release.set()
        lane._yield_to_short_requests = original
    status, long = long_answer.result(WAIT_S)
    assert status == 200 and long["duration_s"] == pytest.approx(12.0) and long["rtf"] > 0
    times = [t for word in long["words"] for t in (word["start_ms"], word["end_ms"])]
    assert times == sorted(times) and all(0 <= t <= 12000 for t in times)
    connection = http.client.HTTPConnection(*loopback_address(url), timeout=WAIT_S)
    status, health = request_json(connection, "GET", "/health")
    connection.close()
    assert health["long_form"]["recordings"] >= 1 and health["limits"]["long_form"]["chunk_seconds"] == 2.0


def test_long_uploads_over_the_limit_are_refused_before_decoding(long_server, tmp_path):
    url, _ = long_server
    status, answer = post(url, wav_bytes(tmp_path, 61.0, 3))
    assert status == 413 and "the limit is 60 s" in answer["detail"]


def test_the_long_upload_scenario_reports_both_phases(long_server, tmp_path):
    url, _ = long_server
    shorts = [wav_bytes(tmp_path, 1.2, seed) for seed in range(3)]
    report = run_long_upload_scenario(url, shorts, wav_bytes(tmp_path, 30.0, 9), num_requests=20, concurrency=2,
                                      max_seconds=60, timeout_s=30)
    assert report["idle"]["ok"] == 20 and report["idle"]["errors"] == 0
    assert report["long_request"]["status"] == 200 and report["long_request"]["duration_s"] == pytest.approx(30.0)
    assert report["during_long"]["errors"] == 0 and report["long_request"]["lane"]["recordings"] == 1
    assert report["long_request"]["lane"]["audio_seconds"] == pytest.approx(30.0, abs=0.01)  # this test's only
    if report["during_long"]["ok"]:
        assert report["p95_ratio"] > 0
    json.dumps(report)  # plain data
