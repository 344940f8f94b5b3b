"""Scoring and timing streams: the batched masked pass (decode/streaming.py ``use_decode_chunk``, what
``eval.py --chunk-ms`` scores) against the StreamingRecognizer utterance by utterance, the recognizer's token times
against offline decoding's, eval.py's streaming options, and scripts/stream_latency.py's report."""

from __future__ import annotations

import json

import pytest
import torch

from paraformer_asr.data.batching import Collator
from paraformer_asr.decode.search import transcribe_batches
from paraformer_asr.decode.streaming import StreamingRecognizer, chunk_frames, use_decode_chunk
from paraformer_asr.decode.timestamps import frame_clock
from paraformer_asr.errors import ConfigError, DataError
from paraformer_asr.inference import features_from_file, load_trained_model
from paraformer_asr_tools.benchmarks.stream_latency import served_checkpoint

from asr_helpers import call_script, streaming_copy

UTTERANCES = 8  # the tone corpus's clips u0 .. u7



@pytest.fixture(scope="module")
def checkpoint(tone_checkpoint, tmp_path_factory):
    return streaming_copy(tone_checkpoint, tmp_path_factory.mktemp("stream_eval"))


def clips(tone_checkpoint) -> list:
    return [tone_checkpoint.parents[3] / f"u{index}.wav" for index in range(UTTERANCES)]


def streamed(loaded, features: torch.Tensor, chunk: int, two_pass: bool = False) -> tuple[list[int], list]:
    """One utterance through a StreamingRecognizer in pieces of 7 frames -> (final tokens, token times)."""
    recognizer = StreamingRecognizer(loaded.model, chunk, two_pass)
    for piece in features.split(7):
        recognizer.accept(piece)
    tokens = recognizer.finish()
    return tokens, recognizer.token_times(frame_clock(loaded.cfg), features.shape[0] / 100.0)


@pytest.mark.parametrize("chunk, two_pass", [(1, False), (5, False), (15, False), (0, False), (5, True)])
def test_batched_masked_pass_equals_the_recognizer(checkpoint, tone_checkpoint, chunk, two_pass):
    """The eight clips decoded together (padded) with the encoder at the chunk: the tokens and token times of each
    equal the recognizer's streamed alone; the two-pass final is the full-context pass's."""
    loaded = load_trained_model(checkpoint, torch.device("cpu"))
    features = [features_from_file(path, loaded) for path in clips(tone_checkpoint)]  # (feats [T, F], duration_s)
    expected = [streamed(loaded, feats, chunk, two_pass) for feats, _ in features]
    use_decode_chunk(loaded.model, 0 if two_pass else chunk)
    items = [{"id": str(i), "features": feats, "tokens": torch.zeros(0, dtype=torch.long), "text": "",
              "duration_s": feats.shape[0] / 100.0} for i, (feats, _) in enumerate(features)]
    batch = Collator(loaded.tokenizer.pad_id)(items)
    transcripts, _ = transcribe_batches(loaded.model, [batch], torch.device("cpu"), method="greedy",
                                        clock=frame_clock(loaded.cfg))
    assert [t.hyp_tokens for t in transcripts] == [tokens for tokens, _ in expected]
    assert sum(len(tokens) for tokens, _ in expected) > UTTERANCES  # something to compare
    for transcript, (_, times) in zip(transcripts, expected):
        torch.testing.assert_close(torch.tensor(transcript.token_times).view(-1, 2), torch.tensor(times).view(-1, 2),
                                   atol=1e-3, rtol=0)  # [N, 2] ms


def test_the_chunk_changes_the_transcripts(checkpoint, tone_checkpoint):
    """A check on the check above: the encoder's chunk matters to this model (else equal transcripts prove little)."""
    loaded = load_trained_model(checkpoint, torch.device("cpu"))
    features = [features_from_file(path, loaded)[0] for path in clips(tone_checkpoint)]
    by_chunk = {chunk: [streamed(loaded, feats, chunk)[0] for feats in features] for chunk in (1, 0)}
    assert by_chunk[1] != by_chunk[0]


def test_chunk_frames_and_use_decode_chunk_refusals(checkpoint):
    loaded = load_trained_model(checkpoint, torch.device("cpu"))
    clock = frame_clock(loaded.cfg)  # 40 ms encoder frames
    assert [chunk_frames(ms, clock) for ms in (0, 10, 300, 600, 1200)] == [0, 1, 8, 15, 30]
    for bad in (-1.0, float("inf"), float("nan")):
        with pytest.raises(ConfigError, match="finite number of ms >= 0"):
            chunk_frames(bad, clock)
    with pytest.raises(ConfigError, match="must be >= 0 encoder frames"):
        use_decode_chunk(loaded.model, -1)
    with pytest.raises(ConfigError, match="PyTorch Paraformer with the CIF predictor"):
        use_decode_chunk(torch.nn.Linear(2, 2), 5)


