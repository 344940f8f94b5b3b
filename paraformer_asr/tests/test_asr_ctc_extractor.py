"""The CTC token extractor (model.predictor: ctc): forced alignment, frame merge, pooling, the Paraformer with it."""

import itertools

import pytest
import torch

from asr_helpers import tiny_raw_config
from asr_reference import loop_greedy_frame_tokens
from paraformer_asr.config import config_from_dict
from paraformer_asr.data.batching import Collator
from paraformer_asr.data.setup import build_data
from paraformer_asr.errors import ConfigError
from paraformer_asr.factory import build_model
from paraformer_asr.inference import model_from_checkpoint
from paraformer_asr.models.ctc_extractor import (BLANK_OFFSET_STEP, blank_offsets, forced_alignment,
                                                 greedy_frame_tokens, offset_blank, pool_frames)
from paraformer_asr.training.checkpointing import load_checkpoint, save_checkpoint

BLANK = 0


def collapse(labels) -> list[int]:
    """A CTC label path -> its output: repeats merged, blanks dropped."""
    return [label for label, _ in itertools.groupby(labels) if label != BLANK]


def brute_force_best(log_probs: torch.Tensor, target: list[int]) -> float:
    """The highest path score among all label paths of log_probs [T, V] that collapse to ``target``."""
    frames, vocab = log_probs.shape
    scores = [sum(float(log_probs[t, label]) for t, label in enumerate(path))
              for path in itertools.product(range(vocab), repeat=frames) if collapse(path) == target]
    return max(scores) if scores else float("-inf")


@pytest.mark.parametrize("seed", range(6))
def test_forced_alignment_matches_brute_force(seed):
    gen = torch.Generator().manual_seed(seed)
    frames, vocab = 5, 3
    targets = [[1, 2], [1, 1], [2], [1, 1, 2]]  # a repeat needs a blank between; [1, 1, 2] fits 5 frames
    log_probs = torch.log_softmax(torch.randn(len(targets), frames, vocab, generator=gen), dim=-1)
    padded = torch.zeros(len(targets), 3, dtype=torch.long)
    for row, target in enumerate(targets):
        padded[row, :len(target)] = torch.tensor(target)
    lengths = torch.tensor([len(t) for t in targets])
    mask = torch.ones(len(targets), frames, dtype=torch.bool)
    frame_tokens, feasible = forced_alignment(log_probs, mask, padded, lengths, BLANK)
    assert feasible.all()
    for row, target in enumerate(targets):
        path = [target[k] if k >= 0 else BLANK for k in frame_tokens[row].tolist()]
        assert collapse(path) == target
        score = sum(float(log_probs[row, t, label]) for t, label in enumerate(path))
        assert score == pytest.approx(brute_force_best(log_probs[row], target), abs=1e-5)


def test_forced_alignment_ignores_padding_and_splits_infeasible_rows_evenly():
    gen = torch.Generator().manual_seed(0)
    log_probs = torch.log_softmax(torch.randn(1, 4, 3, generator=gen), dim=-1)
    target, lengths = torch.tensor([[1, 2]]), torch.tensor([2])
    alone, _ = forced_alignment(log_probs, torch.ones(1, 4, dtype=torch.bool), target, lengths, BLANK)
    padded_probs = torch.cat([log_probs, torch.log_softmax(torch.randn(1, 3, 3, generator=gen), dim=-1)], dim=1)
    padded_mask = torch.tensor([[True] * 4 + [False] * 3])
    padded, _ = forced_alignment(padded_probs, padded_mask, target, lengths, BLANK)
    assert padded[0, :4].tolist() == alone[0].tolist() and padded[0, 4:].tolist() == [-1, -1, -1]
    # [1, 1, 1] needs 5 frames: with 4 the row is infeasible and its 4 frames are split over the 3 tokens.
    tokens, feasible = forced_alignment(log_probs, torch.ones(1, 4, dtype=torch.bool), torch.tensor([[1, 1, 1]]),
                                        torch.tensor([3]), BLANK)
    assert not feasible[0] and tokens[0].tolist() == [0, 0, 1, 2]


def test_greedy_merge_matches_a_loop():
    gen = torch.Generator().manual_seed(1)
    log_probs = torch.randn(4, 30, 4, generator=gen)
    log_probs[:, :, BLANK] += 0.5  # some blanks between the labels
    lengths = torch.tensor([30, 17, 1, 0])
    mask = torch.arange(30).unsqueeze(0) < lengths.unsqueeze(1)
    frame_tokens = greedy_frame_tokens(log_probs, mask, BLANK)
    for row in range(4):
        assert frame_tokens[row].tolist() == loop_greedy_frame_tokens(log_probs[row], int(lengths[row]), BLANK)


