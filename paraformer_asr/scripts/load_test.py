"""Bounded load test of a running speech-recognition server, on loopback only.

    python scripts/load_test.py --url http://127.0.0.1:8000 --manifest /path/to/speech/test.jsonl
        [--requests 300] [--concurrency 8] [--max-seconds 120] [--out FILE.json] [--markdown FILE.md]

C client threads (each with its own keep-alive connection) send N POST /transcribe uploads in total, cycling
through the given WAV files (--audio FILES, or the first --max-files of a --manifest). No new request starts
after --max-seconds. Prints the report as JSON: latency p50/p95/p99 (ms, per request, client side), requests/s
(successful requests / wall time), error count with examples, and the server's batching statistics over the
test (the difference of /health before and after). --markdown writes a one-row results table. Exit status 0
when every request succeeded, 1 otherwise, 2 for bad arguments.
"""

from __future__ import annotations

import argparse
import http.client
import json
import queue
import sys
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from urllib.parse import urlsplit

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from paraformer_asr.cli import run_main  # noqa: E402
from paraformer_asr.errors import ConfigError, DataError  # noqa: E402

LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "::1")
MAX_ERROR_SAMPLES = 5


def multipart_body(data: bytes, field: str = "file", filename: str = "audio.wav") -> tuple[bytes, str]:
    """One file part as multipart/form-data -> (body, content type header value)."""
    boundary = uuid.uuid4().hex
    head = (f'--{boundary}\r\nContent-Disposition: form-data; name="{field}"; filename="{filename}"\r\n'
            f"Content-Type: audio/wav\r\n\r\n").encode()
    return head + data + f"\r\n--{boundary}--\r\n".encode(), f"multipart/form-data; boundary={boundary}"


def loopback_address(url: str) -> tuple[str, int]:
    """'http://127.0.0.1:8000' -> ('127.0.0.1', 8000); anything not plain http on loopback is refused."""
    parts = urlsplit(url)
    if parts.scheme != "http" or parts.hostname not in LOOPBACK_HOSTS:
        raise ConfigError(f"--url must be http:// on loopback ({', '.join(LOOPBACK_HOSTS)}), got {url!r}")
    return parts.hostname, parts.port or 80


def request_json(connection: http.client.HTTPConnection, method: str, path: str, body: bytes | None = None,
                 content_type: str | None = None) -> tuple[int, dict]:
    """Send one request on ``connection`` -> (status, JSON body, or {'raw': text} when it is not JSON)."""
    headers = {"Content-Type": content_type} if content_type else {}
    connection.request(method, path, body=body, headers=headers)
    response = connection.getresponse()
    raw = response.read()
    try:
        return response.status, json.loads(raw)
    except ValueError:
        return response.status, {"raw": raw.decode("utf-8", "replace")}


def load_payloads(audio: list[str], manifest: str | None, max_files: int) -> list[bytes]:
    if manifest is not None:
        from paraformer_asr.data.manifest import read_manifest

        audio = audio + [str(entry.audio_path) for entry in read_manifest(manifest)[:max_files]]
    if not audio:
        raise ConfigError("give WAV files with --audio or a manifest with --manifest")
    payloads = []
    for name in audio:
        try:
            payloads.append(Path(name).read_bytes())
        except OSError as exc:
            raise DataError(f"cannot read audio file {name}: {exc.strerror or exc}") from None
    return payloads


class _Tally:
    """Thread-safe results of the clients."""

    def __init__(self):
        self.lock = threading.Lock()
        self.latencies_s: list[float] = []
        self.audio_seconds = 0.0
        self.errors = 0
        self.error_samples: list[str] = []

    def success(self, latency_s: float, duration_s: float) -> None:
        with self.lock:
            self.latencies_s.append(latency_s)
            self.audio_seconds += duration_s

    def failure(self, what: str) -> None:
        with self.lock:
            self.errors += 1
            if len(self.error_samples) < MAX_ERROR_SAMPLES:
                self.error_samples.append(what)


def run_load_test(url: str, payloads: list[bytes], num_requests: int, concurrency: int, max_seconds: float,
                  timeout_s: float) -> dict:
    """Send ``num_requests`` uploads from ``concurrency`` clients; -> report dict (see the module doc)."""
    host, port = loopback_address(url)
    bodies = [multipart_body(data) for data in payloads]
    tally = _Tally()
    tickets: queue.SimpleQueue[int] = queue.SimpleQueue()  # request indices still to send
    for index in range(num_requests):
        tickets.put(index)
    batching_before = server_batching(host, port, timeout_s)
    start = time.perf_counter()
    deadline = start + max_seconds

    def client() -> None:
        connection = http.client.HTTPConnection(host, port, timeout=timeout_s)
        try:
            while time.perf_counter() < deadline:
                try:
                    index = tickets.get_nowait()
                except queue.Empty:
                    return
                body, content_type = bodies[index % len(bodies)]
                sent = time.perf_counter()
                try:
                    status, answer = request_json(connection, "POST", "/transcribe", body, content_type)
                except (OSError, http.client.HTTPException) as exc:
                    tally.failure(f"request {index}: {type(exc).__name__}: {exc}")
                    connection.close()  # reconnects on the next request
                    continue
                if status == 200:
                    tally.success(time.perf_counter() - sent, float(answer["duration_s"]))
                else:
                    tally.failure(f"request {index}: HTTP {status}: {answer}")
        finally:
            connection.close()

    with ThreadPoolExecutor(max_workers=concurrency) as pool:
        for future in [pool.submit(client) for _ in range(concurrency)]:
            future.result()
    wall_s = time.perf_counter() - start
    batching = batching_difference(batching_before, server_batching(host, port, timeout_s))
    return build_report(url, num_requests, concurrency, tally, wall_s, batching)


