"""Benchmarks (the measurements live in src/paraformer_asr_tools/benchmarks/: cif.py and decoding.py).

1. The vectorised CIF against the plain-loop reference at B x T x D (default 16 x 500 x 256):
   times, speed-up, largest difference.
2. With --checkpoints: decoding of one or more trained models (e.g. a Paraformer and the
   autoregressive baseline) on the same evaluation set, in one run: CER, RTF and latency per
   utterance and throughput (utterances a second) for greedy and beam decoding at each batch size
   (default 1 and 16), each row labelled with the model's output units; the greedy speed-up of every
   model over the slowest one at batch 1, and of every Paraformer over every autoregressive model on the
   same backend (marked when both decode the same units: compare architectures at the same units); with
   --config-decoding also each Paraformer's shipped decoding against each AR's, every row naming how many times
   the decoder runs per utterance. Each
   measurement is repeated --rounds times, the models taking turns, and the median round is reported.
   --exports adds export folders (scripts/export.py, fp32 or int8) decoded in onnxruntime: PyTorch against
   onnxruntime in the same run.

    python scripts/benchmark.py [--batch 16 --frames 500 --dim 256]
    python scripts/benchmark.py --skip-cif --checkpoints RUN_A RUN_B [--exports EXPORT_DIR ...]
        [--split test | --manifest FILE.jsonl] [--threads 1]
        [--max-utterances 200] [--batch-sizes 1 16] [--beam-size 4] [--rounds 3] [--device cpu|cuda]
        [--out FILE.json] [--table FILE.md]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch

from paraformer_asr.cli import run_main
from paraformer_asr.errors import ConfigError
from paraformer_asr.runtime import apply_num_threads
from paraformer_asr_tools.benchmarks.cif import benchmark_cif
from paraformer_asr_tools.benchmarks.decoding import (benchmark_models, device_name, greedy_speedups, markdown_table,
                                                      paraformer_speedups, shipped_speedups)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--frames", type=int, default=500)
    parser.add_argument("--dim", type=int, default=256)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--loop-repeats", type=int, default=2)
    parser.add_argument("--skip-cif", action="store_true", help="do not run the CIF benchmark")
    parser.add_argument("--checkpoints", nargs="+", default=[], help="checkpoints or run folders to compare")
    parser.add_argument("--exports", nargs="+", default=[],
                        help="export folders (scripts/export.py) to decode in onnxruntime beside the checkpoints")
    parser.add_argument("--split", choices=("val", "test"), default="val")
    parser.add_argument("--manifest", help="JSON Lines manifest to decode (audio checkpoints)")
    parser.add_argument("--max-utterances", type=int, default=200)
    parser.add_argument("--batch-sizes", type=int, nargs="+", default=[1, 16])
    parser.add_argument("--beam-size", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=3, help="repeat every decoding measurement; report the median")
    parser.add_argument("--threads", type=int, default=1,
                        help="torch and onnxruntime CPU threads (0 = the libraries' default)")
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu", help="where the models decode")
    parser.add_argument("--out", help="write the results as JSON here")
    parser.add_argument("--table", help="write the model comparison as a Markdown table here")
    parser.add_argument("--config-decoding", action="store_true",
                        help="also time the decoding each checkpoint's 'decode' config section ships (beam size, "
                             "LM, length candidates)")
    args = parser.parse_args(argv)
    if min(args.batch_sizes) < 1 or min(args.beam_size, args.max_utterances, args.rounds) < 1 or args.threads < 0:
        raise ConfigError("--batch-sizes, --beam-size, --max-utterances and --rounds must be >= 1, --threads >= 0")
    if args.device == "cuda" and not torch.cuda.is_available():
        raise ConfigError("--device cuda: no CUDA device is available")
    apply_num_threads(args.threads)
    results: dict = {"torch_threads": torch.get_num_threads(), "device": args.device,
                     "device_name": device_name(args.device)}
    if not args.skip_cif:
        results["cif"] = benchmark_cif(args.batch, args.frames, args.dim, args.repeats, args.loop_repeats)
    if args.checkpoints or args.exports:
        rows = benchmark_models(args.checkpoints, args.split, args.manifest, args.max_utterances, args.batch_sizes,
                                args.beam_size, args.device, args.rounds, args.exports, args.threads,
                                args.config_decoding)
        results["decoding"] = rows
        results["greedy_speedup_batch1_vs_slowest"] = greedy_speedups(rows)
        results["greedy_speedup_batch1_paraformer_vs_ar"] = paraformer_speedups(rows)
        results["shipped_speedup_batch1_paraformer_vs_ar"] = shipped_speedups(rows)
        table = markdown_table(rows)
        if args.table:
            Path(args.table).write_text(table, encoding="utf-8")
        print(table, file=sys.stderr)
    text = json.dumps(results, indent=2)
    if args.out:
        Path(args.out).write_text(text + "\n", encoding="utf-8")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(run_main(main))
