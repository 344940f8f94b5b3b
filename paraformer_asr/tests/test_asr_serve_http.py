"""The speech-recognition service end to end: a real uvicorn server on loopback, a real HTTP client.

The checkpoint is a tiny Paraformer trained for a few epochs (through the package's own loop and checkpoint
writer) on synthetic digit 'speech': one tone per digit, written with write_audio, listed in a JSON Lines manifest.
"""

import http.client
import io
import json
import math
import signal
import socket
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path

import numpy
import pytest
import soundfile
import torch

pytest.importorskip("fastapi", reason="the ASR service needs the optional 'serve' extra (pip install -e .[serve])")
pytest.importorskip("uvicorn", reason="the ASR service needs the optional 'serve' extra (pip install -e .[serve])")
pytest.importorskip("python_multipart", reason="the ASR service needs the optional 'serve' extra")

from paraformer_asr.cli import run_main  # noqa: E402
from paraformer_asr.config import config_from_dict  # noqa: E402
from paraformer_asr.data.audio import write_audio  # noqa: E402
from paraformer_asr.errors import CheckpointError  # noqa: E402
from paraformer_asr.inference import features_from_file, load_trained_model  # noqa: E402
from paraformer_asr.serving.app import create_app  # noqa: E402
from paraformer_asr.serving.batcher import GreedyTranscriber  # noqa: E402
from paraformer_asr.serving.settings import ServeSettings  # noqa: E402
from paraformer_asr.training.launch import train  # noqa: E402
from paraformer_asr_tools.benchmarks.service_load import loopback_address, multipart_body, request_json  # noqa: E402

PROJECT = Path(__file__).resolve().parents[1]
RATE = 16000
DIGIT_SECONDS, GAP_SECONDS = 0.12, 0.03
TEXTS = ["12", "345", "6789", "101", "2468", "13579", "80", "9"]
MAX_AUDIO_SECONDS = 2.0
MAX_UPLOAD_BYTES = 100_000
WAIT_S = 60  # bound on waiting for a server to come up / go down; never reached when things work

from asr_helpers import load_script, served, tiny_audio_config

pytestmark = pytest.mark.slow  # a live server per module: the full suite runs these, the fast loop does not


load_test = load_script("load_test")