def server_batching(host: str, port: int, timeout_s: float) -> dict | None:
    connection = http.client.HTTPConnection(host, port, timeout=timeout_s)
    try:
        status, health = request_json(connection, "GET", "/health")
    except (OSError, http.client.HTTPException):
        return None
    finally:
        connection.close()
    return health.get("batching") if status == 200 else None


def batching_difference(before: dict | None, after: dict | None) -> dict | None:
    """The server's batching counters accumulated between two /health answers."""
    if before is None or after is None:
        return None
    counts = {size: count - before["batch_size_counts"].get(size, 0)
              for size, count in after["batch_size_counts"].items()}
    counts = {size: count for size, count in counts.items() if count > 0}
    batches = after["batches"] - before["batches"]
    requests = after["requests"] - before["requests"]
    return {"batches": batches, "requests": requests, "mean_batch_size": requests / batches if batches else 0.0,
            "max_batch_size_seen": max((int(size) for size in counts), default=0), "batch_size_counts": counts,
            "decode_seconds": round(after["decode_seconds"] - before["decode_seconds"], 3)}


def percentile(sorted_values: list[float], q: float) -> float:
    """Linear interpolation between closest ranks (numpy's default), on an ascending list."""
    position = (len(sorted_values) - 1) * q / 100.0
    low = int(position)
    high = min(low + 1, len(sorted_values) - 1)
    return sorted_values[low] + (sorted_values[high] - sorted_values[low]) * (position - low)


def build_report(url: str, num_requests: int, concurrency: int, tally: _Tally, wall_s: float,
                 batching: dict | None) -> dict:
    latencies_ms = sorted(1000.0 * s for s in tally.latencies_s)
    ok = len(latencies_ms)
    summary = None
    if latencies_ms:
        summary = {name: round(percentile(latencies_ms, q), 2) for name, q in (("p50", 50), ("p95", 95),
                                                                                ("p99", 99))}
        summary.update(mean=round(sum(latencies_ms) / ok, 2), max=round(latencies_ms[-1], 2))
    return {
        "url": url,
        "requests": num_requests,
        "concurrency": concurrency,
        "ok": ok,
        "errors": tally.errors,
        "not_sent": num_requests - ok - tally.errors,
        "error_samples": tally.error_samples,
        "wall_s": round(wall_s, 3),
        "requests_per_s": round(ok / wall_s, 2) if wall_s > 0 else 0.0,
        "audio_seconds_per_s": round(tally.audio_seconds / wall_s, 2) if wall_s > 0 else 0.0,
        "latency_ms": summary,
        "server_batching": batching,
    }


def markdown_table(report: dict) -> str:
    latency = report["latency_ms"] or {"p50": float("nan"), "p95": float("nan"), "p99": float("nan")}
    batching = report["server_batching"] or {}
    mean_batch = batching.get("mean_batch_size")
    rows = [
        "| requests | clients | errors | p50 latency (ms) | p95 latency (ms) | p99 latency (ms) | requests/s "
        "| audio s/s | mean batch size (server) |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
        f"| {report['requests']} | {report['concurrency']} | {report['errors'] + report['not_sent']} "
        f"| {latency['p50']:.1f} | {latency['p95']:.1f} | {latency['p99']:.1f} | {report['requests_per_s']:.1f} "
        f"| {report['audio_seconds_per_s']:.1f} | {'n/a' if mean_batch is None else f'{mean_batch:.2f}'} |",
    ]
    return "\n".join(rows) + "\n"


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
    args = parser.parse_args(argv)
    for name in ("requests", "concurrency", "max_files"):
        if getattr(args, name) < 1:
            raise ConfigError(f"--{name.replace('_', '-')} must be >= 1, got {getattr(args, name)}")
    if args.max_seconds <= 0 or args.timeout_s <= 0:
        raise ConfigError("--max-seconds and --timeout-s must be > 0")
    loopback_address(args.url)
    payloads = load_payloads(args.audio, args.manifest, args.max_files)
    report = run_load_test(args.url, payloads, args.requests, args.concurrency, args.max_seconds, args.timeout_s)
    text = json.dumps(report, indent=2)
    print(text)
    if args.out:
        Path(args.out).write_text(text + "\n", encoding="utf-8")
    if args.markdown:
        Path(args.markdown).write_text(markdown_table(report), encoding="utf-8")
    return 0 if report["errors"] == 0 and report["not_sent"] == 0 else 1


if __name__ == "__main__":
    sys.exit(run_main(main))
