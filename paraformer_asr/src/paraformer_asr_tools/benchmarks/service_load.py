"""Bounded load tests of a running speech-recognition server, on loopback only (``scripts/load_test.py``).

run_load_test: C client threads (each with its own keep-alive connection) send N POST /transcribe uploads in total,
cycling through the given files; no new request starts after ``max_seconds``. The report: latency p50/p95/p99 (ms,
per request, client side), requests/s (successful requests / wall time), audio seconds per second, error count with
examples, and the server's batching statistics over the test (the difference of /health before and after).

run_long_upload_scenario: the same short load twice, first alone (the idle figure), then while one long recording
is uploaded and decoded: the clients keep sending short requests until the long answer arrives, and only the short
requests sent after the server took the long recording into its long-recording lane (seen in /health) and answered
before the long one are counted. The report adds the long request's status, latency and real-time factor, and
``p95_ratio`` = p95 latency during the long decode / p95 latency idle.

Contracts:
    multipart_body(data, field="file", filename="audio.wav") -> (body, content type)
    loopback_address(url) -> (host, port)                        ConfigError for anything not http on loopback
    run_load_test(url, payloads, num_requests, concurrency, max_seconds, timeout_s) -> report dict
    run_long_upload_scenario(url, payloads, long_payload, num_requests, concurrency, max_seconds, timeout_s) -> dict
    markdown_table(report) / long_upload_markdown(scenario) -> Markdown tables
"""

from __future__ import annotations

import http.client
import json
import queue
import threading
import time
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from urllib.parse import urlsplit

from paraformer_asr.errors import ConfigError, DataError

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
        self.sent_at: list[float] = []  # perf_counter time each successful request was sent
        self.audio_seconds = 0.0
        self.errors = 0
        self.error_samples: list[str] = []

    def success(self, latency_s: float, duration_s: float, sent_at: float = 0.0) -> None:
        with self.lock:
            self.latencies_s.append(latency_s)
            self.sent_at.append(sent_at)
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

    def next_ticket() -> int | None:
        try:
            return tickets.get_nowait() if time.perf_counter() < deadline else None
        except queue.Empty:
            return None

    run_clients(host, port, bodies, concurrency, next_ticket, tally, timeout_s)
    wall_s = time.perf_counter() - start
    batching = batching_difference(batching_before, server_batching(host, port, timeout_s))
    return build_report(url, num_requests, concurrency, tally, wall_s, batching)


def run_clients(host: str, port: int, bodies: list[tuple[bytes, str]], concurrency: int,
                next_ticket: Callable[[], int | None], tally: _Tally, timeout_s: float) -> None:
    """``concurrency`` clients, each with its own keep-alive connection, send POST /transcribe uploads (body
    ``index % len(bodies)``) for the indices ``next_ticket()`` hands out until it gives None; 200 answers are
    successes of ``tally``, anything else a failure."""

    def record(index: int, status: int | None, answer: dict, sent: float, latency_s: float) -> None:
        if status == 200:
            tally.success(latency_s, float(answer["duration_s"]), sent)
        else:
            tally.failure(f"request {index}: " + (answer["error"] if status is None else f"HTTP {status}: {answer}"))

    send_uploads(host, port, lambda index: bodies[index % len(bodies)], concurrency, next_ticket, record, timeout_s)


def send_uploads(host: str, port: int, body_of: Callable[[int], tuple[bytes, str]], concurrency: int,
                 next_ticket: Callable[[], int | None],
                 record: Callable[[int, int | None, dict, float, float], None], timeout_s: float) -> None:
    """``concurrency`` clients with keep-alive connections send ``body_of(index)`` for every index ``next_ticket()``
    hands out; each answer goes to ``record(index, status, answer, sent_at, latency_s)`` (status None and
    ``{"error": ...}`` when the connection failed)."""

    def client() -> None:
        connection = http.client.HTTPConnection(host, port, timeout=timeout_s)
        try:
            while (index := next_ticket()) is not None:
                body, content_type = body_of(index)
                sent = time.perf_counter()
                try:
                    status, answer = request_json(connection, "POST", "/transcribe", body, content_type)
                except (OSError, http.client.HTTPException) as exc:
                    record(index, None, {"error": f"{type(exc).__name__}: {exc}"}, sent, time.perf_counter() - sent)
                    connection.close()  # reconnects on the next request
                    continue
                record(index, status, answer, sent, time.perf_counter() - sent)
        finally:
            connection.close()

    with ThreadPoolExecutor(max_workers=concurrency) as pool:
        for future in [pool.submit(client) for _ in range(concurrency)]:
            future.result()


def server_health(host: str, port: int, timeout_s: float) -> dict | None:
    connection = http.client.HTTPConnection(host, port, timeout=timeout_s)
    try:
        status, health = request_json(connection, "GET", "/health")
    except (OSError, http.client.HTTPException):
        return None
    finally:
        connection.close()
    return health if status == 200 else None


def server_batching(host: str, port: int, timeout_s: float) -> dict | None:
    health = server_health(host, port, timeout_s)
    return None if health is None else health.get("batching")


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


_TABLE_HEAD = ("| requests | clients | errors | p50 latency (ms) | p95 latency (ms) | p99 latency (ms) | requests/s "
               "| audio s/s | mean batch size (server) |")


