"""Streaming Paraformer (models/encoder.py's chunk masks, models/streaming.py, decode/streaming.py): the masks against
a plain loop; the encoder, the CIF and the transcript streamed piece by piece against the whole-utterance passes;
dynamic chunk training; the streaming front end; the config's checks; infer.py --stream."""

from __future__ import annotations

import re

import numpy as np
import pytest
import torch

from paraformer_asr.config import config_from_dict
from paraformer_asr.data.frontend import FeatureNormalizer, LogMelFrontend
from paraformer_asr.data.tokenizer import CharTokenizer
from paraformer_asr.decode.streaming import StreamingFeatures, StreamingRecognizer
from paraformer_asr.errors import ConfigError
from paraformer_asr.factory import build_model
from paraformer_asr.inference import LoadedModel, load_trained_model
from paraformer_asr.models.cif import cif_integrate, inference_token_count
from paraformer_asr.models.encoder import chunk_attention_mask
from paraformer_asr.models.streaming import CifCarry, EncoderStream, finish_carry, integrate_chunk
from paraformer_asr.transcribe import stream_file

from asr_helpers import PackageLog, call_script, speech_like, streaming_copy, tiny_raw_config

FEATURE_DIM = 16  # tiny_raw_config's toy features
PIECES = (5, 1, 13, 2, 8)  # piece sizes in input frames, cycled: chunk edges fall everywhere


def reference_chunk_mask(frames: int, chunk: int, left: int | None, right: int) -> torch.Tensor:
    """The chunk mask, one query/key pair at a time."""
    mask = torch.zeros(frames, frames, dtype=torch.bool)
    for t in range(frames):
        query_chunk = t // chunk
        for s in range(frames):
            key_chunk = s // chunk
            looked_back = key_chunk <= query_chunk and (left is None or key_chunk >= query_chunk - left)
            looked_ahead = key_chunk > query_chunk and s < (query_chunk + 1) * chunk + right
            mask[t, s] = looked_back or looked_ahead
    return mask


def model_config(subsampling: str = "4x", enabled: bool = True, left_chunks: int | None = 1, right_frames: int = 2,
                 decode_chunk_size: int = 3, predictor_bias: int = 0, **streaming):
    raw = tiny_raw_config()
    raw["model"].update({"encoder_layers": 2, "subsampling": subsampling, "predictor_bias": predictor_bias,
                         "streaming": {"enabled": enabled, "left_chunks": left_chunks, "right_frames": right_frames,
                                       "decode_chunk_size": decode_chunk_size, **streaming}})
    return config_from_dict(raw)


def tiny_streaming_model(seed: int = 0, **options):
    """A tiny untrained Paraformer (eval mode, weights seeded) over 16-dim features; options go to model_config."""
    cfg = model_config(**options)
    tokenizer = CharTokenizer.build(["abcdef"])
    torch.manual_seed(seed)
    return build_model(cfg, FEATURE_DIM, tokenizer).eval()


def random_features(frames: int, seed: int) -> torch.Tensor:
    return torch.randn(frames, FEATURE_DIM, generator=torch.Generator().manual_seed(seed))  # [T, F]


def pieces(features: torch.Tensor) -> list[torch.Tensor]:
    """features [T, F] cut into pieces of the sizes PIECES, cycled."""
    cut, start, index = [], 0, 0
    while start < features.shape[0]:
        size = PIECES[index % len(PIECES)]
        cut.append(features[start:start + size])
        start, index = start + size, index + 1
    return cut


def offline_greedy(model, features: torch.Tensor) -> list[int]:
    mask = torch.ones(1, features.shape[0], dtype=torch.bool)
    tokens, lengths = model.greedy_decode(features.unsqueeze(0), mask)
    return tokens[0, :lengths[0]].tolist()


def streamed(recognizer: StreamingRecognizer, features: torch.Tensor) -> tuple[list[list[int]], list[int]]:
    """-> (the partial after each piece, the final)."""
    partials = [list(recognizer.accept(piece)) for piece in pieces(features)]
    return partials, recognizer.finish()


