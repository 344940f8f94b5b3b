"""Failure isolation in the service: one bad upload never fails another, short clips are audio, and generated
uploads (asr_fuzz.py) of every kind get the promised answer while good ones keep their text.

One uvicorn server on loopback per module, serving a tiny untrained Paraformer (asr_helpers.untrained_audio_model):
its texts are arbitrary but fixed, which is all these tests need (each good upload's text is compared with the
text of the same bytes decoded alone, in process).
"""

import http.client
import json
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

pytest.importorskip("fastapi", reason="the ASR service needs the optional 'serve' extra (pip install -e .[serve])")
pytest.importorskip("uvicorn", reason="the ASR service needs the optional 'serve' extra (pip install -e .[serve])")
pytest.importorskip("python_multipart", reason="the ASR service needs the optional 'serve' extra")

from fastapi import HTTPException  # noqa: E402

from paraformer_asr.config import MIN_INPUT_FRAMES  # noqa: E402
from paraformer_asr.serving import app as app_module  # noqa: E402
from paraformer_asr.serving.app import create_app, features_from_upload  # noqa: E402
from paraformer_asr.serving.batcher import GreedyTranscriber  # noqa: E402
from paraformer_asr.serving.settings import ServeSettings  # noqa: E402
from paraformer_asr_tools.benchmarks.service_load import loopback_address, multipart_body, request_json  # noqa: E402

from asr_fuzz import FAST, SLOW, audio_upload, encode, signal  # noqa: E402
from asr_helpers import PackageLog, served, untrained_audio_model  # noqa: E402

pytestmark = pytest.mark.slow  # a live server per module: the full suite runs these, the fast loop does not

RATE = 16000
WAIT_S = 60  # socket timeout; never reached when things work
SETTINGS = ServeSettings(max_upload_bytes=2_000_000, max_audio_seconds=10.0, max_batch_size=8, max_wait_ms=10.0)
CASES = {"fast": 0, "slow": 0}  # generated uploads checked, per tier


@pytest.fixture(scope="module")
def loaded():
    return untrained_audio_model()


@pytest.fixture(scope="module")
def server(loaded):
    with served(create_app(loaded, SETTINGS), WAIT_S) as url:
        yield url


def post(url: str, data: bytes, filename: str = "audio.wav") -> tuple[int, dict]:
    body, content_type = multipart_body(data, filename=filename)
    connection = http.client.HTTPConnection(*loopback_address(url), timeout=WAIT_S)
    try:
        return request_json(connection, "POST", "/transcribe", body, content_type)
    finally:
        connection.close()


def health(url: str) -> dict:
    connection = http.client.HTTPConnection(*loopback_address(url), timeout=WAIT_S)
    try:
        status, answer = request_json(connection, "GET", "/health")
    finally:
        connection.close()
    assert status == 200
    return answer


def post_concurrently(url: str, uploads: list[tuple[bytes, str]]) -> list[tuple[int, dict]]:
    with ThreadPoolExecutor(len(uploads)) as pool:
        return list(pool.map(lambda upload: post(url, *upload), uploads))


def decoded_alone(loaded, data: bytes) -> tuple[int, str]:
    """What the service must answer for ``data`` decoded on its own, in process: (400, "") when the upload is
    refused, else (200, its text)."""
    try:
        features, duration_s = features_from_upload(data, loaded, SETTINGS.max_audio_seconds)
    except HTTPException as refused:
        assert refused.status_code == 400
        return 400, ""
    return 200, GreedyTranscriber(loaded, torch.device("cpu"))([(features, duration_s)])[0].text


def wav_bytes(num_samples: int, seed: int = 0) -> bytes:
    return encode(signal(num_samples, 1, RATE, seed), RATE, "WAV", "PCM_16")


# ----------------------------------------------------------------------------- the two findings, as regressions


