"""CIF timestamps: token spans against a frame-by-frame reference, the frame clock, word grouping, and times on a
trained toy model against the toy set's true boundaries."""

import warnings

import pytest
import torch

from paraformer_asr.checks import lengths_to_mask
from paraformer_asr.config import config_from_dict
from paraformer_asr.data.batching import Collator
from paraformer_asr.data.setup import build_data
from paraformer_asr.data.tokenizer import CharTokenizer
from paraformer_asr.decode.search import transcribe_batches
from paraformer_asr.decode.subtitles import format_srt, group_cues, srt_time
from paraformer_asr.decode.timestamps import (FrameClock, alignment_plot_data, cif_fire_spans, cif_token_spans,
                                              decoded_token_times, extend_ends_through_speech, frame_clock,
                                              group_words, spans_to_ms, speech_frames, word_times)
from paraformer_asr.errors import ConfigError
from paraformer_asr.factory import build_model
from paraformer_asr.models.cif import inference_token_count
from paraformer_asr.training.plots import plot_cif_alignments

from asr_helpers import tiny_model, tiny_raw_config
from asr_reference import loop_extended_ends, loop_token_spans


def _alphas(seed: int, batch=4, frames=50, scale=0.6):
    gen = torch.Generator().manual_seed(seed)
    lengths = torch.randint(5, frames + 1, (batch,), generator=gen)
    alphas = torch.rand(batch, frames, generator=gen) * scale
    silence = torch.rand(batch, frames, generator=gen) < 0.3  # stretches of near-silence
    alphas = torch.where(silence, alphas * 0.02, alphas)
    return alphas * lengths_to_mask(lengths, frames)


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("min_weight", [0.0, 0.05, 0.2])
@pytest.mark.parametrize("scaled", [False, True])
def test_token_spans_equal_the_frame_by_frame_reference(seed, min_weight, scaled):
    alphas = _alphas(seed)
    if scaled:  # training-style alphas: scaled to a target count, several fires per frame possible
        targets = torch.tensor([3, 40, 1, 12])
        alphas = alphas * (targets / alphas.sum(1)).unsqueeze(1)
        counts = targets
    else:
        counts = inference_token_count(alphas)
    starts, ends = cif_token_spans(alphas, counts, min_weight)
    ref_starts, ref_ends = loop_token_spans(alphas.double(), counts, min_weight)
    for row in range(alphas.shape[0]):
        n = int(counts[row])
        assert torch.allclose(starts[row, :n], torch.tensor(ref_starts[row], dtype=torch.float64), atol=1e-9)
        assert torch.allclose(ends[row, :n], torch.tensor(ref_ends[row], dtype=torch.float64), atol=1e-9)
        assert float(starts[row, n:].abs().sum() + ends[row, n:].abs().sum()) == 0.0


@pytest.mark.parametrize("seed", range(3))
def test_token_spans_are_ordered_and_inside_the_utterance(seed):
    alphas = _alphas(seed, batch=6, frames=80, scale=1.2)
    counts = inference_token_count(alphas)
    starts, ends = cif_token_spans(alphas, counts)
    frames = (alphas > 0).sum(1)
    for row in range(6):
        n = int(counts[row])
        s, e = starts[row, :n], ends[row, :n]
        assert bool((s <= e).all()) and bool((e[:-1] <= s[1:]).all())
        assert bool((s >= 0).all()) and bool((e <= frames[row]).all())


def test_silence_between_tokens_is_not_given_to_the_next_token():
    # token 0 over frames 0-1, five near-silent frames, token 1 over frames 7-8 (its mass ends exactly there)
    alphas = torch.tensor([[0.5, 0.5, 0.01, 0.01, 0.01, 0.01, 0.01, 0.45, 0.5]])
    starts, ends = cif_token_spans(alphas, torch.tensor([2]))
    assert torch.allclose(starts[0], torch.tensor([0.0, 7.0], dtype=torch.float64))
    assert torch.allclose(ends[0], torch.tensor([2.0, 9.0], dtype=torch.float64))
    raw_starts, _ = cif_token_spans(alphas, torch.tensor([2]), min_weight=0.0)
    assert float(raw_starts[0, 1]) == pytest.approx(2.0)  # without trimming, token 1 begins right after the fire