# ----------------------------------------------------------------------------- chunk masks


@pytest.mark.parametrize("frames, chunk, left, right", [(1, 1, None, 0), (10, 3, None, 0), (10, 3, 1, 0),
                                                        (10, 3, 0, 2), (17, 4, 2, 5), (9, 16, None, 3),
                                                        (12, 1, 3, 1), (13, 5, 0, 0)])
def test_chunk_mask_matches_a_loop(frames, chunk, left, right):
    assert torch.equal(chunk_attention_mask(frames, chunk, left, right), reference_chunk_mask(frames, chunk, left, right))


@pytest.mark.parametrize("arguments, message", [((5, 0), "chunk_size must be >= 1"),
                                                ((5, 2, -1), "left_chunks must be >= 0 or None"),
                                                ((5, 2, None, -1), "right_frames must be >= 0")])
def test_chunk_mask_refuses_bad_arguments(arguments, message):
    with pytest.raises(ValueError, match=message):
        chunk_attention_mask(*arguments)


def test_chunked_encoder_ignores_batch_padding():
    """The chunk mask and the padding mask together: each utterance's valid outputs are those it gets alone."""
    model = tiny_streaming_model()
    lengths = (61, 37)
    features = torch.zeros(2, max(lengths), FEATURE_DIM)
    mask = torch.zeros(2, max(lengths), dtype=torch.bool)
    for row, length in enumerate(lengths):
        features[row, :length] = random_features(length, row)
        mask[row, :length] = True
    with torch.no_grad():
        batched, out_mask = model.encoder(features, mask)  # eval: decode_chunk_size 3, left 1, right 2
        for row, length in enumerate(lengths):
            alone, _ = model.encoder(features[row:row + 1, :length], mask[row:row + 1, :length])
            valid = int(out_mask[row].sum())
            assert valid == alone.shape[1]
            torch.testing.assert_close(batched[row, :valid], alone[0], atol=1e-5, rtol=0)


def test_streaming_off_is_the_full_context_pass_and_draws_nothing():
    """A model without model.streaming: no mask in eval, and training draws no chunk size (its random stream stays
    that of earlier versions)."""
    model = tiny_streaming_model(enabled=False)
    features, mask = random_features(40, 0).unsqueeze(0), torch.ones(1, 40, dtype=torch.bool)
    assert model.encoder.streaming is None and model.encoder.attention_chunk() == 0
    with torch.no_grad():
        assert torch.equal(model.encoder(features, mask)[0], model.encoder(features, mask, chunk_size=0)[0])
        model.encoder.train()
        for module in model.encoder.modules():
            if isinstance(module, torch.nn.Dropout):
                module.p = 0.0
        state = torch.get_rng_state()
        model.encoder(features, mask)
        assert torch.equal(torch.get_rng_state(), state)


# ----------------------------------------------------------------------------- the encoder as a stream


@pytest.mark.parametrize("subsampling", ["none", "2x", "4x"])
@pytest.mark.parametrize("chunk, left, right", [(3, 1, 2), (4, None, 0), (2, 0, 1), (5, 2, 7), (0, None, 0)])
def test_encoder_stream_equals_the_masked_pass(subsampling, chunk, left, right):
    model = tiny_streaming_model(subsampling=subsampling, left_chunks=left, right_frames=right)
    for frames, seed in ((97, 0), (30, 1)):
        features = random_features(frames, seed)
        with torch.no_grad():
            whole, _ = model.encoder(features.unsqueeze(0), torch.ones(1, frames, dtype=torch.bool), chunk_size=chunk)
            stream = EncoderStream(model.encoder, chunk, left, right)
            outputs = [stream.push(piece) for piece in pieces(features)]
            outputs.append(stream.finish())
        if chunk > 0:  # a chunk is given out once its frames and look-ahead are there, not before
            assert all(out.shape[0] % chunk == 0 for out in outputs[:-1])
        torch.testing.assert_close(torch.cat(outputs), whole[0], atol=1e-5, rtol=0)


