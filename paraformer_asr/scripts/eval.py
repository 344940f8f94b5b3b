"""Evaluate a checkpoint: python scripts/eval.py --checkpoint RUN_DIR_OR_CKPT [--out FILE.json]
    [--save-predictions FILE.jsonl] [--decode greedy|beam] [--beam-size K] [--lm-order N --lm-weight W]
    [--split val|test] [--manifest FILE.jsonl]

Prints (and with --out writes) JSON: cer, wer, token_accuracy, sequence_accuracy, length_accuracy,
num_utterances, rtf (decoding seconds per second of input; 10 ms a frame for toy features), and, for a
Paraformer on a manifest with timed words (make_speech_corpus.py --word-times), word_boundary_mae_ms and
word_boundary_words. --save-predictions lines are {"id", "ref", "hyp"} plus, for a Paraformer, "words" with
their CIF times (the autoregressive baseline gives no times).
A run folder means its checkpoints/best.pt. Toy checkpoints are evaluated on their toy split;
--manifest evaluates any JSON Lines manifest with an audio-trained checkpoint.

Long recordings: when a manifest has a recording longer than --chunk-seconds (or with --long-form), every
recording is decoded on its own, window by window (decode/longform.py; options under "long recordings"), and the
scores gain "long_form": true and "windows"; rtf then counts reading, features and decoding.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from paraformer_asr.cli import add_long_form_arguments, long_form_options, progress_bar_wanted, run_main  # noqa: E402
from paraformer_asr.errors import ConfigError, DataError  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--checkpoint", required=True, help="checkpoint file or run folder")
    parser.add_argument("--out", help="write the scores as JSON here")
    parser.add_argument("--save-predictions", help="write one JSON line per utterance: id, ref, hyp")
    parser.add_argument("--decode", choices=("greedy", "beam"), default="greedy")
    parser.add_argument("--beam-size", type=int, default=4)
    parser.add_argument("--lm-order", type=int, default=0,
                        help="with --decode beam: fuse a token n-gram LM of this order (over the checkpoint's "
                             "characters or subword units), estimated from its training transcripts (0 = no LM)")
    parser.add_argument("--lm-weight", type=float, default=0.3, help="shallow-fusion weight of the LM")
    parser.add_argument("--split", choices=("val", "test"), default="val")
    parser.add_argument("--manifest", help="JSON Lines manifest to evaluate (audio checkpoints)")
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto")
    parser.add_argument("--num-threads", type=int, default=None, help="torch CPU threads (default: the config's)")
    parser.add_argument("--long-form", action="store_true",
                        help="decode every recording window by window, even the short ones")
    add_long_form_arguments(parser)
    args = parser.parse_args(argv)
    options = long_form_options(args)
    if args.beam_size < 1 or args.batch_size < 1:
        raise ConfigError("--beam-size and --batch-size must be >= 1")
    if args.lm_order < 0 or args.lm_weight < 0 or (args.lm_order > 0 and args.decode != "beam"):
        raise ConfigError("--lm-order and --lm-weight must be >= 0, and an LM needs --decode beam")

    import torch

    from paraformer_asr.data.manifest import read_manifest
    from paraformer_asr.data.setup import check_vocabulary, make_loader
    from paraformer_asr.inference import evaluation_dataset, evaluation_manifest, load_trained_model
    from paraformer_asr.decode.timestamps import frame_clock
    from paraformer_asr.training.evaluation import (evaluate, evaluate_long_form, hypothesis_words, recording_seconds,
                                                    resolve_device)
    from paraformer_asr.training.loop import apply_num_threads

    device = resolve_device(args.device)
    loaded = load_trained_model(args.checkpoint, device)
    apply_num_threads(loaded.cfg.run.num_threads if args.num_threads is None else args.num_threads)
    manifest = evaluation_manifest(loaded, args.split, args.manifest)
    if args.long_form and manifest is None:
        raise ConfigError("--long-form needs a checkpoint trained on audio")
    entries = None
    if manifest is not None:
        entries = read_manifest(manifest, skip_bad_files=loaded.cfg.data.skip_bad_files)
        if not args.long_form and all(recording_seconds(e) <= options.chunk_seconds for e in entries):
            entries = None  # every recording fits in one window: the batched path
    lm = None
    if args.lm_order > 0:
        from paraformer_asr.data.setup import training_transcripts
        from paraformer_asr.decode.lm_fusion import build_char_lm

        lm = build_char_lm(training_transcripts(loaded.cfg), loaded.tokenizer, args.lm_order)
    if entries is not None:
        check_vocabulary([e.text for e in entries], loaded.tokenizer, manifest)
        scores, predictions = evaluate_long_form(loaded, entries, device, options, args.decode, args.beam_size, lm,
                                                 args.lm_weight, progress=window_progress())
        scores["long_form"] = True
    else:
        dataset = evaluation_dataset(loaded, args.split, args.manifest)
        if len(dataset) == 0:
            raise DataError("the evaluation set is empty")
        loader, _ = make_loader(dataset, args.batch_size, loaded.tokenizer.pad_id, shuffle=False, seed=0)
        clock = frame_clock(loaded.cfg) if loaded.model.gives_timestamps else None
        with torch.no_grad():
            scores, transcripts, hyps = evaluate(loaded.model, loader, loaded.tokenizer, device, args.decode,
                                                 args.beam_size, lm, args.lm_weight, clock)
        predictions = []
        for transcript, hyp in zip(transcripts, hyps):
            line = {"id": transcript.id, "ref": transcript.ref_text, "hyp": hyp}
            if transcript.token_times is not None:
                line["words"] = hypothesis_words(loaded.tokenizer, transcript)
            predictions.append(line)
    result = {**scores, "decode": args.decode, "beam_size": args.beam_size if args.decode == "beam" else 1,
              "lm_order": args.lm_order, "lm_weight": args.lm_weight if lm is not None else 0.0,
              "checkpoint": str(loaded.path), "dataset": args.manifest or f"{loaded.cfg.data.kind}:{args.split}"}
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


def window_progress():
    """A tqdm bar over each long recording's windows on an interactive terminal, else None."""
    if not progress_bar_wanted():
        return None
    from tqdm import tqdm

    bars = {}

    def report(entry, done: int, total: int) -> None:
        bar = bars.setdefault(entry.id, tqdm(total=total, desc=entry.id, unit="window", leave=False))
        bar.update(done - bar.n)
        if done == total:
            bar.close()

    return report


if __name__ == "__main__":
    sys.exit(run_main(main))