def test_frame_clock_maps_encoder_frames_through_subsampling_and_hop():
    toy = FrameClock(hop_ms=10.0, window_ms=10.0, subsampling_factor=4)
    assert toy.encoder_frame_ms == 40.0
    # encoder frame t is centred on input frame 4t + 3, i.e. at 40t + 35 ms; its stretch is 40 ms wide
    assert torch.allclose(toy.ms(torch.tensor([0.0, 0.5, 2.0])), torch.tensor([15.0, 35.0, 95.0]))
    assert float(FrameClock(10.0, 10.0, 1).ms(torch.tensor(3.0))) == 30.0  # no subsampling: frame t is [10t, 10t+10)
    assert float(FrameClock(10.0, 25.0, 2).ms(torch.tensor(1.0))) == 20.0 + 12.5  # log-mel: 25 ms windows
    assert frame_clock(config_from_dict(tiny_raw_config())) == FrameClock(10.0, 10.0, 2)
    speech = config_from_dict({"data": {"kind": "manifest", "train_manifest": "a", "val_manifest": "b"}})
    assert frame_clock(speech) == FrameClock(10.0, 25.0, 4)


def token_times_ms(alphas, num_tokens, encoder_frames, clock, durations_ms, extra_fires=0):
    """CIF token times as decoding reads them: the fire spans, then milliseconds."""
    starts, ends = cif_fire_spans(alphas, num_tokens, extra_fires)  # [B, N] encoder-frame positions
    return spans_to_ms(starts, ends, num_tokens, encoder_frames, clock, durations_ms)


def test_token_times_scale_alphas_to_the_fires_start_at_zero_and_end_at_the_duration():
    alphas = torch.tensor([[0.6, 0.6, 0.6, 0.6, 0.0], [0.9, 0.9, 0.0, 0.0, 0.0]])
    clock = FrameClock(10.0, 10.0, 4)
    starts, ends = token_times_ms(alphas, torch.tensor([2, 2]), torch.tensor([4, 2]), clock,
                                  torch.tensor([190.0, 60.0]))
    # sums 2.4 and 1.8 are scaled to the 2 tokens: 0.5 and 1.0 a frame, so token 0 ends at frames 2 and 1
    assert torch.allclose(starts, torch.tensor([[0.0, 95.0], [0.0, 55.0]], dtype=torch.float64))
    assert torch.allclose(ends, torch.tensor([[95.0, 190.0], [55.0, 60.0]], dtype=torch.float64))  # position 0 is 0 ms, the last frame's end the duration
    # with an end-of-sentence fire (predictor_bias 1), 3 fires share the mass: the 2 tokens end earlier
    _, ends = token_times_ms(alphas[:1], torch.tensor([2]), torch.tensor([4]), clock, torch.tensor([190.0]), 1)
    assert torch.allclose(ends[0], torch.tensor([40 * 4 / 3 + 15, 40 * 8 / 3 + 15], dtype=torch.float64))


@pytest.mark.parametrize("pieces, expected", [
    (list("ab cd"), [("ab", 0, 1), ("cd", 3, 4)]),
    (list(" ab  c "), [("ab", 1, 2), ("c", 5, 5)]),
    (["▁he", "llo", "▁", "wor", "ld", "▁!"], [("hello", 0, 1), ("world", 3, 4), ("!", 5, 5)]),
    (["▁", "▁a", "b", "▁▁", "c"], [("ab", 1, 2), ("c", 4, 4)]),
    (["9", "", "3"], [("93", 0, 2)]),  # a special token inside a word adds no text
    ([], []),
])
def test_words_are_grouped_from_surface_pieces(pieces, expected):
    assert group_words(pieces) == expected