def digit_speech(text: str, seed: int) -> torch.Tensor:
    """One tone per digit (300 + 150 * digit Hz) with a short gap after each, plus light noise. -> samples [N]"""
    generator = torch.Generator().manual_seed(seed)
    t = torch.arange(int(DIGIT_SECONDS * RATE)) / RATE
    parts = []
    for char in text:
        tone = 0.4 * torch.sin(2 * math.pi * (300 + 150 * int(char)) * t)
        parts += [tone + 0.01 * torch.randn(t.shape[0], generator=generator), torch.zeros(int(GAP_SECONDS * RATE))]
    return torch.cat(parts)


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    folder = tmp_path_factory.mktemp("serve_corpus")
    lines = []
    for index, text in enumerate(TEXTS):
        write_audio(folder / f"utt{index}.wav", digit_speech(text, index), RATE)
        lines.append(json.dumps({"audio": f"utt{index}.wav", "text": text}))
    (folder / "train.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return folder


@pytest.fixture(scope="module")
def checkpoint(corpus):
    cfg = config_from_dict(tiny_audio_config(corpus / "train.jsonl", corpus / "runs", "serve", epochs=3))
    return train(cfg) / "checkpoints" / "last.pt"


@pytest.fixture(scope="module")
def loaded(checkpoint):
    return load_trained_model(checkpoint, torch.device("cpu"))


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.fixture(scope="module")
def server(loaded):
    """The app under uvicorn on 127.0.0.1 in a background thread; yields its base URL."""
    settings = ServeSettings(max_upload_bytes=MAX_UPLOAD_BYTES, max_audio_seconds=MAX_AUDIO_SECONDS,
                             max_batch_size=8, max_wait_ms=20.0)
    with served(create_app(loaded, settings), WAIT_S) as url:
        yield url


def connect(url: str) -> http.client.HTTPConnection:
    return http.client.HTTPConnection(*loopback_address(url), timeout=WAIT_S)


def get(url: str, path: str) -> tuple[int, dict]:
    connection = connect(url)
    try:
        return request_json(connection, "GET", path)
    finally:
        connection.close()


def upload(url: str, data: bytes, field: str = "file") -> tuple[int, dict]:
    body, content_type = multipart_body(data, field=field)
    connection = connect(url)
    try:
        return request_json(connection, "POST", "/transcribe", body, content_type)
    finally:
        connection.close()


def audio_bytes(tmp_path, samples: torch.Tensor, name: str = "x.wav") -> bytes:
    write_audio(tmp_path / name, samples, RATE)
    return (tmp_path / name).read_bytes()


def test_health_reports_model_checkpoint_device_and_limits(server, checkpoint):
    status, health = get(server, "/health")
    assert status == 200
    assert health["status"] == "ok" and health["model_type"] == "paraformer" and health["device"] == "cpu"
    assert health["checkpoint"] == str(checkpoint) and health["uptime_s"] >= 0
    assert health["limits"]["max_upload_bytes"] == MAX_UPLOAD_BYTES
    assert health["limits"]["max_audio_seconds"] == MAX_AUDIO_SECONDS
    assert {"batches", "requests", "max_batch_size_seen", "batch_size_counts"} <= set(health["batching"])


def test_openapi_docs_are_served(server):
    connection = connect(server)
    try:
        connection.request("GET", "/docs")
        response = connection.getresponse()
        assert response.status == 200 and b"swagger" in response.read().lower()
    finally:
        connection.close()
    status, schema = get(server, "/openapi.json")
    assert status == 200 and {"/transcribe", "/health"} <= set(schema["paths"])


def test_transcribe_returns_text_duration_and_rtf(server, corpus, loaded):
    path = corpus / "utt5.wav"
    status, answer = upload(server, path.read_bytes())
    assert status == 200, answer
    assert set(answer) == {"text", "duration_s", "rtf", "words"}
    assert answer["duration_s"] == pytest.approx(len(TEXTS[5]) * (DIGIT_SECONDS + GAP_SECONDS), abs=1e-6)
    assert answer["rtf"] > 0
    features, duration_s = features_from_file(path, loaded)
    assert answer["text"] == GreedyTranscriber(loaded, torch.device("cpu"))([(features, duration_s)])[0].text
    assert [word["word"] for word in answer["words"]] == answer["text"].split()
    times = [t for word in answer["words"] for t in (word["start_ms"], word["end_ms"])]
    assert times == sorted(times) and all(0 <= t <= 1000 * answer["duration_s"] for t in times)


def test_flac_and_ogg_uploads_are_transcribed_like_the_wav(server, corpus, tmp_path):
    from paraformer_asr.data.audio import read_audio

    samples, _ = read_audio(corpus / "utt2.wav")
    _, from_wav = upload(server, (corpus / "utt2.wav").read_bytes())
    status, from_flac = upload(server, audio_bytes(tmp_path, samples, "utt2.flac"))
    assert status == 200 and from_flac == {**from_wav, "rtf": from_flac["rtf"]}
    status, from_ogg = upload(server, audio_bytes(tmp_path, samples, "utt2.ogg"))
    assert status == 200 and from_ogg["duration_s"] == pytest.approx(from_wav["duration_s"], abs=0.01)


def test_the_duration_limit_is_checked_before_decoding(loaded, monkeypatch):
    from fastapi import HTTPException

    from paraformer_asr.serving import app as app_module

    decoded = []
    monkeypatch.setattr(app_module, "read_frames", lambda *args: decoded.append(args))
    long_audio = io.BytesIO()
    soundfile.write(long_audio, numpy.zeros(int(3 * RATE), dtype=numpy.int16), RATE, format="WAV")
    with pytest.raises(HTTPException) as refused:
        app_module.features_from_upload(long_audio.getvalue(), loaded, max_audio_seconds=2.0)
    assert refused.value.status_code == 413 and decoded == []


def test_batched_decoding_matches_one_utterance_at_a_time(corpus, loaded):
    transcriber = GreedyTranscriber(loaded, torch.device("cpu"))
    features = [features_from_file(corpus / f"utt{i}.wav", loaded) for i in range(len(TEXTS))]
    single = [transcriber([f])[0] for f in features]  # features: (features [T, F], duration_s) pairs
    assert len({r.text for r in single}) >= 3, f"the test model should tell the utterances apart, got {single}"
    assert transcriber(features) == single  # texts and word times
    assert transcriber(features[::-1]) == single[::-1]


def truncated_header(tmp_path) -> bytes:
    return audio_bytes(tmp_path, digit_speech("123", 0))[:30]


def truncated_data(tmp_path) -> bytes:
    whole = audio_bytes(tmp_path, digit_speech("123", 0))
    return whole[:len(whole) // 2]  # cut in the middle of its samples


def no_samples(tmp_path) -> bytes:
    return audio_bytes(tmp_path, torch.zeros(0))


def too_long_flac(tmp_path) -> bytes:
    return audio_bytes(tmp_path, torch.zeros(int((MAX_AUDIO_SECONDS + 0.5) * RATE)), "long.flac")


@pytest.mark.parametrize("make_body, status, message", [
    (lambda tmp: b"this is plain text, not audio", 400, "uploaded file: not a readable audio file"),
    (lambda tmp: b"", 400, "uploaded file: file is empty"),
    (truncated_header, 400, "uploaded file: not a readable audio file"),
    (truncated_data, 400, "uploaded file: truncated WAV file: its data chunk declares"),
    (no_samples, 400, "uploaded file: file contains no audio samples"),
    (too_long_flac, 413, f"the limit is {MAX_AUDIO_SECONDS:g} s"),
    (lambda tmp: bytes(MAX_UPLOAD_BYTES + 1), 413, f"larger than the limit of {MAX_UPLOAD_BYTES} bytes"),
], ids=["not-audio", "empty", "truncated-header", "truncated-data", "no-samples", "too-long", "too-large"])
def test_bad_uploads_get_a_4xx_json_error_and_the_server_keeps_serving(server, corpus, tmp_path, make_body, status,
                                                                       message):
    answer_status, answer = upload(server, make_body(tmp_path))
    assert answer_status == status and message in answer["detail"]
    assert "upload_" not in answer["detail"], "the server's temporary path must not leak into messages"
    good_status, good = upload(server, (corpus / "utt0.wav").read_bytes())
    assert good_status == 200 and good["duration_s"] > 0


def test_too_large_chunked_upload_without_length_is_refused(server):
    body, content_type = multipart_body(bytes(MAX_UPLOAD_BYTES + 1))
    connection = connect(server)
    try:
        chunks = (body[i:i + 16_384] for i in range(0, len(body), 16_384))
        connection.request("POST", "/transcribe", body=chunks, encode_chunked=True,
                           headers={"Content-Type": content_type, "Transfer-Encoding": "chunked"})
        response = connection.getresponse()
        assert response.status == 413 and "larger than the limit" in json.loads(response.read())["detail"]
    finally:
        connection.close()


@pytest.mark.parametrize("request_body", ["wrong-field", "no-file", "no-body"])
def test_missing_file_field_gets_422_json(server, corpus, request_body):
    connection = connect(server)
    try:
        if request_body == "wrong-field":
            body, content_type = multipart_body((corpus / "utt0.wav").read_bytes(), field="audio")
        elif request_body == "no-file":
            body, content_type = b"name=value", "application/x-www-form-urlencoded"
        else:
            body, content_type = None, None
        status, answer = request_json(connection, "POST", "/transcribe", body, content_type)
    finally:
        connection.close()
    assert status == 422 and "field 'file'" in answer["detail"]
    assert get(server, "/health")[0] == 200


def test_concurrent_requests_are_batched_and_each_gets_its_own_answer(server, corpus):
    payloads = [(corpus / f"utt{i}.wav").read_bytes() for i in range(len(TEXTS))]
    alone = [upload(server, data)[1]["text"] for data in payloads]  # one at a time: batches of one
    before = get(server, "/health")[1]["batching"]
    rounds = 2
    start_together = threading.Barrier(len(payloads))

    def client(index: int) -> list[str]:
        texts = []
        for _ in range(rounds):
            start_together.wait(WAIT_S)
            status, answer = upload(server, payloads[index])
            assert status == 200, answer
            texts.append(answer["text"])
        return texts

    with ThreadPoolExecutor(max_workers=len(payloads)) as pool:
        answers = list(pool.map(client, range(len(payloads))))
    assert answers == [[text] * rounds for text in alone]
    after = get(server, "/health")[1]["batching"]
    assert after["requests"] - before["requests"] == rounds * len(payloads)
    assert after["batches"] - before["batches"] < rounds * len(payloads), "no request shared a batch"
    assert 1 < after["max_batch_size_seen"] <= 8


def test_bounded_load_test_has_no_errors(server, corpus, tmp_path, capsys):
    audio = [str(corpus / f"utt{i}.wav") for i in range(len(TEXTS))]
    out, table = tmp_path / "load.json", tmp_path / "load.md"
    code = run_main(load_test.main, ["--url", server, "--audio", *audio, "--requests", "100", "--concurrency", "8",
                                     "--max-seconds", "120", "--out", str(out), "--markdown", str(table)])
    report = json.loads(out.read_text())
    assert code == 0, report["error_samples"]
    assert report["ok"] == 100 and report["errors"] == 0 and report["not_sent"] == 0
    latency = report["latency_ms"]
    assert 0 < latency["p50"] <= latency["p95"] <= latency["p99"] <= latency["max"]
    assert report["requests_per_s"] > 0 and report["server_batching"]["requests"] == 100
    rows = table.read_text().strip().splitlines()
    assert len(rows) == 3 and rows[2].startswith("| 100 | 8 | 0 |")
    assert json.loads(capsys.readouterr().out) == report


def test_load_test_refuses_other_hosts(capsys):
    assert run_main(load_test.main, ["--url", "http://example.com:8000", "--audio", "x.wav"]) == 2
    assert "loopback" in capsys.readouterr().err


def test_a_toy_feature_checkpoint_cannot_be_served(loaded):
    toy_cfg = config_from_dict({**loaded.cfg.to_dict(), "data": {"kind": "toy"}})
    with pytest.raises(CheckpointError, match="data.kind: manifest"):
        create_app(replace(loaded, cfg=toy_cfg), ServeSettings())


def test_serve_script_user_errors_exit_2(tmp_path, checkpoint, monkeypatch, capsys):
    serve = load_script("serve")
    assert run_main(serve.main, ["--checkpoint", str(tmp_path / "missing.pt")]) == 2
    assert "error: checkpoint not found" in capsys.readouterr().err
    (tmp_path / "junk.pt").write_bytes(b"not a checkpoint")
    assert run_main(serve.main, ["--checkpoint", str(tmp_path / "junk.pt")]) == 2
    assert "junk.pt" in capsys.readouterr().err
    assert run_main(serve.main, ["--checkpoint", str(checkpoint), "--max-batch-size", "0"]) == 2
    assert "max_batch_size" in capsys.readouterr().err
    monkeypatch.setitem(sys.modules, "uvicorn", None)  # find_spec reports it missing
    assert run_main(serve.main, ["--checkpoint", str(checkpoint)]) == 2
    assert "pip install -e .[serve]" in capsys.readouterr().err


def test_serve_script_serves_and_stops_cleanly_on_sigint(checkpoint, corpus):
    port = free_port()
    process = subprocess.Popen([sys.executable, str(PROJECT / "scripts" / "serve.py"), "--checkpoint", str(checkpoint),
                                "--port", str(port), "--max-wait-ms", "2"],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + WAIT_S
        while True:
            assert process.poll() is None, process.communicate()[1]
            assert time.monotonic() < deadline, "serve.py did not come up"
            try:
                status, health = get(url, "/health")
                break
            except OSError:
                time.sleep(0.2)
        assert status == 200 and health["checkpoint"] == str(checkpoint)
        assert health["limits"]["max_wait_ms"] == 2.0
        status, answer = upload(url, (corpus / "utt1.wav").read_bytes())
        assert status == 200 and answer["duration_s"] > 0
    finally:
        process.send_signal(signal.SIGINT)
        stdout, stderr = process.communicate(timeout=WAIT_S)
    assert process.returncode == 0, stderr
    assert f"on http://127.0.0.1:{port}" in stdout and "Traceback" not in stderr