def test_encoder_stream_refuses_training_mode():
    model = tiny_streaming_model().train()
    with pytest.raises(ValueError, match="eval mode"):
        EncoderStream(model.encoder, 3)


# ----------------------------------------------------------------------------- the CIF across chunks


def cif_streamed(hidden: torch.Tensor, alphas: torch.Tensor, sizes: list[int],
                 tail_threshold: float) -> tuple[torch.Tensor, torch.Tensor]:
    """hidden [T, D], alphas [T] integrated chunk by chunk (``sizes`` frames each) -> (embeddings, fire frames)."""
    carry, embeddings, fires, start = CifCarry.start(hidden.shape[1], hidden), [], [], 0
    for size in sizes:
        emitted, fired, carry = integrate_chunk(carry, hidden[start:start + size], alphas[start:start + size])
        embeddings.append(emitted)
        fires.append(fired)
        start += size
    tail, tail_fire = finish_carry(carry, tail_threshold)
    return torch.cat(embeddings + [tail]), torch.cat(fires + [tail_fire])


def test_cif_carry_on_the_worked_example():
    """docs/architecture.md's worked example, cut after frames 2 and 3: the same three tokens and fires."""
    hidden = torch.arange(1.0, 7.0).unsqueeze(1)  # [6, 1]
    alphas = torch.tensor([0.3, 0.5, 0.4, 0.9, 0.2, 0.6])
    embeddings, fires = cif_streamed(hidden, alphas, [2, 1, 3], tail_threshold=0.5)
    torch.testing.assert_close(embeddings[:, 0], torch.tensor([1.9, 3.8, 5.0 / 0.9]), atol=1e-5, rtol=0)
    assert fires.tolist() == [2, 3, 5]


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("tail_threshold", [0.5, 0.2, 0.9])
def test_cif_carry_equals_the_whole_sequence(seed, tail_threshold):
    generator = torch.Generator().manual_seed(seed)
    frames = 41
    hidden = torch.randn(frames, 8, generator=generator)
    alphas = torch.rand(frames, generator=generator) * (1.7 if seed % 2 else 0.9)  # seeds 1, 3, 5: several fires a frame
    alphas[torch.rand(frames, generator=generator) < 0.15] = 0.0  # frames that carry nothing
    if seed == 0:
        alphas[:8] = torch.tensor([0.5, 0.5, 0.25, 0.75, 0.5, 0.5, 1.0, 0.0])  # running sums exactly on 1, 2, 3, 4
    sizes, left = [], frames
    while left > 0:  # chunks of 0 .. 6 frames
        sizes.append(min(left, int(torch.randint(0, 7, (), generator=generator))))
        left -= sizes[-1]
    embeddings, fires = cif_streamed(hidden, alphas, sizes, tail_threshold)
    count = inference_token_count(alphas.unsqueeze(0), tail_threshold)  # [1]
    expected, _, expected_fires = cif_integrate(hidden.unsqueeze(0), alphas.unsqueeze(0), count)
    assert embeddings.shape[0] == int(count)
    torch.testing.assert_close(embeddings, expected[0], atol=1e-5, rtol=0)
    assert torch.equal(fires, expected_fires[0])


# ----------------------------------------------------------------------------- transcripts


@pytest.mark.parametrize("predictor_bias", [0, 1])
def test_streamed_transcript_equals_offline_when_the_chunk_covers_the_utterance(predictor_bias):
    """A model trained without streaming, streamed with one chunk for the whole utterance (chunk 0, or a chunk longer
    than it): the offline greedy transcript."""
    model = tiny_streaming_model(enabled=False, predictor_bias=predictor_bias)
    for seed, frames in enumerate((120, 57, 9)):
        features = random_features(frames, seed)
        expected = offline_greedy(model, features)
        for chunk in (0, 1000):
            partials, final = streamed(StreamingRecognizer(model, chunk_size=chunk), features)
            assert final == expected
            assert all(partial == [] for partial in partials)  # nothing is encoded before the end