def test_word_times_span_their_tokens_and_char_pieces_follow_the_ids():
    tokenizer = CharTokenizer.build(["ab cd"])
    ids = tokenizer.encode("ab cd")
    assert tokenizer.pieces(ids) == list("ab cd") and tokenizer.pieces(torch.tensor(ids[:2])) == ["a", "b"]
    assert tokenizer.pieces([tokenizer.bos_id, ids[0]]) == ["", "a"]
    times = [(0, 10), (10, 30), (35, 40), (50, 60), (60, 90)]
    assert word_times(tokenizer.pieces(ids), times) == [{"word": "ab", "start_ms": 0, "end_ms": 30},
                                                       {"word": "cd", "start_ms": 50, "end_ms": 90}]
    with pytest.raises(ValueError):
        word_times(["a"], [])


def test_alignment_plot_data_and_figure(tmp_path):
    cfg, data, model = tiny_model()
    batch = Collator(data.tokenizer.pad_id)([data.val[i] for i in range(3)])
    clock = frame_clock(cfg)
    tokens, lengths, cif = model.decode_aligned(batch.features, batch.feat_mask)
    times = decoded_token_times(model, cif, batch.features, batch.feat_lengths, batch.durations, clock)
    pieces = [data.tokenizer.pieces(row[:n]) for row, n in zip(tokens.tolist(), lengths.tolist())]
    frames = model.encoder.output_lengths(batch.feat_lengths)
    plots = alignment_plot_data(batch, cif.integrated_alphas, frames, times, pieces, clock, limit=2)
    assert len(plots) == 2
    first = plots[0]
    assert len(first["features"]) == int(batch.feat_lengths[0]) and len(first["alphas"]) == int(frames[0])
    assert len(first["tokens"]) == len(first["starts_ms"]) == len(first["ends_ms"]) == int(lengths[0])
    assert first["reference_ms"] == ((batch.boundaries[0][batch.boundaries[0] >= 0] + 1) * 10.0).tolist()
    plot_cif_alignments(plots, ["a", "b"], tmp_path / "cif.png")
    assert (tmp_path / "cif.png").stat().st_size > 10_000
    silent = {**first, "tokens": [], "starts_ms": [], "ends_ms": [], "reference_ms": []}  # an untrained model's
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # matplotlib warns of a legend without labels
        plot_cif_alignments([silent], ["nothing fired"], tmp_path / "silent.png")
    assert (tmp_path / "silent.png").is_file()


@pytest.fixture(scope="module")
def trained_toy():
    """The tiny model trained 600 steps on a toy set with sharp token boundaries (seconds: its tests are slow)."""
    raw = tiny_raw_config()
    raw["data"]["toy"].update({"num_train": 192, "noise_std": 0.05, "transition_frames": 0})
    raw["model"]["dropout"] = 0.0
    cfg = config_from_dict(raw)
    data = build_data(cfg)
    torch.manual_seed(0)
    model = build_model(cfg, data.input_dim, data.tokenizer)
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    collate = Collator(data.tokenizer.pad_id)
    items = [data.train[i] for i in range(len(data.train))]
    order = torch.Generator().manual_seed(0)
    for _ in range(600):
        batch = collate([items[i] for i in torch.randint(0, len(items), (16,), generator=order).tolist()])
        loss = model.compute_loss(batch).total
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    return cfg, data, model.eval()


@pytest.mark.slow
def test_times_on_a_trained_toy_model_match_the_true_boundaries_within_one_encoder_frame(trained_toy):
    cfg, data, model = trained_toy
    clock = frame_clock(cfg)
    batch = Collator(data.tokenizer.pad_id)([data.val[i] for i in range(16)])
    transcripts, _ = transcribe_batches(model, [batch], torch.device("cpu"), clock=clock)
    checked = 0
    for row, transcript in enumerate(transcripts):
        starts = torch.tensor([start for start, _ in transcript.token_times], dtype=torch.float64)
        ends = torch.tensor([end for _, end in transcript.token_times], dtype=torch.float64)
        assert bool((starts <= ends).all()) and bool((ends[:-1] <= starts[1:]).all())  # increasing
        assert bool((starts >= 0).all()) and bool((ends <= 1000 * transcript.duration_s + 1e-6).all())
        if transcript.hyp_tokens != transcript.ref_tokens:
            continue
        true_ends = (batch.boundaries[row, :len(transcript.ref_tokens)] + 1).double() * clock.hop_ms
        true_starts = torch.cat([torch.zeros(1, dtype=torch.float64), true_ends[:-1]])
        assert (ends - true_ends).abs().max() <= clock.encoder_frame_ms, (transcript.id, ends, true_ends)
        assert (starts - true_starts).abs().max() <= clock.encoder_frame_ms, (transcript.id, starts, true_starts)
        checked += 1
    assert checked >= 10  # most of the 16 utterances are recognised exactly


