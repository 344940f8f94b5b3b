"""Shared command-line plumbing: user errors -> 'error: ...' on stderr and exit status 2."""

from __future__ import annotations

import math
import os
import sys
from typing import Callable

from tqdm import tqdm

from paraformer_asr.decode.longform import CUT_RULES, DEFAULT_OVERLAP_SHARE, SEGMENTATIONS, LongFormOptions
from paraformer_asr.decode.options import DecodingOptions, add_decoding_arguments, decoding_options
from paraformer_asr.errors import UserError
from paraformer_asr.inference import BACKENDS

USER_ERROR_EXIT = 2


def run_main(main: Callable[[list[str] | None], int | None], argv: list[str] | None = None) -> int:
    """Call ``main(argv)``; a UserError prints ``error: <message>`` to stderr and returns 2 (no traceback)."""
    try:
        return int(main(argv) or 0)
    except UserError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return USER_ERROR_EXIT


def add_backend_arguments(parser) -> None:
    """--checkpoint, --backend, --device and --num-threads: what infer.py, eval.py and serve.py load and run on
    (see :func:`paraformer_asr.inference.load_model`)."""
    parser.add_argument("--checkpoint", required=True,
                        help="checkpoint file or run folder (--backend torch), export folder (--backend onnx)")
    parser.add_argument("--backend", choices=BACKENDS, default="torch",
                        help="torch, or onnx: the graphs of scripts/export.py in onnxruntime on the CPU (needs the "
                             "optional extra: pip install -e 'paraformer_asr[onnx]')")
    parser.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto")
    parser.add_argument("--num-threads", type=int, default=None,
                        help="CPU threads of torch and onnxruntime (default: the config's run.num_threads)")


def add_long_form_arguments(parser) -> None:
    """The options of long-form decoding (decode/longform/), shared by infer.py, eval.py and serve.py."""
    defaults = LongFormOptions()
    group = parser.add_argument_group("long recordings (decoded window by window; docs/architecture.md)")
    group.add_argument("--chunk-seconds", type=float, default=defaults.chunk_seconds,
                       help="recordings longer than this are decoded in windows of at most this length "
                            f"(default {defaults.chunk_seconds:g})")
    group.add_argument("--segment", choices=SEGMENTATIONS, default=defaults.segment,
                       help="windows between pauses (speech segments) or fixed overlapping windows "
                            f"(default {defaults.segment})")
    group.add_argument("--chunk-overlap", type=float, default=None,
                       help="seconds of overlap of neighbouring windows (default: a fifth of --chunk-seconds, "
                            f"{defaults.overlap_seconds:g} s for the default)")
    group.add_argument("--chunk-cut", choices=CUT_RULES, default=defaults.cut,
                       help=f"where overlapping windows are stitched (default {defaults.cut})")
    group.add_argument("--chunk-batch", type=int, default=defaults.batch_windows,
                       help=f"windows decoded together (default {defaults.batch_windows})")
    group.add_argument("--speech-threshold-db", type=float, default=defaults.speech_threshold_db,
                       help="with --segment pauses: speech is this far above the local noise floor "
                            f"(default {defaults.speech_threshold_db:g})")
    group.add_argument("--min-pause-ms", type=float, default=defaults.min_pause_ms,
                       help="with --segment pauses, where pauses are not judged: shorter pauses do not end a segment "
                            f"(default {defaults.min_pause_ms:g})")
    low, high = defaults.judged_pauses_ms
    group.add_argument("--judged-pauses-ms", type=float, nargs=2, metavar=("LOW", "HIGH"),
                       default=defaults.judged_pauses_ms,
                       help="with --segment pauses and a Paraformer: a pause from LOW to HIGH ms ends a segment only "
                            "where the two sides decoded apart score better than decoded together (shorter ones "
                            f"never, longer ones always; default {low:g} {high:g})")
    group.add_argument("--no-judged-pauses", action="store_true",
                       help="end a segment at every pause of --min-pause-ms, without judging it")


def long_form_options(args) -> LongFormOptions:
    """argparse namespace (see :func:`add_long_form_arguments`) -> LongFormOptions (ConfigError on bad values)."""
    overlap = args.chunk_overlap
    if overlap is None:
        overlap = args.chunk_seconds * DEFAULT_OVERLAP_SHARE if math.isfinite(args.chunk_seconds) else 0.0
    return LongFormOptions(segment=args.segment, chunk_seconds=args.chunk_seconds, overlap_seconds=overlap,
                           cut=args.chunk_cut, batch_windows=args.chunk_batch,
                           speech_threshold_db=args.speech_threshold_db, min_pause_ms=args.min_pause_ms,
                           judged_pauses_ms=None if args.no_judged_pauses else tuple(args.judged_pauses_ms))


def parse_decoding_arguments(parser, argv: list[str] | None) -> tuple[object, LongFormOptions, DecodingOptions]:
    """Add the decoding and long-form options shared by infer.py, eval.py and serve.py to ``parser`` and parse
    ``argv`` -> (argparse namespace, LongFormOptions, DecodingOptions); ConfigError on bad values."""
    add_decoding_arguments(parser)
    add_long_form_arguments(parser)
    args = parser.parse_args(argv)
    return args, long_form_options(args), decoding_options(args)


def progress_bar_wanted() -> bool:
    """Progress bars on an interactive terminal only (not under CI, not into a file or pipe)."""
    return sys.stderr.isatty() and not os.environ.get("CI")


def window_progress():
    """A tqdm bar over each long recording's windows on an interactive terminal, else None: a
    ``progress(entry, done, total)`` callback for :func:`paraformer_asr.training.evaluation.evaluate_long_form`."""
    if not progress_bar_wanted():
        return None
    bars = {}

    def report(entry, done: int, total: int) -> None:
        bar = bars.setdefault(entry.id, tqdm(total=total, desc=entry.id, unit="window", leave=False))
        bar.update(done - bar.n)
        if done == total:
            bar.close()

    return report


def window_bar(name: str):
    """A tqdm bar over one long recording's windows on an interactive terminal, else None: a
    ``progress(done, total)`` callback for :func:`paraformer_asr.decode.longform.transcribe_long`."""
    if not progress_bar_wanted():
        return None
    bar = tqdm(desc=name, unit="window", leave=False)

    def report(done: int, total: int) -> None:
        bar.total = total
        bar.update(done - bar.n)
        if done == total:
            bar.close()

    return report