@pytest.mark.parametrize("predictor_bias", [0, 1])
@pytest.mark.parametrize("left, right", [(1, 2), (None, 0)])
def test_streamed_transcript_equals_the_chunked_offline_pass(predictor_bias, left, right):
    """A streaming model at its decode chunk: the stream's fires and final transcript are those of the offline
    greedy decoding (the encoder masked at the same chunk), and each partial decodes exactly the tokens fired so
    far."""
    model = tiny_streaming_model(predictor_bias=predictor_bias, left_chunks=left, right_frames=right)
    for seed, frames in enumerate((150, 64)):
        features = random_features(frames, seed)
        mask = torch.ones(1, frames, dtype=torch.bool)
        expected_tokens, lengths, extraction = model.decode_aligned(features.unsqueeze(0), mask)
        recognizer = StreamingRecognizer(model)
        assert recognizer.chunk_size == 3
        fired = []
        for piece in pieces(features):
            partial = recognizer.accept(piece)
            assert len(partial) == recognizer.stream.embeddings.shape[0]
            fired.append(len(partial))
        final = recognizer.finish()
        assert final == expected_tokens[0, :lengths[0]].tolist()
        assert fired[-1] > 0 and fired == sorted(fired)  # tokens appear while the features arrive
        stream_fires = recognizer.stream.fire_frames
        stream_fires = stream_fires[:-1] if predictor_bias else stream_fires  # the <eos> fire is dropped offline
        assert torch.equal(stream_fires, extraction.fire_frames[0, :lengths[0]])


def test_two_pass_final_is_the_full_context_transcript():
    model = tiny_streaming_model(two_pass=True)
    full_context = tiny_streaming_model(decode_chunk_size=0)  # the same weights, decoded with full context
    for seed, frames in enumerate((150, 64)):
        features = random_features(frames, seed)
        partials, final = streamed(StreamingRecognizer(model), features)
        assert final == offline_greedy(full_context, features)
        assert partials[-1] == StreamingRecognizer(model, two_pass=False).accept(features)  # partials: the stream's


def test_recognizer_refuses_models_it_cannot_stream():
    tokenizer = CharTokenizer.build(["abcdef"], with_blank=True)
    for overrides in ({"type": "transformer_ar"}, {"predictor": "ctc", "ctc_weight": 0.3}):
        raw = tiny_raw_config()
        raw["model"].update(overrides)
        model = build_model(config_from_dict(raw), FEATURE_DIM, tokenizer).eval()
        with pytest.raises(ConfigError, match="streaming needs a PyTorch Paraformer with the CIF"):
            StreamingRecognizer(model)


# ----------------------------------------------------------------------------- dynamic chunk training


def test_dynamic_chunk_training_draws_a_chunk_per_batch():
    """In training each pass is the masked pass at one of model.streaming.chunk_sizes, drawn per batch."""
    model = tiny_streaming_model(chunk_sizes=[2, 0])
    for module in model.modules():
        if isinstance(module, torch.nn.Dropout):
            module.p = 0.0
    features, mask = random_features(60, 0).unsqueeze(0), torch.ones(1, 60, dtype=torch.bool)
    with torch.no_grad():
        chunked = model.encoder(features, mask, chunk_size=2)[0]
        full = model.encoder(features, mask, chunk_size=0)[0]
        assert not torch.allclose(chunked, full)
        model.train()
        torch.manual_seed(0)
        seen = set()
        for _ in range(12):
            out = model.encoder(features, mask)[0]
            seen.add(2 if torch.equal(out, chunked) else 0 if torch.equal(out, full) else None)
    assert seen == {0, 2}