def test_timestamps_of_the_autoregressive_baseline_are_refused():
    _, data, model = tiny_model("transformer_ar")
    batch = Collator(data.tokenizer.pad_id)([data.val[0]])
    with pytest.raises(ConfigError, match="autoregressive baseline"):
        transcribe_batches(model, [batch], torch.device("cpu"), clock=FrameClock(10.0, 10.0, 2))


def test_subtitle_cues_and_srt_format():
    words = [{"word": w, "start_ms": s, "end_ms": e} for w, s, e in [
        ("one", 0, 300), ("two", 350, 700), ("three", 2000, 2400), ("four", 2450, 2900)]]
    cues = group_cues(words)
    assert [cue.text for cue in cues] == ["one two", "three four"]  # the 1.3 s pause starts a new cue
    assert [cue.text for cue in group_cues(words, max_chars=8)] == ["one two", "three", "four"]
    assert [cue.text for cue in group_cues(words[:2], max_seconds=0.5)] == ["one", "two"]
    assert srt_time(3_723_004.4) == "01:02:03,004" and srt_time(-5) == "00:00:00,000"
    assert format_srt(cues) == ("1\n00:00:00,000 --> 00:00:00,700\none two\n\n"
                                "2\n00:00:02,000 --> 00:00:02,900\nthree four\n")


@pytest.mark.parametrize("seed", range(6))
def test_token_ends_carried_through_speech_equal_the_frame_by_frame_reference(seed):
    generator = torch.Generator().manual_seed(seed)
    clock = FrameClock(10.0, 25.0, 4)
    batch, frames, tokens = 3, 60, 5
    speech = torch.rand(batch, frames, generator=generator) < 0.6  # [B, T]
    lengths = torch.tensor([frames, 41, 23])
    speech &= lengths_to_mask(lengths, frames)
    num_tokens = torch.tensor([5, 3, 0])
    durations = lengths.double() * 10.0 + 15.0
    bounds = torch.sort(torch.rand(batch, 2 * tokens, generator=generator, dtype=torch.float64), dim=1).values
    starts, ends = (bounds[:, 0::2] * durations.unsqueeze(1), bounds[:, 1::2] * durations.unsqueeze(1))  # ordered
    valid = torch.arange(tokens).unsqueeze(0) < num_tokens.unsqueeze(1)
    starts, ends = starts * valid, ends * valid
    got = extend_ends_through_speech(starts, ends, num_tokens, speech, clock, durations)
    for row in range(batch):
        n = int(num_tokens[row])
        expected = loop_extended_ends(starts[row, :n].tolist(), ends[row, :n].tolist(),
                                      speech[row, :int(lengths[row])].tolist(), 10.0, 25.0, float(durations[row]))
        assert got[row, :n].tolist() == pytest.approx(expected)
        assert (got[row, n:] == 0).all()
    later = got[:, :-1]  # never past the next token's start, never earlier than before
    assert ((later <= starts[:, 1:]) | ~valid[:, 1:] | (later == ends[:, :-1])).all() and (got >= ends).all()


def test_speech_frames_are_the_loud_ones_whatever_the_normalisation():
    loud = torch.tensor([0.0] * 10 + [5.0] * 5 + [0.2] * 5 + [4.0] * 4)  # silence, a word, a near-floor pause, a word
    features = loud.view(1, -1, 1).expand(2, -1, 8).clone()
    features[1] = features[1] * 3.0 - 7.0  # an affine normalisation reads the same
    speech = speech_frames(features, torch.tensor([24, 20]))
    assert speech[0].tolist() == [False] * 10 + [True] * 5 + [False] * 5 + [True] * 4
    assert speech[1].tolist() == [False] * 10 + [True] * 5 + [False] * 9
