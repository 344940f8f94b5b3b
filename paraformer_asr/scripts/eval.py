"""Evaluate a checkpoint: python scripts/eval.py --checkpoint RUN_DIR_OR_CKPT [--out FILE.json]
    [--save-predictions FILE.jsonl] [--decode greedy|beam] [--beam-size K] [--lm-order N --lm-weight W]
    [--split val|test] [--manifest FILE.jsonl] [--group-by KEY] [--backend torch|onnx] [--num-threads N]
    [--hotwords FILE [--hotword-weight W]] [--chunk-ms MS [--two-pass | --no-two-pass]]

Prints (and with --out writes) JSON: cer, wer, token_accuracy, sequence_accuracy, length_accuracy,
count_error_mean (mean predicted - reference token count), num_utterances, rtf (decoding seconds per second of
input; 10 ms a frame for toy features), and, for a
Paraformer on a manifest with timed words (make_speech_corpus.py --word-times), word_boundary_mae_ms and
word_boundary_words. For a Paraformer, oracle_length_cer: the CER had every token count been right (utterances
counted wrong are decoded again given the true count, by the same search), which separates counting from
recognising. --group-by KEY adds "groups": the scores of each value of the manifest field KEY (e.g. speaker or
accent).
--hotwords FILE biases the search toward the phrases of a hotword list (one a line, phrase<TAB>weight; docs/usage.md,
"Hotwords"); the scores add "hotwords" (the phrases listed) and, on a manifest whose lines list their rare words in a
"hotwords" field (make_speech_corpus.py --rare-words), hotword_recall, hotword_precision (a hotword emitted where it
was not spoken counts against it) and their counts. An empty list gives the unbiased figures of the same fields.
The default split is test when the config has one, else val. A checkpoint records the set its CIF scale was
calibrated on; scoring that set adds "calibration_in_sample": true and a warning (in-sample figures).
--save-predictions lines are {"id", "ref", "hyp"} plus, for a Paraformer, "words" with
their CIF times (the autoregressive baseline gives no times).
A run folder means its checkpoints/best.pt; with --backend onnx, --checkpoint is an export folder
(scripts/export.py). Toy checkpoints are evaluated on their toy split;
--manifest evaluates any JSON Lines manifest with an audio-trained checkpoint.

Streaming: --chunk-ms MS scores what a stream with that chunk gives (a CIF Paraformer; docs/usage.md, "Streaming"):
the encoder attends within chunks of MS (rounded to encoder frames; 0: full context) with the checkpoint's look-back
and look-ahead, decoded greedily in batches. Its transcripts are a StreamingRecognizer's at that chunk (the masked
pass is what a stream computes piece by piece), so the figures are the streaming accuracy without decoding one
utterance at a time. --two-pass scores the two-pass final instead, which is the full-context pass over each
utterance (the same figures as --chunk-ms 0); its default is the checkpoint's model.streaming.two_pass. The scores
add "stream": {"chunk_ms", "chunk_frames", "two_pass"}.

Long recordings: when a manifest has a recording longer than --chunk-seconds (or with --long-form), every
recording is decoded on its own, window by window (decode/longform/; options under "long recordings"), and the
scores gain "long_form": true and "windows"; rtf then counts reading, features and decoding.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from paraformer_asr.cli import add_backend_arguments, parse_decoding_arguments, run_main, window_progress
from paraformer_asr.decode.options import DecodingOptions
from paraformer_asr.decode.streaming import chunk_frames, use_decode_chunk
from paraformer_asr.decode.timestamps import frame_clock
from paraformer_asr.errors import ConfigError
from paraformer_asr.inference import LoadedModel, default_split, load_model
from paraformer_asr.training.evaluation import evaluate_checkpoint


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_backend_arguments(parser)
    parser.add_argument("--out", help="write the scores as JSON here")
    parser.add_argument("--save-predictions", help="write one JSON line per utterance: id, ref, hyp")
    parser.add_argument("--split", choices=("val", "test"), default=None,
                        help="the checkpoint's split to score (default: test when configured, else val)")
    parser.add_argument("--group-by", metavar="KEY", help="also score each value of this manifest field")
    parser.add_argument("--manifest", help="JSON Lines manifest to evaluate (audio checkpoints)")
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--long-form", action="store_true",
                        help="decode every recording window by window, even the short ones")
    parser.add_argument("--chunk-ms", type=float, default=None,
                        help="score a stream's transcripts: the encoder in chunks of this many ms (0: full "
                             "context), greedy")
    parser.add_argument("--two-pass", action=argparse.BooleanOptionalAction, default=None,
                        help="with --chunk-ms: score the two-pass final, a full-context pass (default: the "
                             "checkpoint's model.streaming.two_pass)")
    args, options, decoding = parse_decoding_arguments(parser, argv)
    if args.batch_size < 1:
        raise ConfigError("--batch-size must be >= 1")
    if args.chunk_ms is not None:
        decoding = stream_decoding(decoding)
    elif args.two_pass is not None:
        raise ConfigError("--two-pass scores a stream's final: give --chunk-ms too")

    loaded, device = load_model(args.checkpoint, args.backend, args.device, args.num_threads)
    stream = None if args.chunk_ms is None else use_stream_chunk(loaded, args.chunk_ms, args.two_pass)
    split = args.split or default_split(loaded)
    result, predictions = evaluate_checkpoint(loaded, device, split, args.manifest, options, decoding,
                                              args.batch_size, args.long_form, progress=window_progress(),
                                              group_by=args.group_by)
    if stream is not None:
        result["stream"] = stream
    text = json.dumps(result, indent=2)
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(text + "\n", encoding="utf-8")
    if args.save_predictions:
        Path(args.save_predictions).parent.mkdir(parents=True, exist_ok=True)
        with open(args.save_predictions, "w", encoding="utf-8") as handle:
            for line in predictions:
                handle.write(json.dumps(line) + "\n")
    print(text)
    return 0


def stream_decoding(decoding: DecodingOptions) -> DecodingOptions:
    """--chunk-ms: a stream decodes greedily; ConfigError when search options were given."""
    if decoding != DecodingOptions(method="greedy" if decoding.method == "greedy" else None):
        raise ConfigError("--chunk-ms scores a stream, which decodes greedily: drop the search options (--decode "
                          "beam, --beam-size, the LM, length candidates, CTC scores, hotwords)")
    return DecodingOptions(method="greedy", beam_size=1, lm_order=0, lm_weight=0.0, length_candidates=0,
                           count_prior=0.0, ctc_score_weight=0.0)  # not the checkpoint's decode section


def use_stream_chunk(loaded: LoadedModel, chunk_ms: float, two_pass: bool | None) -> dict:
    """The model's encoder set to the chunk the stream's final comes from (full context with two-pass) -> what the
    scores add under "stream"."""
    chunk = chunk_frames(chunk_ms, frame_clock(loaded.cfg))
    two_pass = loaded.cfg.model.streaming.two_pass if two_pass is None else two_pass
    use_decode_chunk(loaded.model, 0 if two_pass else chunk)
    return {"chunk_ms": chunk_ms, "chunk_frames": chunk, "two_pass": two_pass}


if __name__ == "__main__":
    sys.exit(run_main(main))
