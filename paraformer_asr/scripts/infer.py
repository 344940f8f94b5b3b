"""Transcribe inputs with a trained checkpoint; prints one transcript per input, in order.

    python scripts/infer.py --checkpoint CKPT a.wav b.wav          (audio-trained checkpoints)
    python scripts/infer.py --checkpoint CKPT feats.npy            (feature files [T, F], .npy or .pt)
    python scripts/infer.py --checkpoint CKPT --toy-split val --toy-count 5   (toy checkpoints)

--with-ids prefixes each line with the input name and a tab. A run folder means its best.pt.
--timestamps prints one JSON line per input instead: {"audio", "text", "tokens": [{"token", "start_ms", "end_ms"}],
"words": [{"word", "start_ms", "end_ms"}]}, times from the CIF (Paraformer checkpoints only: the autoregressive
baseline has no CIF, and asking it for times is an error). --srt FILE writes subtitles of one input.

Audio longer than --chunk-seconds (default 20) is decoded window by window in bounded memory (decode/longform.py:
speech segments between pauses by default, or fixed overlapping windows with --segment windows), with a progress
bar over the windows on a terminal; --timestamps and --srt work the same, times counted from the recording's start.
The autoregressive baseline's long recordings come out as text only.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from paraformer_asr.cli import add_long_form_arguments, long_form_options, progress_bar_wanted, run_main  # noqa: E402
from paraformer_asr.errors import ConfigError  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--checkpoint", required=True)
    parser.add_argument("inputs", nargs="*",
                        help="audio files (.wav, .flac, .ogg, ...) or feature files (.npy / .pt, [T, F])")
    parser.add_argument("--toy-split", choices=("train", "val", "test"), help="transcribe items of the toy set")
    parser.add_argument("--toy-count", type=int, default=5)
    parser.add_argument("--decode", choices=("greedy", "beam"), default="greedy")
    parser.add_argument("--beam-size", type=int, default=4)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--with-ids", action="store_true")
    parser.add_argument("--timestamps", action="store_true", help="print JSON lines with token and word times")
    parser.add_argument("--srt", help="write the subtitles of the (single) input to this .srt file")
    parser.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto")
    add_long_form_arguments(parser)
    args = parser.parse_args(argv)
    options = long_form_options(args)
    if not args.inputs and not args.toy_split:
        raise ConfigError("give input files or --toy-split")
    if args.beam_size < 1 or args.batch_size < 1 or args.toy_count < 1:
        raise ConfigError("--beam-size, --batch-size and --toy-count must be >= 1")
    if args.srt and len(args.inputs) + (args.toy_count if args.toy_split else 0) != 1:
        raise ConfigError("--srt writes the subtitles of one recording: give exactly one input")

    import torch

    from paraformer_asr.data.batching import Collator
    from paraformer_asr.data.toy import ToySeq2SeqDataset
    from paraformer_asr.decode.longform import transcribe_long
    from paraformer_asr.decode.search import require_timestamps, transcribe_batches
    from paraformer_asr.decode.subtitles import format_srt, group_cues
    from paraformer_asr.decode.timestamps import frame_clock, token_entries, word_times
    from paraformer_asr.inference import features_from_file, load_trained_model
    from paraformer_asr.training.evaluation import resolve_device
    from paraformer_asr.training.loop import apply_num_threads

    device = resolve_device(args.device)
    loaded = load_trained_model(args.checkpoint, device)
    apply_num_threads(loaded.cfg.run.num_threads)
    timed = args.timestamps or bool(args.srt)
    if timed:
        require_timestamps(loaded.model)
    results: dict[int, dict] = {}  # input index -> {"audio", "text", "tokens", "words"}
    items, item_indices = [], []
    for index, name in enumerate(args.inputs):
        path = Path(name)
        if is_long_audio(path, loaded, options.chunk_seconds):
            long = transcribe_long(loaded, path, device, options, method=args.decode, beam_size=args.beam_size,
                                   progress=window_bar(name))
            results[index] = {"audio": name, "text": long.text, "tokens": long.tokens, "words": long.words}
            continue
        features, duration = features_from_file(path, loaded)
        items.append({"id": name, "features": features, "tokens": torch.zeros(0, dtype=torch.long), "text": "",
                      "duration_s": duration})
        item_indices.append(index)
    if args.toy_split:
        if loaded.cfg.data.kind != "toy":
            raise ConfigError("--toy-split needs a checkpoint trained on toy data")
        toy = ToySeq2SeqDataset.from_config(loaded.cfg.data.toy, args.toy_split, loaded.tokenizer)
        toy_items = [toy[i] for i in range(min(args.toy_count, len(toy)))]
        item_indices += range(len(args.inputs), len(args.inputs) + len(toy_items))
        items += toy_items
    collate = Collator(loaded.tokenizer.pad_id)
    batches = (collate(items[i:i + args.batch_size]) for i in range(0, len(items), args.batch_size))
    clock = frame_clock(loaded.cfg) if timed else None
    transcripts, _ = transcribe_batches(loaded.model, batches, device, args.decode, args.beam_size, clock=clock)
    for index, transcript in zip(item_indices, transcripts):
        result = {"audio": transcript.id, "text": loaded.tokenizer.decode(transcript.hyp_tokens)}
        if timed:
            pieces = loaded.tokenizer.pieces(transcript.hyp_tokens)
            result.update(tokens=token_entries(pieces, transcript.token_times),
                          words=word_times(pieces, transcript.token_times))
        results[index] = result
    for index in sorted(results):
        result = results[index]
        if args.timestamps:
            print(json.dumps(result))
        else:
            print(f"{result['audio']}\t{result['text']}" if args.with_ids else result["text"])
        if args.srt:
            Path(args.srt).parent.mkdir(parents=True, exist_ok=True)
            Path(args.srt).write_text(format_srt(group_cues(result["words"])), encoding="utf-8")
    return 0


def is_long_audio(path: Path, loaded, chunk_seconds: float) -> bool:
    """An audio input (not a feature file) of an audio checkpoint whose header says it is longer than
    ``chunk_seconds``."""
    from paraformer_asr.data.audio import audio_info

    if path.suffix.lower() in (".npy", ".pt") or loaded.cfg.data.kind != "manifest" or not path.is_file():
        return False
    return audio_info(path).duration_s > chunk_seconds


def window_bar(name: str):
    """A tqdm bar over a long recording's windows on an interactive terminal, else None."""
    if not progress_bar_wanted():
        return None
    from tqdm import tqdm

    bar = tqdm(desc=name, unit="window", leave=False)

    def report(done: int, total: int) -> None:
        bar.total = total
        bar.update(done - bar.n)
        if done == total:
            bar.close()

    return report


if __name__ == "__main__":
    sys.exit(run_main(main))