def test_pool_frames_matches_a_loop():
    gen = torch.Generator().manual_seed(2)
    hidden = torch.randn(2, 6, 3, generator=gen)
    frame_tokens = torch.tensor([[-1, 0, 0, -1, 1, 1], [0, -1, 2, 2, -1, -1]])  # row 1: token 1 has no frame
    num_tokens = torch.tensor([2, 3])
    embeddings, starts, ends = pool_frames(hidden, frame_tokens, num_tokens)
    assert embeddings.shape == (2, 3, 3)
    for row in range(2):
        for token in range(3):
            frames = [t for t in range(6) if int(frame_tokens[row, t]) == token]
            expected = hidden[row, frames].mean(0) if frames else torch.zeros(3)
            assert torch.allclose(embeddings[row, token], expected)
            span = (frames[0], frames[-1] + 1) if frames else (0, 0)
            assert (int(starts[row, token]), int(ends[row, token])) == span


def test_blank_offsets_run_from_fewest_tokens_to_most_and_shift_only_the_blank():
    step = BLANK_OFFSET_STEP
    assert blank_offsets(2).tolist() == pytest.approx([2 * step, step, 0.0, -step, -2 * step])
    log_probs = torch.log_softmax(torch.randn(2, 5, 4, generator=torch.Generator().manual_seed(3)), dim=-1)
    offsets = blank_offsets(1)
    shifted = offset_blank(log_probs, offsets, BLANK)  # [B*K, T, V]
    assert shifted.shape == (6, 5, 4)
    for row in range(2):
        for k, offset in enumerate(offsets.tolist()):
            expected = log_probs[row].clone()
            expected[:, BLANK] += offset
            assert torch.allclose(shifted[row * 3 + k], expected)
    frames = torch.ones(6, 5, dtype=torch.bool)
    counts = (greedy_frame_tokens(shifted, frames, BLANK).max(dim=1).values + 1).view(2, 3)
    plain = (greedy_frame_tokens(log_probs, frames[:2], BLANK).max(dim=1).values + 1)
    assert torch.equal(counts[:, 1], plain)  # offset 0 is the plain greedy path


def _ctc_setup(predictor: str = "ctc", ctc_queries: str = "states"):
    raw = tiny_raw_config()
    raw["model"].update(predictor=predictor, ctc_weight=0.3, ctc_queries=ctc_queries)
    cfg = config_from_dict(raw)
    data = build_data(cfg)
    torch.manual_seed(0)
    model = build_model(cfg, data.input_dim, data.tokenizer)
    batch = Collator(data.tokenizer.pad_id)([data.train[i] for i in range(4)])
    return cfg, data, model, batch


@pytest.mark.parametrize("ctc_queries", ["states", "posteriors"])
def test_training_queries_equal_the_target_length_and_gradients_reach_encoder_and_ctc_head(ctc_queries):
    _, _, model, batch = _ctc_setup(ctc_queries=ctc_queries)
    model.train()
    out = model.compute_loss(batch)
    assert out.cif.num_tokens.tolist() == batch.token_lengths.tolist()
    assert out.cif.embeddings.shape[:2] == batch.tokens.shape and out.logits.shape[:2] == batch.tokens.shape
    assert set(out.terms) == {"ce", "ctc"}
    out.total.backward()
    parts = ("encoder", "ctc", "decoder") + (("predictor",) if ctc_queries == "posteriors" else ())
    for name in parts:
        grads = [p.grad for n, p in model.named_parameters() if n.startswith(name + ".")]
        assert all(g is not None for g in grads) and sum(float(g.abs().sum()) for g in grads) > 0, name


@pytest.mark.parametrize("predictor", ["cif", "ctc"])
def test_padding_does_not_change_an_utterance_decoding(predictor):
    _, data, model, _ = _ctc_setup(predictor)
    model.eval()
    items = sorted((data.val[i] for i in range(4)), key=lambda item: item["features"].shape[0])
    collate = Collator(data.tokenizer.pad_id)
    together = collate([items[-1], items[0]])  # the shortest padded to the longest
    short_row = 1
    alone = collate([items[0]])
    assert together.features.shape[1] > alone.features.shape[1]
    log_probs_alone, extraction_alone = model.posteriors(alone.features, alone.feat_mask)
    log_probs_both, extraction_both = model.posteriors(together.features, together.feat_mask)
    count = int(extraction_alone.num_tokens[0])
    assert int(extraction_both.num_tokens[short_row]) == count
    assert torch.allclose(log_probs_both[short_row, :count], log_probs_alone[0, :count], atol=1e-4)
    starts_alone, ends_alone = model.token_spans(extraction_alone)
    starts_both, ends_both = model.token_spans(extraction_both)
    assert torch.allclose(starts_both[short_row, :count], starts_alone[0, :count], atol=1e-6)
    assert torch.allclose(ends_both[short_row, :count], ends_alone[0, :count], atol=1e-6)


