"""benchmark_decoding: the same dict for both model types, consistent with the evaluation's scores."""

import pytest
import torch

from paraformer_asr.data.batching import Collator
from paraformer_asr.decode.search import transcribe_batches
from paraformer_asr.training.evaluation import evaluate
from paraformer_asr_tools.benchmarks.decoding import benchmark_decoding

from asr_helpers import tiny_model

KEYS = {"method", "beam_size", "lm_order", "lm_weight", "length_candidates", "count_prior", "ctc_score_weight",
        "length_penalty", "phrase_candidates",
        "hotwords", "num_utterances", "num_batches", "batch_size", "seconds", "audio_seconds", "rtf", "latency_ms_per_utterance",
        "latency_ms_per_batch", "encoder_ms_per_utterance", "reference_tokens_per_utterance",
        "decoder_passes_per_utterance", "cer"}


@pytest.mark.parametrize("model_type", ["paraformer", "transformer_ar"])
def test_benchmark_decoding_reports_consistent_numbers(model_type):
    _, data, model = tiny_model(model_type)
    collate = Collator(data.tokenizer.pad_id)
    batches = [collate([data.val[i] for i in range(start, start + 4)]) for start in (0, 4, 8)]
    device = torch.device("cpu")
    for method in ("greedy", "beam"):
        result = benchmark_decoding(model, batches, method, device, data.tokenizer, beam_size=2)
        assert set(result) == KEYS and result["method"] == method
        assert result["num_utterances"] == 12 and result["num_batches"] == 3 and result["batch_size"] == 4
        assert result["beam_size"] == (2 if method == "beam" else 1)
        assert result["seconds"] > 0 and result["audio_seconds"] == pytest.approx(sum(float(b.durations.sum())
                                                                                      for b in batches))
        assert result["rtf"] == pytest.approx(result["seconds"] / result["audio_seconds"])
        assert result["latency_ms_per_utterance"] == pytest.approx(1000 * result["seconds"] / 12)
        assert result["reference_tokens_per_utterance"] == pytest.approx(
            sum(float(b.token_lengths.sum()) for b in batches) / 12)
        scores, _, _ = evaluate(model, batches, data.tokenizer, device, method, beam_size=2)
        assert result["cer"] == pytest.approx(scores["cer"])
        hypotheses = [t.hyp_tokens for t in transcribe_batches(model, batches, device, method=method, beam_size=2)[0]]
        expected_passes = 1.0 if model_type == "paraformer" else sum(len(h) + 1 for h in hypotheses) / 12
        assert result["decoder_passes_per_utterance"] == pytest.approx(expected_passes)
        encoder_ms = result["encoder_ms_per_utterance"]  # the encoder alone: timed on greedy rows only
        assert (encoder_ms is None) if method == "beam" else encoder_ms > 0
    with pytest.raises(ValueError, match="greedy"):
        benchmark_decoding(model, batches, "sampling", device, data.tokenizer)
