"""Clips too short for the encoder's subsampling decode to an empty transcript, through the one shared decode entry
(decode/search.transcribe_batches) that infer.py, eval.py, the long-form path and the service all use; the other
utterances of their batch are decoded exactly as without them."""

import json

import numpy as np
import pytest
import torch

from paraformer_asr.config import MIN_INPUT_FRAMES
from paraformer_asr.data.audio import write_audio
from paraformer_asr.data.batching import Collator, pad_short_utterances
from paraformer_asr.decode.longform import LongFormOptions, transcribe_long
from paraformer_asr.decode.search import transcribe_batches
from paraformer_asr.decode.timestamps import frame_clock
from paraformer_asr.errors import DataError
from paraformer_asr.inference import evaluation_loader
from paraformer_asr.transcribe import transcribe_inputs
from paraformer_asr.training.evaluation import evaluate

from asr_helpers import SPEECH_RATE, speech_like, tiny_model, untrained_audio_model

CPU = torch.device("cpu")


def item(features: torch.Tensor, name: str) -> dict:
    return {"id": name, "features": features, "tokens": torch.zeros(0, dtype=torch.long), "text": "",
            "duration_s": features.shape[0] * 0.01}


def test_pad_short_utterances_lengthens_only_the_short_ones_with_zero_frames():
    batch = Collator(0)([item(torch.ones(2, 3), "a"), item(torch.ones(9, 3), "b"), item(torch.ones(5, 3), "c")])
    padded, too_short = pad_short_utterances(batch, 7)
    assert too_short.tolist() == [True, False, True]
    assert padded.feat_lengths.tolist() == [7, 9, 7] and padded.features.shape == (3, 9, 3)
    assert padded.feat_mask.sum(dim=1).tolist() == [7, 9, 7]
    assert torch.equal(padded.features, batch.features)  # the added frames are the zero padding already there
    tiny = Collator(0)([item(torch.ones(1, 3), "d")])
    padded, too_short = pad_short_utterances(tiny, 7)
    assert padded.features.shape == (1, 7, 3) and padded.features[0, 1:].abs().sum() == 0 and too_short.all()
    unchanged, none_short = pad_short_utterances(batch, 2)
    assert unchanged is batch and not none_short.any()


@pytest.mark.parametrize("model_type,method,timed", [("paraformer", "greedy", False), ("paraformer", "beam", False),
                                                     ("paraformer", "greedy", True), ("transformer_ar", "greedy", False),
                                                     ("transformer_ar", "beam", False)])
def test_short_utterances_decode_to_nothing_and_leave_the_others_as_they_are(model_type, method, timed):
    cfg, data, model = tiny_model(model_type)
    clock = frame_clock(cfg) if timed else None
    collate = Collator(data.tokenizer.pad_id)
    normal = [data.val[i] for i in range(3)]
    shortest = MIN_INPUT_FRAMES[cfg.subsampling_factor]
    shorts = [item(normal[0]["features"][:length], f"short{length}") for length in range(shortest)]
    mixed = [shorts[0], normal[0], shorts[-1], normal[1], normal[2]] + shorts[1:-1]
    together, _ = transcribe_batches(model, [collate(mixed)], CPU, method, beam_size=2, clock=clock)
    alone = [transcribe_batches(model, [collate([one])], CPU, method, beam_size=2, clock=clock)[0][0] for one in normal]
    by_id = {t.id: t for t in together}
    assert all(by_id[s["id"]].hyp_tokens == [] for s in shorts)
    assert all(by_id[s["id"]].token_times in (None, []) for s in shorts)
    assert [by_id[t.id].hyp_tokens for t in alone] == [t.hyp_tokens for t in alone]
    for one in alone:  # batch padding moves token times by float rounding only
        assert (by_id[one.id].token_times is None) == (one.token_times is None)
        if one.token_times is not None:
            assert np.allclose(by_id[one.id].token_times, one.token_times, atol=1e-3)


@pytest.fixture(scope="module")
def clips(tmp_path_factory):
    """A 30 ms clip, a 3 ms clip, a clip with no sample and a 0.6 s one (16 kHz WAV)."""
    folder = tmp_path_factory.mktemp("short_clips")
    lengths = {"c30ms.wav": 480, "c3ms.wav": 48, "empty.wav": 0, "normal.wav": 9600}
    for name, length in lengths.items():
        write_audio(folder / name, speech_like(length / SPEECH_RATE, 3), SPEECH_RATE) if length else \
            write_audio(folder / name, np.zeros(0, np.float32), SPEECH_RATE)
    return folder


def test_infer_gives_short_clips_an_empty_transcript(clips):
    loaded = untrained_audio_model()
    names = [str(clips / name) for name in ("c30ms.wav", "normal.wav", "c3ms.wav")]
    results = transcribe_inputs(loaded, CPU, names, LongFormOptions(), timed=True)
    alone = transcribe_inputs(loaded, CPU, names[1:2], LongFormOptions(), timed=True)
    assert [r["text"] for r in results] == ["", alone[0]["text"], ""]
    assert results[0]["words"] == [] and results[1] == alone[0]
    with pytest.raises(DataError, match=r"empty\.wav: file contains no audio samples"):
        transcribe_inputs(loaded, CPU, [str(clips / "empty.wav")], LongFormOptions())


def test_the_long_form_path_gives_a_short_recording_an_empty_transcript(clips):
    for segment in ("pauses", "windows"):
        result = transcribe_long(untrained_audio_model(), clips / "c30ms.wav", CPU, LongFormOptions(segment=segment))
        assert result.text == "" and result.words == [], segment


def test_eval_scores_a_manifest_holding_a_short_clip(clips):
    loaded = untrained_audio_model()
    manifest = clips / "eval.jsonl"
    manifest.write_text("".join(json.dumps({"audio": name, "text": "12"}) + "\n"
                                for name in ("c30ms.wav", "normal.wav")))
    scores, transcripts, hyp_texts = evaluate(loaded.model, evaluation_loader(loaded, manifest=str(manifest)),
                                              loaded.tokenizer, CPU)
    assert scores["num_utterances"] == 2
    short = [text for t, text in zip(transcripts, hyp_texts) if "c30ms" in t.id]
    assert short == [""]


@pytest.mark.parametrize("name, factor", [("none", 1), ("2x", 2), ("4x", 4)])
def test_min_input_frames_is_the_shortest_input_the_subsampling_turns_into_one_frame(name, factor):
    from paraformer_asr.models.encoder import ConvSubsampling, subsampled_lengths

    shortest = MIN_INPUT_FRAMES[factor]
    lengths = torch.arange(shortest + 3)
    assert subsampled_lengths(lengths, factor).clamp(min=0).tolist()[shortest - 1:shortest + 1] == [0, 1]
    subsampling = ConvSubsampling(16, 8, factor, channels=4)
    assert subsampling(torch.zeros(1, shortest, 16)).shape[1] == 1  # the real convolutions agree