def test_dynamic_chunk_training_step_reaches_every_parameter(tiny_batch):
    raw = tiny_raw_config()
    raw["model"]["streaming"] = {"enabled": True, "chunk_sizes": [2, 4, 0], "left_chunks": 1, "right_frames": 1}
    cfg = config_from_dict(raw)
    torch.manual_seed(0)
    model = build_model(cfg, FEATURE_DIM, CharTokenizer.build(["abcdef"])).train()
    out = model.compute_loss(tiny_batch)
    out.total.backward()
    missing = [name for name, p in model.named_parameters() if p.grad is None or not bool(p.grad.abs().sum() > 0)]
    assert not missing
    assert all(bool(torch.isfinite(p.grad).all()) for p in model.parameters())


# ----------------------------------------------------------------------------- config


BAD_STREAMING = [
    ({"model": {"streaming": {"chunk_sizes": []}}}, "'model.streaming.chunk_sizes' must be a non-empty list"),
    ({"model": {"streaming": {"chunk_sizes": [4, -1]}}}, "'model.streaming.chunk_sizes' must be a non-empty list"),
    ({"model": {"streaming": {"chunk_sizes": 8}}}, "'model.streaming.chunk_sizes' must be a list"),
    ({"model": {"streaming": {"left_chunks": -1}}}, "'model.streaming.left_chunks' must be >= 0 or null"),
    ({"model": {"streaming": {"right_frames": -2}}}, "'model.streaming.right_frames' must be >= 0"),
    ({"model": {"streaming": {"decode_chunk_size": -1}}}, "'model.streaming.decode_chunk_size' must be >= 0"),
    ({"model": {"streaming": {"enabled": "yes"}}}, "'model.streaming.enabled' must be true or false"),
    ({"model": {"streaming": {"chunk": 4}}}, "unknown config key 'model.streaming.chunk'"),
    ({"model": {"type": "transformer_ar", "streaming": {"enabled": True}}},
     "'model.streaming.enabled' must be false unless model.type is 'paraformer' with model.predictor 'cif'"),
    ({"model": {"predictor": "ctc", "ctc_weight": 0.3, "streaming": {"enabled": True}}},
     "'model.streaming.enabled' must be false unless"),
    ({"data": {"utterance_mean": True}, "model": {"streaming": {"enabled": True}}},
     "'data.utterance_mean' must be false with model.streaming.enabled"),
]


@pytest.mark.parametrize("raw, message", BAD_STREAMING)
def test_bad_streaming_configs_name_the_key(raw, message):
    with pytest.raises(ConfigError, match=re.escape(message)):
        config_from_dict(raw)


# ----------------------------------------------------------------------------- the front end and infer.py


def test_streaming_features_equal_the_whole_recording():
    frontend = LogMelFrontend(16000, 20)
    generator = torch.Generator().manual_seed(0)
    normalizer = FeatureNormalizer(torch.randn(20, generator=generator), torch.rand(20, generator=generator) + 0.5)
    waveform = speech_like(1.3, seed=3)
    stream, start, outputs = StreamingFeatures(frontend, normalizer), 0, []
    for size in (100, 7, 4000, 399, 161, 2500, 50):  # pieces shorter and longer than a window (400 samples)
        outputs.append(stream.accept(waveform[start:start + size]))
        start += size
    outputs += [stream.accept(waveform[start:]), stream.finish()]
    torch.testing.assert_close(torch.cat(outputs), normalizer(frontend(waveform)), atol=1e-5, rtol=0)
    short = StreamingFeatures(frontend)  # shorter than one window: the one zero-padded frame
    assert short.accept(waveform[:150]).shape == (0, 20)
    torch.testing.assert_close(short.finish(), frontend(waveform[:150]))
    with pytest.raises(ConfigError, match="utterance's mean"):
        StreamingFeatures(frontend, FeatureNormalizer(torch.zeros(20), torch.ones(20), utterance_mean=True))