def test_posterior_queries_are_each_tokens_mean_ctc_posterior_through_the_map():
    _, data, model, batch = _ctc_setup(ctc_queries="posteriors")
    with torch.no_grad():  # a CTC head that emits: bias it away from blank so the greedy path has tokens
        model.ctc.proj.bias[data.tokenizer.blank_id] = -5.0
    model.eval()
    with torch.no_grad():
        encoder_out, enc_mask = model.encode(batch.features, batch.feat_mask)
        extraction, log_probs = model.extract_tokens(encoder_out, enc_mask)
    assert int(extraction.num_tokens.min()) > 0
    posterior_map = model.predictor.posterior_map
    for row in range(batch.size):
        for token in range(int(extraction.num_tokens[row])):
            frames = (extraction.frame_tokens[row] == token).nonzero().flatten()
            mean_posterior = log_probs[row, frames].exp().mean(dim=0)  # [V]
            assert torch.allclose(extraction.embeddings[row, token], posterior_map(mean_posterior), atol=1e-5)


def test_posterior_queries_length_candidates_match_greedy_in_the_middle_and_are_refused_without_the_ctc_extractor():
    _, data, model, batch = _ctc_setup(ctc_queries="posteriors")
    with torch.no_grad():
        model.ctc.proj.bias[data.tokenizer.blank_id] = -5.0
    model.eval()
    greedy_tokens, greedy_lengths, _ = model.decode_aligned(batch.features, batch.feat_mask)
    # a prior that forbids every count but the plain path's: the candidates must give the greedy decoding
    tokens, lengths, _ = model.decode_aligned(batch.features, batch.feat_mask, length_candidates=2, count_prior=1e6)
    assert torch.equal(lengths, greedy_lengths)
    assert torch.equal(tokens[:, :greedy_tokens.shape[1]], greedy_tokens)
    raw = tiny_raw_config()
    raw["model"].update(predictor="cif", ctc_weight=0.3, ctc_queries="posteriors")
    with pytest.raises(ConfigError, match="model.ctc_queries"):
        config_from_dict(raw)


def test_ctc_spans_are_ordered_and_beam_search_accepts_the_ctc_extractor():
    _, data, model, batch = _ctc_setup()
    torch.manual_seed(3)
    with torch.no_grad():  # a CTC head that emits: bias it away from blank so the greedy path has tokens
        model.ctc.proj.bias[data.tokenizer.blank_id] = -5.0
    model.eval()
    tokens, lengths, extraction = model.decode_aligned(batch.features, batch.feat_mask)
    starts, ends = model.token_spans(extraction)
    assert int(lengths.min()) > 0
    for row in range(batch.size):
        n = int(lengths[row])
        assert (ends[row, :n] > starts[row, :n]).all() and (starts[row, 1:n] >= ends[row, :n - 1]).all()
    beams, scores, beam_lengths = model.beam_search(batch.features, batch.feat_mask, beam_size=3)
    assert beams.shape[:2] == (batch.size, 3) and torch.equal(beam_lengths[:, 0], lengths)
    assert torch.equal(beams[:, 0, :tokens.shape[1]], tokens)


def test_checkpoint_round_trip_with_ctc_and_old_configs_load_as_cif(tmp_path):
    cfg, data, model, batch = _ctc_setup()
    model.eval()
    payload = {"model": model.state_dict(), "config": cfg.to_dict(), "tokenizer": data.tokenizer.to_dict(),
               "input_dim": data.input_dim, "normalizer": None}
    save_checkpoint(payload, tmp_path / "ctc.pt")
    loaded = model_from_checkpoint(load_checkpoint(tmp_path / "ctc.pt"), tmp_path / "ctc.pt", torch.device("cpu"))
    assert loaded.cfg.model.predictor == "ctc" and not loaded.model.calibrates_cif
    assert torch.equal(loaded.model.greedy_decode(batch.features, batch.feat_mask)[0],
                       model.greedy_decode(batch.features, batch.feat_mask)[0])
    old_cfg, _, cif_model, _ = _ctc_setup("cif")
    old_config = old_cfg.to_dict()
    del old_config["model"]["predictor"]  # written before the option existed
    save_checkpoint({**payload, "model": cif_model.state_dict(), "config": old_config}, tmp_path / "old.pt")
    old = model_from_checkpoint(load_checkpoint(tmp_path / "old.pt"), tmp_path / "old.pt", torch.device("cpu"))
    assert old.cfg.model.predictor == "cif" and old.model.calibrates_cif


def test_ctc_predictor_needs_a_ctc_weight():
    raw = tiny_raw_config()
    raw["model"].update(predictor="ctc", ctc_weight=0.0)
    with pytest.raises(ConfigError, match="model.ctc_weight"):
        config_from_dict(raw)
    raw["model"].update(predictor="rnn", ctc_weight=0.3)
    with pytest.raises(ConfigError, match="model.predictor"):
        config_from_dict(raw)
