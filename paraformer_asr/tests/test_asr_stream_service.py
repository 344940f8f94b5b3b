"""The service's streaming endpoint (serving/streams.py) end to end: a real uvicorn server on loopback, a real
WebSocket client; the page at /; the page in headless Chromium with a fake microphone (slow, skipped without
Chromium).

The checkpoint is the session's tiny tone Paraformer (asr_helpers.train_tone_checkpoint) and a copy of it with
model.streaming switched on: not accurate, but every comparison here is with the same model decoded directly."""

from __future__ import annotations

import contextlib
import json
import shutil
import subprocess
import time
import tomllib
import urllib.request
from importlib import resources
from pathlib import Path
from urllib.parse import urlencode

import numpy as np
import pytest
import soundfile
import torch

pytest.importorskip("fastapi", reason="the ASR service needs the optional 'serve' extra (pip install -e .[serve])")
pytest.importorskip("uvicorn", reason="the ASR service needs the optional 'serve' extra (pip install -e .[serve])")
pytest.importorskip("python_multipart", reason="the ASR service needs the optional 'serve' extra")
pytest.importorskip("websockets", reason="the streaming endpoint needs the optional 'serve' extra (websockets)")

from websockets.exceptions import ConnectionClosed  # noqa: E402
from websockets.sync.client import connect  # noqa: E402

from paraformer_asr.data.resample import resample  # noqa: E402
from paraformer_asr.decode.streaming import StreamingRecognizer  # noqa: E402
from paraformer_asr.decode.timestamps import frame_clock, word_times  # noqa: E402
from paraformer_asr.inference import load_trained_model  # noqa: E402
from paraformer_asr.loaded_model import features_from_waveform  # noqa: E402
from paraformer_asr.serving.app import create_app  # noqa: E402
from paraformer_asr.serving.settings import ServeSettings  # noqa: E402
from paraformer_asr.serving.streams import (INVALID_PAYLOAD, POLICY_VIOLATION, StreamOptions,  # noqa: E402
                                            StreamRefused, pcm_samples, stream_options)

from asr_helpers import PROJECT, served, streaming_copy  # noqa: E402

pytestmark = pytest.mark.slow  # a live server per module: the full suite runs these, the fast loop does not

RATE = 16000
WAIT_S = 60  # bound on any wait; never reached when things work
PIECE_BYTES = 3200  # 100 ms of 16 kHz 16-bit PCM
END = json.dumps({"event": "end"})
CHUNK_MS = 200  # 5 encoder frames of 40 ms: several partials in a 1.5 s clip



@pytest.fixture(scope="module")
def loaded(tone_checkpoint, tmp_path_factory):
    return load_trained_model(streaming_copy(tone_checkpoint, tmp_path_factory.mktemp("streaming")),
                              torch.device("cpu"))


@pytest.fixture(scope="module")
def clip(tone_checkpoint) -> tuple[bytes, torch.Tensor]:
    """A training clip of the tone corpus: (its 16-bit PCM bytes, its samples [N] as the model reads them)."""
    pcm, rate = soundfile.read(tone_checkpoint.parents[3] / "u0.wav", dtype="int16")
    assert rate == RATE
    return pcm.astype("<i2").tobytes(), torch.from_numpy(pcm.astype(np.float32) / 32768.0)


@pytest.fixture(scope="module")
def server(loaded):
    with served(create_app(loaded, ServeSettings(max_streams=8)), WAIT_S) as url:
        yield url


def stream_url(url: str, **query) -> str:
    return url.replace("http://", "ws://") + "/stream" + (f"?{urlencode(query)}" if query else "")


def received(socket) -> tuple[list[dict], int]:
    """Every message until the server closes -> (the messages, the close code)."""
    messages = []
    try:
        while True:
            messages.append(json.loads(socket.recv(timeout=WAIT_S)))
    except ConnectionClosed as closed:
        return messages, closed.rcvd.code