def test_stream_file_shows_each_changed_partial_then_the_final(tmp_path):
    model = tiny_streaming_model()
    cfg = model_config()
    loaded = LoadedModel(model, cfg, CharTokenizer.build(["abcdef"]), None, FEATURE_DIM, tmp_path)
    features = random_features(160, 0)
    np.save(tmp_path / "utt.npy", features.numpy())
    updates = list(stream_file(loaded, str(tmp_path / "utt.npy"), chunk_ms=120))  # 12 frames a piece, chunk 3
    partials, final = updates[:-1], updates[-1]
    assert final.final and not any(update.final for update in partials) and len(partials) >= 2
    assert all(a.text != b.text for a, b in zip(partials, partials[1:]))
    assert [update.ms for update in updates] == sorted(update.ms for update in updates) and final.ms == 1600
    assert final.text == loaded.tokenizer.decode(offline_greedy(model, features))
    assert list(stream_file(loaded, str(tmp_path / "utt.npy"))) == updates  # the default: decode_chunk_size 3, 120 ms



def test_infer_stream_final_line_is_the_offline_transcript(tone_checkpoint, tmp_path):
    audio = tone_checkpoint.parents[3] / "u0.wav"
    offline = call_script("infer.py", "--checkpoint", tone_checkpoint, audio, cwd=tmp_path).stdout.splitlines()
    with PackageLog() as log:
        whole = call_script("infer.py", "--checkpoint", tone_checkpoint, "--stream", "--chunk-ms", 100000, audio,
                            cwd=tmp_path)
    assert whole.stdout.splitlines() == offline  # one chunk for the whole file: no partial, the offline transcript
    assert "trained with full context" in log.text

    chunked = streaming_copy(tone_checkpoint, tmp_path)
    offline = call_script("infer.py", "--checkpoint", chunked, audio, cwd=tmp_path).stdout.splitlines()
    lines = call_script("infer.py", "--checkpoint", chunked, "--stream", "--chunk-ms", 600, audio,
                        cwd=tmp_path).stdout.splitlines()
    assert lines[-1:] == offline
    assert call_script("infer.py", "--checkpoint", chunked, "--stream", audio,
                       cwd=tmp_path).stdout.splitlines() == lines  # the checkpoint's decode chunk, 15 frames
    assert all(re.fullmatch(r"\d+ ms\t.*", line) for line in lines[:-1])
    assert load_trained_model(chunked, torch.device("cpu")).model.encoder.streaming.decode_chunk_size == 15


@pytest.mark.parametrize("extra, message", [(["--toy-split", "val"], "--stream decodes one input file"),
                                            (["--timestamps"], "--stream prints text lines only"),
                                            (["--decode", "beam"], "--stream decodes greedily")])
def test_infer_stream_refuses_what_it_cannot_do(tone_checkpoint, tmp_path, extra, message):
    audio = tone_checkpoint.parents[3] / "u0.wav"
    result = call_script("infer.py", "--checkpoint", tone_checkpoint, "--stream", audio, *extra, cwd=tmp_path,
                         check=False)
    assert result.returncode == 2 and message in result.stderr


@pytest.mark.slow
def test_exported_streaming_encoder_is_the_masked_pass(tone_checkpoint, tmp_path):
    """The ONNX encoder of a streaming checkpoint traces the chunk masks with the input's length: at lengths other
    than the traced one it still gives the PyTorch encoder's masked pass."""
    pytest.importorskip("onnxruntime")
    from paraformer_asr.deploy.export import export_checkpoint
    from paraformer_asr.inference import load_model

    chunked = streaming_copy(tone_checkpoint, tmp_path)
    export_checkpoint(chunked, tmp_path / "export")
    torch_model, _ = load_model(chunked, "torch", "cpu", 1)
    onnx_model, _ = load_model(tmp_path / "export", "onnx", "cpu", 1)
    for frames in (90, 230):
        features = torch.randn(1, frames, 20, generator=torch.Generator().manual_seed(frames))
        mask = torch.ones(1, frames, dtype=torch.bool)
        with torch.no_grad():
            expected, _ = torch_model.model.encode(features, mask)
            full_context, _ = torch_model.model.encoder(features, mask, chunk_size=0)
        got, _ = onnx_model.model.encode(features, mask)
        torch.testing.assert_close(got, expected, atol=1e-4, rtol=0)
        assert not torch.allclose(got, full_context, atol=1e-3)