def test_a_truncated_upload_among_64_concurrent_requests_fails_no_good_one(server, loaded):
    """64 concurrent requests, every fourth a WAV cut to 60 bytes (its header and 8 of its 16000 samples): every
    good request gets 200 and its own text; the cut ones a 400 naming the bytes the header declares and those
    present (read as if whole, they used to get 200 with an empty text)."""
    goods = [wav_bytes(RATE // 4 + 800 * index, seed=index) for index in range(4)]
    whole = wav_bytes(RATE)
    cut, data_start = whole[:60], whole.index(b"data") + 8
    uploads = [cut if index % 4 == 3 else goods[index % 4] for index in range(64)]
    expected = {data: decoded_alone(loaded, data)[1] for data in goods}
    answers = post_concurrently(server, [(data, "audio.wav") for data in uploads])
    assert [status for status, _ in answers] == [400 if data == cut else 200 for data in uploads], answers
    assert [answer["text"] for (_, answer), data in zip(answers, uploads) if data != cut] == [
        expected[data] for data in uploads if data != cut]
    reason = (f"uploaded file: truncated WAV file: its data chunk declares {2 * RATE} bytes but only "
              f"{60 - data_start} are present")
    assert all(answer["detail"].startswith(reason) for (_, answer), data in zip(answers, uploads) if data == cut)
    assert decoded_alone(loaded, cut)[0] == 400 and health(server)["failures"]["short_requests"] == 0


def test_clips_too_short_for_the_subsampling_get_an_empty_text_and_an_empty_file_a_400(server, loaded):
    """A 30 ms clip (fewer frames than the 4x subsampling needs) is audio with no word in it."""
    features, _ = features_from_upload(wav_bytes(480), loaded, SETTINGS.max_audio_seconds)
    assert features.shape[0] < MIN_INPUT_FRAMES[4]  # the case the encoder alone would refuse
    for num_samples in (1, 5, 480, 1100):
        status, answer = post(server, wav_bytes(num_samples))
        assert status == 200 and answer["text"] == "" and answer["words"] == [], (num_samples, answer)
    status, answer = post(server, wav_bytes(0))
    assert status == 400 and answer["detail"] == "uploaded file: file contains no audio samples"


def test_nan_and_inf_samples_are_refused_with_400(server):
    samples = signal(RATE // 4, 1, RATE, 1)
    samples[100, 0] = np.nan
    status, answer = post(server, encode(samples, RATE, "WAV", "FLOAT"))
    assert status == 400 and "NaN or Inf" in answer["detail"]


# ----------------------------------------------------------------------------- a server fault stays with its request


class FailsOnDuration(GreedyTranscriber):
    """The real transcriber, except that a batch holding an utterance of POISON_S seconds raises (a stand-in for a
    server fault that only one request triggers)."""

    POISON_S = 0.3

    def __call__(self, utterances):
        if any(abs(duration_s - self.POISON_S) < 1e-9 for _, duration_s in utterances):
            raise RuntimeError("the decoder failed on this utterance")
        return super().__call__(utterances)


def test_a_failing_batch_is_decoded_one_by_one_and_only_the_faulty_request_gets_500(loaded, monkeypatch):
    monkeypatch.setattr(app_module, "GreedyTranscriber", FailsOnDuration)
    poison = wav_bytes(round(FailsOnDuration.POISON_S * RATE))
    goods = [wav_bytes(RATE // 2 + 1600 * index, seed=index) for index in range(7)]
    expected = [decoded_alone(loaded, data)[1] for data in goods]
    one_batch = replace(SETTINGS, max_wait_ms=5000.0)  # the batch fills up (8 requests) long before the deadline
    with PackageLog() as warnings, served(create_app(loaded, one_batch), WAIT_S) as url:
        before = health(url)
        assert before["failures"] == {"short_requests": 0, "split_batches": 0, "long_recordings": 0, "streams": 0}
        answers = post_concurrently(url, [(data, "audio.wav") for data in goods[:4] + [poison] + goods[4:]])
        after = health(url)
    statuses = [status for status, _ in answers]
    assert statuses == [200] * 4 + [500] + [200] * 3, answers
    assert [answer["text"] for _, answer in answers[:4] + answers[5:]] == expected
    assert answers[4][1]["detail"] == "the server failed to decode this upload (RuntimeError); the error was logged"
    assert after["failures"] == {"short_requests": 1, "split_batches": 1, "long_recordings": 0, "streams": 0}
    assert after["batching"]["batch_size_counts"] == {"1": 7}  # the failed batch of 8 is not counted as decoded
    assert any("a batch of 8 requests failed" in message for message in warnings.messages), warnings.messages
    assert any("the decoder failed on this utterance" in message for message in warnings.messages)


def test_the_long_recording_lane_answers_bad_samples_400_and_a_fault_500_alone(loaded, monkeypatch):
    """Uploads longer than chunk_seconds (1 s here) go to the long-recording lane: NaN samples past the header are
    the client's 400 (not a failure); a decode fault is that recording's 500, counted; short requests go on."""
    from paraformer_asr.decode.longform import LongFormOptions
    from paraformer_asr.serving import long_lane

    def fails_on_marked_uploads(loaded_model, source, *args, **kwargs):
        source.seek(-len(b"fault"), 2)
        marked = source.read() == b"fault"  # bytes after the WAV's data chunk, which readers ignore
        source.seek(0)
        if marked:
            raise RuntimeError("the window decoder failed")
        return real_transcribe_long(loaded_model, source, *args, **kwargs)

    real_transcribe_long = long_lane.transcribe_long
    monkeypatch.setattr(long_lane, "transcribe_long", fails_on_marked_uploads)
    with_nan = signal(2 * RATE, 1, RATE, 2)
    with_nan[int(1.5 * RATE), 0] = np.nan
    short = wav_bytes(RATE // 2)
    settings_ = replace(SETTINGS, long_form=LongFormOptions(chunk_seconds=1.0, overlap_seconds=0.0))
    with served(create_app(loaded, settings_), WAIT_S) as url:
        answers = post_concurrently(url, [(encode(with_nan, RATE, "WAV", "FLOAT"), "long.wav"), (short, "a.wav"),
                                          (wav_bytes(2 * RATE) + b"fault", "long.wav"), (wav_bytes(2 * RATE), "b.wav")])
        after = health(url)
    assert [status for status, _ in answers] == [400, 200, 500, 200], answers
    assert "NaN or Inf" in answers[0][1]["detail"]
    assert answers[1][1]["text"] == decoded_alone(loaded, short)[1]
    assert after["failures"] == {"short_requests": 0, "split_batches": 0, "long_recordings": 1, "streams": 0}
    assert after["long_form"]["recordings"] == 1


# ----------------------------------------------------------------------------- generated uploads


def check_concurrent_uploads(url: str, loaded, uploads, tier: str) -> None:
    """Send ``uploads`` at once; each gets what it gets alone, every bad one a 400 with a message."""
    answers = post_concurrently(url, [(upload.data, upload.filename) for upload in uploads])
    for upload, (status, answer) in zip(uploads, answers):
        alone_status, alone_text = decoded_alone(loaded, upload.data)
        assert alone_status == (200 if upload.kind == "good" else 400), upload
        if upload.kind == "good":
            assert status == 200 and answer["text"] == alone_text, (upload, answer)
        else:  # empty, garbage, non-finite or truncated (a WAV cut in its header or its data chunk)
            assert status == 400, (upload, answer)
        if status == 400:
            assert answer["detail"].startswith("uploaded file: "), answer
    CASES[tier] += len(uploads)


@settings(FAST, max_examples=9)
@given(uploads=st.lists(audio_upload(max_seconds=0.5), min_size=6, max_size=7))
def test_generated_uploads_mixed_concurrently(server, loaded, uploads):
    check_concurrent_uploads(server, loaded, uploads, "fast")


@settings(SLOW, max_examples=75)
@given(uploads=st.lists(audio_upload(max_seconds=3.0), min_size=7, max_size=10))
def test_generated_uploads_mixed_concurrently_many(server, loaded, uploads):
    check_concurrent_uploads(server, loaded, uploads, "slow")


def test_the_generated_cases_were_counted_and_the_server_is_up(server, request):
    """Runs after the fuzz tests of the module: their case counts (>= 50 fast, >= 500 slow) and a live server."""
    ran = {item.name for item in request.session.items}
    if "test_generated_uploads_mixed_concurrently" in ran:
        assert CASES["fast"] >= 50, CASES
    if "test_generated_uploads_mixed_concurrently_many" in ran:
        assert CASES["slow"] >= 500, CASES
    answer = health(server)
    assert answer["status"] == "ok" and answer["failures"]["short_requests"] == 0


# ----------------------------------------------------------------------------- the soak, small


def test_a_small_soak_loses_no_good_request_and_refuses_every_bad_one(server, tmp_path, capsys):
    """scripts/load_test.py --soak against the module's server (this process: its memory is what is sampled)."""
    import os

    from asr_helpers import load_script
    from paraformer_asr.cli import run_main

    audio = []
    for index in range(4):
        (tmp_path / f"g{index}.wav").write_bytes(wav_bytes(RATE // 3 + 1000 * index, seed=index))
        audio.append(str(tmp_path / f"g{index}.wav"))
    code = run_main(load_script("load_test").main,
                    ["--soak", "--server-pid", str(os.getpid()), "--url", server, "--audio", *audio, "--requests",
                     "300", "--concurrency", "8", "--bad-every", "5", "--markdown", str(tmp_path / "soak.md")])
    report = json.loads(capsys.readouterr().out)
    assert report["answered"] == 300 and report["good_requests"] == 240
    assert report["good_ok"] == 240 and report["good_lost"] == 0 and report["bad_not_refused"] == 0
    assert sum(report["outcomes"].values()) == 300 and len(report["outcomes"]) == 6  # good + five bad kinds
    assert report["server_up"] and report["rss_mib"]["samples"] >= 2
    assert code == (0 if report["rss_growth_after_warmup"] < 0.10 else 1)
    assert "| 300 | 8 | 240 | 0 | 60 | 0 |" in (tmp_path / "soak.md").read_text()
