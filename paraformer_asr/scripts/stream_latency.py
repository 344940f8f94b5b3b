"""Latency of streaming recognition (logic in paraformer_asr_tools/benchmarks/stream_latency.py):

    python scripts/stream_latency.py --checkpoint CKPT (--manifest FILE.jsonl [--max-files 20] | --audio FILES...)
        [--chunk-ms MS] [--two-pass | --no-two-pass] [--piece-ms MS] [--concurrent 8] [--url URL] [--pace 1]
        [--num-threads 1] [--out FILE.json]

Prints JSON with two parts, each giving median and p95 (and the count) of: first_partial_ms (the first non-empty
partial transcript after the speech starts), final_after_speech_end_ms and final_after_audio_end_ms (the final
transcript after the speech ends, and after the audio ends):

- "direct": each recording decoded as a live stream on one thread (torch on --num-threads threads, default 1): fed
  in pieces of --piece-ms (default: the chunk), each call timed, the latencies those of a live source; adds
  rtf_per_chunk (compute per completed chunk / the chunk's duration), rtf_final and each recording's final text.
- "websocket" (unless --concurrent 0): --concurrent clients stream the recordings (cycled) at the pace of a
  microphone in pieces of --piece-ms (default 100 ms, as the page sends them) to /stream of a server started here
  for the checkpoint (python -m paraformer_asr.serving.command in its own process, on --num-threads threads) or
  of --url; wall-time latencies, errors, and mismatched_finals (finals that differ from the direct decoding: 0 when
  the service decodes as the recognizer does). --pace P > 1 sends P times faster than real time (for tests only:
  latencies then mean little).

--chunk-ms (default: the checkpoint's model.streaming.decode_chunk_size; 0: full context) and --two-pass (default:
the checkpoint's) set the stream. Speech start and end are each recording's audible span (within 35 dB of its
loudest 5 ms). Exit status 0 when every stream got its final, 1 otherwise, 2 for bad arguments.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch

from paraformer_asr.cli import run_main
from paraformer_asr.data.audio import load_audio
from paraformer_asr.data.manifest import read_manifest
from paraformer_asr.errors import ConfigError
from paraformer_asr.inference import LoadedModel, load_model
from paraformer_asr_tools.benchmarks.stream_latency import direct_latency, served_checkpoint, websocket_latency
from paraformer_asr_tools.benchmarks.service_load import loopback_address


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--checkpoint", required=True, help="a streaming checkpoint (file or run folder)")
    parser.add_argument("--manifest", help="JSON Lines manifest; its first --max-files recordings are streamed")
    parser.add_argument("--max-files", type=int, default=20)
    parser.add_argument("--audio", nargs="*", default=[], help="audio files to stream")
    parser.add_argument("--chunk-ms", type=float, default=None, help="the encoder's chunk (0: full context)")
    parser.add_argument("--two-pass", action=argparse.BooleanOptionalAction, default=None,
                        help="the final from a full-context pass (default: the checkpoint's)")
    parser.add_argument("--piece-ms", type=float, default=None,
                        help="audio per piece fed (default: the chunk directly, 100 ms through the WebSocket)")
    parser.add_argument("--concurrent", type=int, default=8, help="WebSocket clients at once (0: direct only)")
    parser.add_argument("--url", help="a running server (loopback) instead of one started here")
    parser.add_argument("--pace", type=float, default=1.0, help="WebSocket clients send this many times real time")
    parser.add_argument("--device", choices=("auto", "cpu", "cuda"), default="cpu")
    parser.add_argument("--num-threads", type=int, default=1, help="torch threads, here and in the started server")
    parser.add_argument("--timeout-s", type=float, default=120.0)
    parser.add_argument("--out", help="write the JSON report here")
    args = parser.parse_args(argv)
    if args.max_files < 1 or args.concurrent < 0 or args.num_threads < 1:
        raise ConfigError("--max-files and --num-threads must be >= 1, --concurrent >= 0")
    if not args.pace > 0 or (args.piece_ms is not None and not args.piece_ms > 0):
        raise ConfigError("--pace and --piece-ms must be > 0")
    if args.url is not None:
        loopback_address(args.url)

    loaded, _ = load_model(args.checkpoint, "torch", args.device, args.num_threads)
    recordings = load_recordings(loaded, args.audio, args.manifest, args.max_files)
    report = {"checkpoint": str(loaded.path), "chunk_ms": args.chunk_ms, "num_threads": args.num_threads,
              "direct": direct_latency(loaded, recordings, args.chunk_ms, args.two_pass, args.piece_ms)}
    if args.concurrent > 0:
        expected = report["direct"]["finals"]
        measure = dict(recordings=recordings, concurrent=args.concurrent, sample_rate=loaded.cfg.data.sample_rate,
                       chunk_ms=args.chunk_ms, two_pass=args.two_pass, piece_ms=args.piece_ms or 100.0,
                       pace=args.pace, timeout_s=args.timeout_s, expected=expected)
        if args.url is not None:
            report["websocket"] = websocket_latency(args.url, **measure)
        else:
            with served_checkpoint(loaded.path, args.num_threads, max(16, args.concurrent), args.timeout_s) as url:
                report["websocket"] = websocket_latency(url, **measure)
    text = json.dumps(report, indent=2)
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(text + "\n", encoding="utf-8")
    print(text)
    return 0 if report.get("websocket", {}).get("errors", 0) == 0 else 1


def load_recordings(loaded: LoadedModel, audio: list[str], manifest: str | None,
                    max_files: int) -> list[tuple[str, torch.Tensor]]:
    """--audio files, then the first ``max_files`` recordings of --manifest -> (name, samples [N] at the model's
    rate)."""
    rate = loaded.cfg.data.sample_rate
    recordings = [(name, load_audio(name, rate)) for name in audio]
    if manifest is not None:
        recordings += [(entry.id, load_audio(entry.audio_path, rate, entry.start_s, entry.end_s, entry.where))
                       for entry in read_manifest(manifest)[:max_files]]
    if not recordings:
        raise ConfigError("give recordings to stream with --audio or --manifest")
    return recordings


if __name__ == "__main__":
    sys.exit(run_main(main))