def stream(url: str, pcm: bytes, **query) -> tuple[list[dict], int]:
    """pcm sent in 100 ms frames, then the end event -> (the messages, the close code)."""
    with connect(stream_url(url, **query), open_timeout=WAIT_S) as socket:
        for start in range(0, len(pcm), PIECE_BYTES):
            socket.send(pcm[start:start + PIECE_BYTES])
        socket.send(END)
        return received(socket)


def direct_final(loaded, samples: torch.Tensor, chunk_size: int, two_pass: bool = False) -> dict:
    """The final message the stream should end with: the StreamingRecognizer over the whole clip's features."""
    recognizer = StreamingRecognizer(loaded.model, chunk_size, two_pass)
    recognizer.accept(features_from_waveform(samples, loaded))
    tokens = recognizer.finish()
    times = recognizer.token_times(frame_clock(loaded.cfg), samples.numel() / RATE)
    return {"type": "final", "text": loaded.tokenizer.decode(tokens),
            "words": word_times(loaded.tokenizer.pieces(tokens), times), "audio_ms": round(samples.numel() / 16)}


def health(url: str) -> dict:
    with urllib.request.urlopen(url + "/health", timeout=WAIT_S) as answer:
        return json.loads(answer.read())


def test_stream_gives_partials_then_the_recognizers_final(server, loaded, clip):
    pcm, samples = clip
    messages, code = stream(server, pcm, chunk_ms=CHUNK_MS)
    partials, final = messages[:-1], messages[-1]
    assert code == 1000
    assert final == direct_final(loaded, samples, chunk_size=CHUNK_MS // 40)
    assert len(partials) >= 2 and all(message["type"] == "partial" for message in partials)
    assert all(a["text"] != b["text"] for a, b in zip(partials, partials[1:]))  # sent only when the text changes
    assert [m["audio_ms"] for m in partials] == sorted(m["audio_ms"] for m in partials)
    assert all(m["audio_ms"] % 100 == 0 and 0 < m["audio_ms"] <= final["audio_ms"] for m in partials)
    assert [word["word"] for word in final["words"]] == final["text"].split()

    default, _ = stream(server, pcm)  # the checkpoint's chunk (600 ms), and two-pass: the full-context final
    assert default[-1] == direct_final(loaded, samples, chunk_size=15)
    two_pass, _ = stream(server, pcm, two_pass="true")
    assert two_pass[-1] == direct_final(loaded, samples, chunk_size=15, two_pass=True)


def test_audio_at_another_rate_is_resampled(server, loaded, clip):
    _, samples = clip
    at_48k = (resample(samples, RATE, 48000) * 32768).round().clamp(-32768, 32767)  # [3N]
    messages, code = stream(server, at_48k.short().numpy().astype("<i2").tobytes(), sample_rate=48000,
                            chunk_ms=CHUNK_MS)
    expected = direct_final(loaded, resample(at_48k / 32768, 48000, RATE), chunk_size=CHUNK_MS // 40)
    assert code == 1000 and messages[-1]["text"] == expected["text"] and messages[-1]["words"] == expected["words"]


BAD_STREAMS = [  # (query, what the client sends, close code, a fragment of the error)
    ({}, b"\x00\x01\x02", 1007, "a binary frame of 3 bytes is not 16-bit PCM"),
    ({}, '{"event": "stop"}', 1003, "a text frame must be"),
    ({"sample_rate": "0"}, None, 1008, "'sample_rate' must be an integer number of Hz in [4000, 192000], got 0"),
    ({"sample_rate": "16000.5"}, None, 1008, "'sample_rate' must be an integer, got '16000.5'"),
    ({"sample_rate": "1000000"}, None, 1008, "'sample_rate'"),
    ({"chunk_ms": "-40"}, None, 1008, "'chunk_ms' must be a number of ms >= 0"),
    ({"two_pass": "maybe"}, None, 1008, "'two_pass' must be true or false"),
]


def test_bad_streams_fail_alone_while_another_goes_on(server, loaded, clip):
    pcm, samples = clip
    half = len(pcm) // 4 * 2
    with connect(stream_url(server, chunk_ms=CHUNK_MS), open_timeout=WAIT_S) as good:
        good.send(pcm[:half])
        for query, payload, code, fragment in BAD_STREAMS:
            with connect(stream_url(server, **query), open_timeout=WAIT_S) as bad:
                if payload is not None:
                    bad.send(pcm[:PIECE_BYTES])  # good audio first: the stream was going when the bad frame came
                    bad.send(payload)
                messages, closed = received(bad)
            assert closed == code and messages[-1]["type"] == "error" and fragment in messages[-1]["detail"]
        good.send(pcm[half:])
        good.send(END)
        messages, closed = received(good)
    assert closed == 1000 and messages[-1] == direct_final(loaded, samples, chunk_size=CHUNK_MS // 40)


def test_a_model_error_fails_only_its_stream(server, loaded, clip, monkeypatch):
    """A recognizer that raises in one stream (the one asking for 40 ms chunks): that stream gets 1011 and the
    reason is logged; a stream open at the same time completes; /health counts the failure."""

    class Faulty(StreamingRecognizer):
        def accept(self, features):
            if self.chunk_size == 1:
                raise RuntimeError("a broken decode")
            return super().accept(features)

    monkeypatch.setattr("paraformer_asr.serving.streams.StreamingRecognizer", Faulty)
    pcm, samples = clip
    failures = health(server)["failures"]["streams"]
    with connect(stream_url(server, chunk_ms=CHUNK_MS), open_timeout=WAIT_S) as good:
        good.send(pcm[:PIECE_BYTES])
        with connect(stream_url(server, chunk_ms=40), open_timeout=WAIT_S) as faulty:
            faulty.send(pcm[:PIECE_BYTES])
            messages, closed = received(faulty)
        assert closed == 1011
        assert messages == [{"type": "error", "detail": "the server failed to decode this stream (RuntimeError); "
                                                        "the error was logged"}]
        good.send(pcm[PIECE_BYTES:])
        good.send(END)
        messages, closed = received(good)
    assert closed == 1000 and messages[-1] == direct_final(loaded, samples, chunk_size=CHUNK_MS // 40)
    assert health(server)["failures"]["streams"] == failures + 1


def test_concurrent_streams_each_get_their_own_transcript(server, loaded, tone_checkpoint):
    """Eight streams of four clips at once, their frames interleaved: each final is that clip's alone."""
    clips = []
    for index in range(4):
        pcm, _ = soundfile.read(tone_checkpoint.parents[3] / f"u{index}.wav", dtype="int16")
        clips.append((pcm.astype("<i2").tobytes(), torch.from_numpy(pcm.astype(np.float32) / 32768.0)))
    with contextlib.ExitStack() as stack:
        sockets = [stack.enter_context(connect(stream_url(server, chunk_ms=CHUNK_MS), open_timeout=WAIT_S))
                   for _ in range(8)]
        for start in range(0, max(len(pcm) for pcm, _ in clips), PIECE_BYTES):
            for index, socket in enumerate(sockets):
                piece = clips[index % 4][0][start:start + PIECE_BYTES]
                if piece:
                    socket.send(piece)
        for socket in sockets:
            socket.send(END)
        finals = [received(socket)[0][-1] for socket in sockets]
    expected = [direct_final(loaded, samples, chunk_size=CHUNK_MS // 40) for _, samples in clips]
    assert finals == [expected[index % 4] for index in range(8)]


def test_stream_limits_close_the_stream_with_their_code(loaded, clip):
    pcm, _ = clip
    settings = ServeSettings(max_streams=1, max_stream_seconds=1.0, stream_idle_seconds=1.0)
    with served(create_app(loaded, settings), WAIT_S) as url:
        with connect(stream_url(url), open_timeout=WAIT_S) as first:
            first.send(pcm[:PIECE_BYTES])
            with connect(stream_url(url), open_timeout=WAIT_S) as second:
                messages, code = received(second)
            assert code == 1013 and "1 streams are already open (the limit is 1); retry later" in messages[0]["detail"]
            first.send(pcm[PIECE_BYTES:])  # 1.5 s in all, over the 1 s limit
            messages, code = received(first)
        assert code == 1009 and messages[-1] == {"type": "error",
                                                 "detail": "the stream's audio is longer than the limit of 1 s"}
        with connect(stream_url(url), open_timeout=WAIT_S) as idle:
            messages, code = received(idle)
        assert code == 1008 and messages == [{"type": "error", "detail": "no message for 1 s; the stream was closed"}]
        assert health(url)["streams"]["busy"] == 1


def test_a_checkpoint_trained_without_streaming_gives_the_full_context_final_only(tone_checkpoint, clip):
    pcm, samples = clip
    plain = load_trained_model(tone_checkpoint, torch.device("cpu"))
    features = features_from_waveform(samples, plain).unsqueeze(0)  # [1, T, F]
    tokens, lengths = plain.model.greedy_decode(features, torch.ones(features.shape[:2], dtype=torch.bool))
    with served(create_app(plain, ServeSettings()), WAIT_S) as url:
        messages, code = stream(url, pcm)
        streams = health(url)["streams"]
        with connect(stream_url(url, chunk_ms=600), open_timeout=WAIT_S) as socket:
            refused, refused_code = received(socket)
    assert code == 1000 and messages == [direct_final(plain, samples, chunk_size=0)]  # the final alone, no partial
    assert messages[0]["text"] == plain.tokenizer.decode(tokens[0, :lengths[0]].tolist())  # the offline transcript
    assert streams["available"] and streams["partials"] is False and streams["chunk_ms"] == 0
    assert refused_code == 1008 and "trained without streaming" in refused[0]["detail"]


def test_pcm_and_query_parameters(loaded):
    data = np.array([0, 1, -1, 32767, -32768], dtype="<i2").tobytes()
    torch.testing.assert_close(pcm_samples(data), torch.tensor([0, 1, -1, 32767, -32768]) / 32768.0)
    with pytest.raises(StreamRefused, match="9 bytes") as refused:
        pcm_samples(data[:9])
    assert refused.value.code == INVALID_PAYLOAD
    assert stream_options({}, loaded) == StreamOptions(RATE, 15, False)  # the checkpoint's chunk and two-pass
    options = stream_options({"sample_rate": "44100", "chunk_ms": "300", "two_pass": "1"}, loaded)
    assert (options.sample_rate, options.chunk_size, options.two_pass) == (44100, 8, True)  # 300 / 40 ms, rounded
    assert stream_options({"chunk_ms": "0"}, loaded).chunk_size == 0
    assert stream_options({"chunk_ms": "10"}, loaded).chunk_size == 1  # at least one encoder frame
    with pytest.raises(StreamRefused, match="'chunk_ms'") as refused:
        stream_options({"chunk_ms": "nan"}, loaded)
    assert refused.value.code == POLICY_VIOLATION


def test_the_page_is_served_and_packaged(server):
    with urllib.request.urlopen(server + "/", timeout=WAIT_S) as answer:
        assert answer.headers["content-type"].startswith("text/html")
        page = answer.read().decode()
    for needed in ("getUserMedia", "audioWorklet", 'new URL("stream"', '"sample_rate"', '{event: "end"}',
                   'id="partial"', 'id="final"', 'id="words"', 'type="file"'):
        assert needed in page, needed
    packaged = tomllib.loads((PROJECT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]
    folder = resources.files("paraformer_asr.serving")
    assert [path for pattern in packaged["paraformer_asr.serving"] for path in Path(str(folder)).glob(pattern)] == [
        Path(str(folder)) / "static" / "index.html"]


# The page in a real browser: headless Chromium with a fake microphone that plays a WAV file.

BROWSER_TONES = {"1": 400.0, "2": 900.0, "3": 2000.0}  # far apart on the mel scale: a tiny model learns them fast


def browser_tones(text: str, seed: int) -> torch.Tensor:
    """One 0.2 s tone per digit, 0.1 s apart, between 0.1 to 1.5 s of digital silence on either side."""
    rng = np.random.default_rng(seed)
    t = torch.arange(int(0.2 * RATE)) / RATE
    parts = [torch.zeros(int(rng.uniform(0.1, 1.5) * RATE))]
    for digit in text:
        parts += [0.4 * torch.sin(2 * torch.pi * BROWSER_TONES[digit] * t), torch.zeros(int(0.1 * RATE))]
    return torch.cat(parts + [torch.zeros(int(rng.uniform(0.1, 1.5) * RATE))])


@pytest.fixture(scope="module")
def chromium() -> str:
    """The Chromium executable; the test is skipped where there is none."""
    found = [shutil.which(name) for name in ("chromium", "chromium-browser", "google-chrome") if shutil.which(name)]
    if not found:
        pytest.skip("no Chromium here (Debian: apt-get install chromium)")
    return found[0]


@pytest.fixture(scope="module")
def browser_checkpoint(chromium, tmp_path_factory) -> Path:
    """A tiny streaming Paraformer trained (40 epochs, about ten seconds) until it transcribes its tone clips right
    wherever they start: the browser's capture starts at an unknown point of the fake microphone's file. Only
    where there is a Chromium to use it."""
    from paraformer_asr.config import config_from_dict
    from paraformer_asr.data.audio import write_audio
    from paraformer_asr.training.launch import train

    from asr_helpers import tiny_audio_config

    folder = tmp_path_factory.mktemp("browser_corpus")
    rng, lines = np.random.default_rng(0), []
    for index in range(24):
        text = "".join(rng.choice(list(BROWSER_TONES), size=rng.integers(1, 4)))
        write_audio(folder / f"t{index}.wav", browser_tones(text, index), RATE)
        lines.append(json.dumps({"audio": f"t{index}.wav", "text": text}))
    (folder / "train.jsonl").write_text("\n".join(lines) + "\n")
    raw = tiny_audio_config(folder / "train.jsonl", folder / "runs", "browser", epochs=40)
    raw["model"]["streaming"] = {"enabled": True, "chunk_sizes": [4, 8, 0], "right_frames": 2, "decode_chunk_size": 8}
    raw["train"].update(batch_size=8, lr=0.005, warmup_steps=10)
    raw["data"]["edge_pad_ms"] = 500
    return train(config_from_dict(raw)) / "checkpoints" / "last.pt"


class DevTools:
    """The Chrome DevTools protocol of one page, over its WebSocket: ``call(method, **params)`` -> its result,
    ``evaluate(expression)`` -> the expression's value."""

    def __init__(self, socket):
        self.socket = socket
        self.calls = 0

    def call(self, method: str, **params) -> dict:
        self.calls += 1
        self.socket.send(json.dumps({"id": self.calls, "method": method, "params": params}))
        while True:
            answer = json.loads(self.socket.recv(timeout=WAIT_S))
            if answer.get("id") == self.calls:
                assert "error" not in answer, answer["error"]
                return answer["result"]

    def evaluate(self, expression: str, wait: bool = False, failing_is_none: bool = False):
        result = self.call("Runtime.evaluate", expression=expression, awaitPromise=wait, userGesture=True,
                           returnByValue=True)
        if failing_is_none and "exceptionDetails" in result:
            return None
        assert "exceptionDetails" not in result, result["exceptionDetails"]
        return result["result"].get("value")

    def choose_file(self, selector: str, path: Path) -> None:
        """Set the file of the page's file input ``selector`` (its change event fires, as when a user picks one)."""
        root = self.call("DOM.getDocument")["root"]["nodeId"]
        node = self.call("DOM.querySelector", nodeId=root, selector=selector)["nodeId"]
        self.call("DOM.setFileInputFiles", files=[str(path)], nodeId=node)

    def wait_for(self, expression: str):
        """Poll ``expression`` until it is truthy (the page may still be loading: a failing one is polled again)
        -> its value."""
        deadline = time.monotonic() + WAIT_S
        while not (value := self.evaluate(expression, failing_is_none=True)):
            assert time.monotonic() < deadline, f"timed out waiting for {expression}"
            time.sleep(0.1)
        return value


@contextlib.contextmanager
def chromium_page(browser: str, url: str, microphone: Path, profile: Path):
    """Headless Chromium at ``url``, its fake microphone playing ``microphone`` once -> DevTools of the page."""
    command = [browser, "--headless", "--no-sandbox", "--disable-gpu", "--remote-debugging-port=0",
               f"--user-data-dir={profile}", "--use-fake-ui-for-media-stream", "--use-fake-device-for-media-stream",
               f"--use-file-for-fake-audio-capture={microphone}%noloop", "--autoplay-policy=no-user-gesture-required",
               url]
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        port_file, deadline = profile / "DevToolsActivePort", time.monotonic() + WAIT_S
        while not (port_file.is_file() and port_file.read_text().strip()):
            assert process.poll() is None and time.monotonic() < deadline, "Chromium did not start"
            time.sleep(0.1)
        port = int(port_file.read_text().split()[0])
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=WAIT_S) as answer:
            page = next(target for target in json.loads(answer.read()) if target["type"] == "page")
        with connect(page["webSocketDebuggerUrl"], open_timeout=WAIT_S, max_size=None) as socket:
            yield DevTools(socket)
    finally:
        process.terminate()
        process.wait(WAIT_S)


def test_the_page_transcribes_the_microphone_and_a_file_in_chromium(chromium, browser_checkpoint, tmp_path):
    """The page records the fake microphone (a WAV of the tones of "132"), streams it, shows partials and then the
    known transcript with its word times; then the same WAV chosen in its file input, streamed at the pace of a
    microphone, gives the same transcript."""
    loaded = load_trained_model(browser_checkpoint, torch.device("cpu"))
    microphone = tmp_path / "microphone.wav"
    samples = torch.cat([torch.zeros(RATE // 2), browser_tones("132", seed=8), torch.zeros(RATE // 2)])
    soundfile.write(microphone, (samples * 32767).round().short().numpy(), RATE, subtype="PCM_16")
    with served(create_app(loaded, ServeSettings()), WAIT_S) as url, \
            chromium_page(chromium, url + "/", microphone, tmp_path / "profile") as page:
        assert "chunks of 320 ms" in page.wait_for('document.getElementById("model").textContent.includes("Hz") && '
                                                   'document.getElementById("model").textContent')
        page.evaluate('window.partials = []; new MutationObserver(() => partials.push(partial.textContent))'
                      '.observe(partial, {childList: true, characterData: true, subtree: true})')
        page.evaluate("startRecording()", wait=True)
        time.sleep(samples.numel() / RATE + 0.3)  # the file plays once, then the microphone is silent
        page.evaluate("stopRecording()", wait=True)
        final = page.wait_for('document.getElementById("final").textContent')
        words = page.evaluate('[...document.querySelectorAll("#words tbody tr")].map(row => '
                              '[...row.cells].map(cell => cell.textContent))')
        partials = page.evaluate("partials")
        status = page.evaluate('document.getElementById("status").textContent')

        page.evaluate('document.getElementById("final").textContent = ""')
        started = time.monotonic()
        page.choose_file("#file", microphone)
        from_file = page.wait_for('document.getElementById("final").textContent')
        file_seconds = time.monotonic() - started
        file_status = page.evaluate('document.getElementById("status").textContent')
    assert final == "132" and status.startswith("done")
    assert [word for word, _, _ in words] == ["132"] and int(words[0][1]) < int(words[0][2])
    assert any(partials) and all(partial in ("", "1", "13", "132") for partial in partials)
    assert from_file == "132" and file_status == f"done: {samples.numel() / RATE:.1f} s of audio"
    assert file_seconds >= samples.numel() / RATE * 0.9  # sent at the pace of a microphone, not all at once
