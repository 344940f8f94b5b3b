"""Transcribe inputs with a trained checkpoint; prints one transcript per input, in order.

    python scripts/infer.py --checkpoint CKPT a.wav b.wav          (audio-trained checkpoints)
    python scripts/infer.py --checkpoint CKPT feats.npy            (feature files [T, F], .npy or .pt)
    python scripts/infer.py --checkpoint CKPT --toy-split val --toy-count 5   (toy checkpoints)

    python scripts/infer.py --backend onnx --checkpoint EXPORT_DIR a.wav   (an export of scripts/export.py)

Decoding: --decode greedy|beam --beam-size K --lm-order N --lm-weight W --hotwords FILE --hotword-weight W, as eval.py.
--with-ids prefixes each line with the input name and a tab. A run folder means its best.pt.
--timestamps prints one JSON line per input instead: {"audio", "text", "tokens": [{"token", "start_ms", "end_ms"}],
"words": [{"word", "start_ms", "end_ms"}]}, times from the CIF (Paraformer checkpoints only: the autoregressive
baseline has no CIF, and asking it for times is an error). --srt FILE writes subtitles of one input.

Audio longer than --chunk-seconds (default 20) is decoded window by window in bounded memory (decode/longform/:
speech segments between pauses by default, or fixed overlapping windows with --segment windows), with a progress
bar over the windows on a terminal; --timestamps and --srt work the same, times counted from the recording's start.
The autoregressive baseline's long recordings come out as text only.

--stream decodes one input as a stream, fed in pieces of --chunk-ms as a live source would feed it (default: the
checkpoint's model.streaming.decode_chunk_size, e.g. 15 frames of 40 ms in configs/paraformer_streaming.yaml):
a line "<ms fed> ms<TAB><partial transcript>" each time the partial transcript changes, the final transcript as the
last line (a Paraformer trained with model.streaming; docs/architecture.md, "Streaming"). --two-pass / --no-two-pass
overrides the checkpoint's model.streaming.two_pass.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from paraformer_asr.cli import add_backend_arguments, parse_decoding_arguments, run_main, window_bar
from paraformer_asr.decode.options import DecodingOptions
from paraformer_asr.decode.subtitles import format_srt, group_cues
from paraformer_asr.errors import ConfigError
from paraformer_asr.inference import load_model
from paraformer_asr.transcribe import stream_file, transcribe_inputs


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_backend_arguments(parser)
    parser.add_argument("inputs", nargs="*",
                        help="audio files (.wav, .flac, .ogg, ...) or feature files (.npy / .pt, [T, F])")
    parser.add_argument("--toy-split", choices=("train", "val", "test"), help="transcribe items of the toy set")
    parser.add_argument("--toy-count", type=int, default=5)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--with-ids", action="store_true")
    parser.add_argument("--timestamps", action="store_true", help="print JSON lines with token and word times")
    parser.add_argument("--srt", help="write the subtitles of the (single) input to this .srt file")
    parser.add_argument("--stream", action="store_true",
                        help="decode the (single) input as a stream: partial transcripts as they change, then the final")
    parser.add_argument("--chunk-ms", type=float, default=None,
                        help="with --stream: ms of input fed at a time, and the encoder's chunk (default: the "
                             "checkpoint's model.streaming.decode_chunk_size)")
    parser.add_argument("--two-pass", action=argparse.BooleanOptionalAction, default=None,
                        help="with --stream: the final transcript from a full-context pass (default: the checkpoint's)")
    args, options, decoding = parse_decoding_arguments(parser, argv)
    if args.stream:
        return print_stream(args, decoding)
    if not args.inputs and not args.toy_split:
        raise ConfigError("give input files or --toy-split")
    if args.batch_size < 1 or args.toy_count < 1:
        raise ConfigError("--batch-size and --toy-count must be >= 1")
    if args.srt and len(args.inputs) + (args.toy_count if args.toy_split else 0) != 1:
        raise ConfigError("--srt writes the subtitles of one recording: give exactly one input")

    loaded, device = load_model(args.checkpoint, args.backend, args.device, args.num_threads)
    results = transcribe_inputs(loaded, device, args.inputs, options, args.toy_split, args.toy_count, decoding,
                                args.batch_size, timed=args.timestamps or bool(args.srt), window_progress=window_bar)
    for result in results:
        if args.timestamps:
            print(json.dumps(result))
        else:
            print(f"{result['audio']}\t{result['text']}" if args.with_ids else result["text"])
        if args.srt:
            Path(args.srt).parent.mkdir(parents=True, exist_ok=True)
            Path(args.srt).write_text(format_srt(group_cues(result["words"])), encoding="utf-8")
    return 0


def print_stream(args, decoding: DecodingOptions) -> int:
    """--stream: one input decoded greedily as a stream; partial lines as they change, the final transcript last."""
    if len(args.inputs) != 1 or args.toy_split:
        raise ConfigError("--stream decodes one input file: give exactly one (and no --toy-split)")
    if args.timestamps or args.srt or args.with_ids:
        raise ConfigError("--stream prints text lines only: drop --timestamps, --srt and --with-ids")
    if decoding != DecodingOptions(method="greedy" if decoding.method == "greedy" else None):
        raise ConfigError("--stream decodes greedily: drop the search options (--decode beam, --beam-size, the LM, "
                          "length candidates, CTC scores, hotwords)")
    loaded, _ = load_model(args.checkpoint, args.backend, args.device, args.num_threads)
    for update in stream_file(loaded, args.inputs[0], args.chunk_ms, args.two_pass):
        print(update.text if update.final else f"{update.ms:.0f} ms\t{update.text}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(run_main(main))