def test_eval_chunk_ms_scores_the_streams(checkpoint, tone_checkpoint, tmp_path):
    loaded = load_trained_model(checkpoint, torch.device("cpu"))
    manifest = tone_checkpoint.parents[3] / "train.jsonl"
    texts = {}
    for name, extra in (("chunk", []), ("two_pass", ["--two-pass"])):
        out = call_script("eval.py", "--checkpoint", checkpoint, "--manifest", manifest, "--chunk-ms", 200,
                          "--save-predictions", tmp_path / f"{name}.jsonl", *extra, cwd=tmp_path)
        assert json.loads(out.stdout)["stream"] == {"chunk_ms": 200.0, "chunk_frames": 5,
                                                    "two_pass": name == "two_pass"}
        lines = [json.loads(line) for line in (tmp_path / f"{name}.jsonl").read_text().splitlines()]
        texts[name] = [line["hyp"] for line in lines]
    features = [features_from_file(path, loaded)[0] for path in clips(tone_checkpoint)]
    assert texts["chunk"] == [loaded.tokenizer.decode(streamed(loaded, feats, 5)[0]) for feats in features]
    assert texts["two_pass"] == [loaded.tokenizer.decode(streamed(loaded, feats, 5, True)[0]) for feats in features]

    for extra, message in ((["--two-pass"], "--two-pass scores a stream's final: give --chunk-ms too"),
                           (["--chunk-ms", 200, "--decode", "beam"], "--chunk-ms scores a stream, which decodes "
                                                                     "greedily"),
                           (["--chunk-ms", -5], "the chunk must be a finite number of ms >= 0")):
        result = call_script("eval.py", "--checkpoint", checkpoint, "--manifest", manifest, *extra, cwd=tmp_path,
                             check=False)
        assert result.returncode == 2 and message in result.stderr


def latency_keys(part: dict) -> set:
    return {key for key in part if isinstance(part[key], dict) and set(part[key]) == {"median", "p95", "count"}}


def test_stream_latency_report(checkpoint, tone_checkpoint, tmp_path):
    """The report's promised fields, direct and through a WebSocket server (in this process, given by --url); no
    timing is asserted, only counts and that the service's finals are the direct decoding's."""
    pytest.importorskip("websockets", reason="the WebSocket part needs the optional 'serve' extra")
    from paraformer_asr.serving.app import create_app
    from paraformer_asr.serving.settings import ServeSettings
    from asr_helpers import served

    loaded = load_trained_model(checkpoint, torch.device("cpu"))
    audio = clips(tone_checkpoint)[:3]
    with served(create_app(loaded, ServeSettings())) as url:
        result = call_script("stream_latency.py", "--checkpoint", checkpoint, "--audio", *audio, "--chunk-ms", 200,
                             "--concurrent", 2, "--pace", 8, "--url", url, "--out", tmp_path / "latency.json",
                             cwd=tmp_path)
    report = json.loads(result.stdout)
    assert report == json.loads((tmp_path / "latency.json").read_text())
    direct, websocket = report["direct"], report["websocket"]
    timed = {"first_partial_ms", "final_after_speech_end_ms", "final_after_audio_end_ms"}
    assert latency_keys(direct) == timed | {"rtf_per_chunk", "rtf_final"} and latency_keys(websocket) == timed
    assert (direct["chunk_frames"], direct["two_pass"], direct["piece_ms"], direct["recordings"]) == (5, False,
                                                                                                       200.0, 3)
    features = [features_from_file(path, loaded)[0] for path in audio]
    frames = [int(loaded.model.encoder.output_lengths(torch.tensor(feats.shape[0]))) for feats in features]
    right = loaded.model.encoder.right_frames
    assert direct["rtf_per_chunk"]["count"] == sum((count - right) // 5 for count in frames)  # chunks done live
    assert direct["final_after_speech_end_ms"]["count"] == direct["rtf_final"]["count"] == 3
    assert direct["finals"] == {str(path): loaded.tokenizer.decode(streamed(loaded, feats, 5)[0])
                                for path, feats in zip(audio, features)}
    assert websocket["streams"] == 4 and websocket["errors"] == 0 and websocket["mismatched_finals"] == 0
    assert websocket["final_after_audio_end_ms"]["count"] == 4


@pytest.mark.slow
def test_stream_latency_starts_its_own_server(checkpoint, tone_checkpoint, tmp_path):
    """Without --url the script serves the checkpoint in its own process (python -m paraformer_asr.serving.command),
    and stops it."""
    pytest.importorskip("websockets", reason="the WebSocket part needs the optional 'serve' extra")
    result = call_script("stream_latency.py", "--checkpoint", checkpoint, "--audio", clips(tone_checkpoint)[0],
                         "--concurrent", 1, "--pace", 8, cwd=tmp_path)
    websocket = json.loads(result.stdout)["websocket"]
    assert (websocket["streams"], websocket["errors"], websocket["mismatched_finals"]) == (1, 0, 0)


@pytest.mark.slow
def test_the_benchmarks_server_is_the_librarys_command_from_any_folder(tmp_path, monkeypatch):
    """served_checkpoint starts the service as ``python -m paraformer_asr.serving.command``, found through the
    installed package, not through a source tree beside it: from a foreign folder its error still comes back."""
    pytest.importorskip("uvicorn", reason="the service needs the optional 'serve' extra")
    monkeypatch.chdir(tmp_path)
    with pytest.raises(DataError, match=r"the server for missing\.pt stopped: .*error: checkpoint not found") as stop:
        with served_checkpoint("missing.pt", timeout_s=60.0):
            pass
    assert "Traceback" not in str(stop.value)