def _table_row(report: dict, first: str = "") -> str:
    latency = report["latency_ms"] or {"p50": float("nan"), "p95": float("nan"), "p99": float("nan")}
    mean_batch = (report["server_batching"] or {}).get("mean_batch_size")
    return (f"| {first}{report['requests']} | {report['concurrency']} | {report['errors'] + report['not_sent']} "
            f"| {latency['p50']:.1f} | {latency['p95']:.1f} | {latency['p99']:.1f} | {report['requests_per_s']:.1f} "
            f"| {report['audio_seconds_per_s']:.1f} | {'n/a' if mean_batch is None else f'{mean_batch:.2f}'} |")


def markdown_table(report: dict) -> str:
    """A one-row results table of :func:`run_load_test`'s report."""
    return "\n".join([_TABLE_HEAD, "|---:|---:|---:|---:|---:|---:|---:|---:|---:|", _table_row(report)]) + "\n"


LONG_LANE_WAIT_S = 0.05  # polling interval of /health while the long upload is taken in


def run_long_upload_scenario(url: str, payloads: list[bytes], long_payload: bytes, num_requests: int,
                             concurrency: int, max_seconds: float, timeout_s: float) -> dict:
    """The idle short load, then the short load while ``long_payload`` is decoded (module docstring).
    -> {"idle": report, "during_long": report, "long_request": {...}, "p95_ratio"}."""
    idle = run_load_test(url, payloads, num_requests, concurrency, max_seconds, timeout_s)
    host, port = loopback_address(url)
    bodies = [multipart_body(data) for data in payloads]
    before = server_health(host, port, timeout_s)
    if before is None or "long_form" not in before:
        raise ConfigError(f"{url}/health does not report a long-recording lane: is it this package's server?")
    long_request: dict = {}
    long_done = threading.Event()
    start = time.perf_counter()
    deadline = start + max_seconds

    def long_client() -> None:
        body, content_type = multipart_body(long_payload, filename="long.wav")
        connection = http.client.HTTPConnection(host, port, timeout=max_seconds)
        sent = time.perf_counter()
        try:
            status, answer = request_json(connection, "POST", "/transcribe", body, content_type)
            long_request.update(status=status, latency_s=round(time.perf_counter() - sent, 3),
                                duration_s=answer.get("duration_s"), rtf=answer.get("rtf"),
                                words=len(answer.get("words") or []), detail=answer.get("detail"))
        except (OSError, http.client.HTTPException) as exc:
            long_request.update(status=None, detail=f"{type(exc).__name__}: {exc}")
        finally:
            connection.close()
            long_done.set()

    uploader = threading.Thread(target=long_client, daemon=True)
    uploader.start()
    while not long_done.is_set() and time.perf_counter() < deadline:  # until the lane has taken the recording
        health = server_health(host, port, timeout_s)
        if health is not None and health["long_form"]["queued_or_running"] > 0:
            break
        time.sleep(LONG_LANE_WAIT_S)
    decoding_from = time.perf_counter()
    tally = _Tally()
    counter = iter(range(1 << 62))
    ticket_lock = threading.Lock()

    def next_ticket() -> int | None:
        if long_done.is_set() or time.perf_counter() >= deadline:
            return None
        with ticket_lock:
            return next(counter)

    run_clients(host, port, bodies, concurrency, next_ticket, tally, timeout_s)
    uploader.join(max(0.0, deadline - time.perf_counter()) + timeout_s)
    decoded_until = time.perf_counter()
    during = _Tally()
    for latency, sent, in zip(tally.latencies_s, tally.sent_at):
        if sent >= decoding_from and sent + latency <= decoded_until:
            during.success(latency, 0.0, sent)
    during.errors, during.error_samples = tally.errors, tally.error_samples
    during.audio_seconds = tally.audio_seconds
    count = len(during.latencies_s) + during.errors
    during_report = build_report(url, count, concurrency, during, decoded_until - decoding_from, None)
    after = server_health(host, port, timeout_s)
    long_request["lane"] = None if after is None else lane_difference(before["long_form"], after["long_form"])
    ratio = None
    if idle["latency_ms"] and during_report["latency_ms"]:
        ratio = round(during_report["latency_ms"]["p95"] / idle["latency_ms"]["p95"], 3)
    return {"idle": idle, "during_long": during_report, "long_request": long_request, "p95_ratio": ratio}


def lane_difference(before: dict, after: dict) -> dict:
    """The long-recording lane's counters over the test (/health after minus before); the current queue as is."""
    return {key: value if key == "queued_or_running" else round(value - before[key], 3)
            for key, value in after.items()}


def long_upload_markdown(scenario: dict) -> str:
    """Two rows (idle, during the long decode) and a line on the long request."""
    long = scenario["long_request"]
    rows = [_TABLE_HEAD.replace("| requests |", "| short requests |", 1),
            "|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
            _table_row(scenario["idle"], "idle: "), _table_row(scenario["during_long"], "during the long decode: ")]
    summary = (f"\nLong upload: HTTP {long.get('status')}, {long.get('duration_s')} s of audio answered in "
               f"{long.get('latency_s')} s (rtf {long.get('rtf')}), {long.get('words')} words; p95 ratio "
               f"{scenario['p95_ratio']}.\n")
    return "\n".join(rows) + "\n" + summary


def scenario_succeeded(scenario: dict) -> bool:
    """Every short request answered and the long one too."""
    idle, during = scenario["idle"], scenario["during_long"]
    return (idle["errors"] == idle["not_sent"] == 0 and during["errors"] == 0
            and scenario["long_request"].get("status") == 200)
