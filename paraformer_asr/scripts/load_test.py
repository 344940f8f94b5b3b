"""Bounded load test of a running speech-recognition server, on loopback only (logic in
paraformer_asr_tools/benchmarks/service_load.py).

    python scripts/load_test.py --url http://127.0.0.1:8000 --manifest /path/to/speech/test.jsonl
        [--requests 300] [--concurrency 8] [--max-seconds 120] [--out FILE.json] [--markdown FILE.md]
    python scripts/load_test.py --url ... --manifest ... --long-audio long.wav [--requests 200 --concurrency 2]

C client threads (each with its own keep-alive connection) send N POST /transcribe uploads in total, cycling
through the given files (--audio FILES, or the first --max-files of a --manifest). No new request starts
after --max-seconds. Prints the report as JSON: latency p50/p95/p99 (ms, per request, client side), requests/s
(successful requests / wall time), error count with examples, and the server's batching statistics over the
test (the difference of /health before and after). --markdown writes a one-row results table.

--long-audio FILE: the scenario "a long upload while short requests keep coming": the short load alone first (the
idle figure), then again while FILE is uploaded and decoded; the report has both, the long request's answer time
and real-time factor, and p95_ratio (p95 latency during the long decode / idle p95). --max-seconds bounds each
phase. Exit status 0 when every request succeeded, 1 otherwise, 2 for bad arguments.

--soak --server-pid PID [--bad-every 10]: the soak (paraformer_asr_tools/benchmarks/service_soak.py): every
--bad-every-th upload is bad input (cycled through five kinds), every good one must get 200 and the text it gets alone,
every bad one a 4xx; the server's resident memory is sampled and must grow by less than 10 % after the warm-up (the
first --warmup-fraction of the requests, default 0.25).
    python scripts/load_test.py --soak --server-pid PID --manifest test.jsonl --requests 2000 --concurrency 32
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from paraformer_asr.cli import run_main
from paraformer_asr.errors import ConfigError
from paraformer_asr_tools.benchmarks.service_load import (load_payloads, long_upload_markdown, loopback_address,
                                                          markdown_table, run_load_test, run_long_upload_scenario,
                                                          scenario_succeeded)
from paraformer_asr_tools.benchmarks.service_soak import run_soak, soak_markdown, soak_succeeded


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--url", default="http://127.0.0.1:8000", help="server base URL (loopback only)")
    parser.add_argument("--audio", nargs="*", default=[], help="WAV files to send (cycled)")
    parser.add_argument("--manifest", help="JSON Lines manifest; its first --max-files audio files are sent")
    parser.add_argument("--max-files", type=int, default=64)
    parser.add_argument("--requests", type=int, default=300)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--max-seconds", type=float, default=120.0, help="no new request starts after this")
    parser.add_argument("--timeout-s", type=float, default=30.0, help="per-request socket timeout")
    parser.add_argument("--out", help="write the JSON report here")
    parser.add_argument("--markdown", help="write the Markdown results table here")
    parser.add_argument("--long-audio", help="the long-upload scenario: decode this recording during the load")
    parser.add_argument("--soak", action="store_true", help="the soak: bad uploads mixed in, memory sampled")
    parser.add_argument("--server-pid", type=int, help="--soak: the server's process id (its memory is sampled)")
    parser.add_argument("--bad-every", type=int, default=10, help="--soak: every N-th upload is bad input")
    parser.add_argument("--warmup-fraction", type=float, default=0.25,
                        help="--soak: memory growth is measured after this share of the requests")
    args = parser.parse_args(argv)
    for name in ("requests", "concurrency", "max_files"):
        if getattr(args, name) < 1:
            raise ConfigError(f"--{name.replace('_', '-')} must be >= 1, got {getattr(args, name)}")
    if args.max_seconds <= 0 or args.timeout_s <= 0:
        raise ConfigError("--max-seconds and --timeout-s must be > 0")
    loopback_address(args.url)
    payloads = load_payloads(args.audio, args.manifest, args.max_files)
    if args.soak:
        if args.server_pid is None:
            raise ConfigError("--soak needs --server-pid (the server process whose memory is sampled)")
        report = run_soak(args.url, payloads, args.requests, args.concurrency, args.bad_every, args.server_pid,
                          args.timeout_s, args.max_seconds, args.warmup_fraction)
        table, succeeded = soak_markdown(report), soak_succeeded(report)
    elif args.long_audio:
        long_payload = load_payloads([args.long_audio], None, 1)[0]
        report = run_long_upload_scenario(args.url, payloads, long_payload, args.requests, args.concurrency,
                                          args.max_seconds, args.timeout_s)
        table, succeeded = long_upload_markdown(report), scenario_succeeded(report)
    else:
        report = run_load_test(args.url, payloads, args.requests, args.concurrency, args.max_seconds, args.timeout_s)
        table, succeeded = markdown_table(report), report["errors"] == 0 and report["not_sent"] == 0
    text = json.dumps(report, indent=2)
    print(text)
    if args.out:
        Path(args.out).write_text(text + "\n", encoding="utf-8")
    if args.markdown:
        Path(args.markdown).write_text(table, encoding="utf-8")
    return 0 if succeeded else 1


if __name__ == "__main__":
    sys.exit(run_main(main))
