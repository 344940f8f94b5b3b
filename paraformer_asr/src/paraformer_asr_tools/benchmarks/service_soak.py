"""A bounded soak test of a running speech-recognition server, on loopback only (``scripts/load_test.py --soak``).

Good uploads are first sent one at a time for their reference texts. Then C clients send N uploads, one in
``bad_every`` a bad one (an empty body, bytes that are no audio, a WAV header with no sample, a header cut short, a
float WAV with NaN samples; cycled), while a sampler reads the server process's resident memory (Linux
``/proc/<pid>/status``) every ``sample_every_s``. Every answer is checked: a good upload must get 200 and exactly its
reference text, a bad one a 4xx with a message. Memory growth is measured from the end of the warm-up (the first
``warmup_fraction`` of the requests) to the end: on a cold server the resident memory rises over the first few
hundred concurrent requests (the thread pool's threads, glibc's per-thread malloc arenas, torch's allocator
caches) before it levels off (docs/history.md, "Failure isolation and soak"). The report keeps the whole series.

Contracts:
    bad_uploads(sample_rate) -> list of (name, bytes)
    run_soak(url, payloads, num_requests, concurrency, bad_every, server_pid, timeout_s, max_seconds,
             warmup_fraction=0.25, sample_every_s=0.5) -> report dict
    soak_markdown(report) -> Markdown table
"""

from __future__ import annotations

import http.client
import io
import threading
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import numpy as np
import soundfile

from paraformer_asr.errors import ConfigError
from paraformer_asr_tools.benchmarks.service_load import (loopback_address, multipart_body, percentile, request_json,
                                                          send_uploads, server_health)

GOOD_OK = "good: 200, text as alone"
GOOD_LOST = "good LOST"
NOT_REFUSED = "NOT refused"


def bad_uploads(sample_rate: int = 16000) -> list[tuple[str, bytes]]:
    """One upload of each kind of bad input the service must answer with 400."""
    def wav(samples: np.ndarray, subtype: str) -> bytes:
        buffer = io.BytesIO()
        soundfile.write(buffer, samples, sample_rate, format="WAV", subtype=subtype)
        return buffer.getvalue()

    tone = (0.3 * np.sin(np.arange(sample_rate // 2) * 0.07)).astype(np.float32)  # [N]
    with_nan = tone.copy()
    with_nan[::100] = np.nan
    return [("empty body", b""), ("not audio", b"\x00" + bytes(range(256)) * 4),
            ("header without samples", wav(np.zeros(0, np.float32), "PCM_16")),
            ("header cut short", wav(tone, "PCM_16")[:30]), ("NaN samples", wav(with_nan, "FLOAT"))]


def resident_bytes(pid: int) -> int:
    """The resident set size of process ``pid`` (Linux), in bytes."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError as exc:
        raise ConfigError(f"cannot read the memory of process {pid}: {exc.strerror or exc}") from None
    for line in status.splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise ConfigError(f"/proc/{pid}/status has no VmRSS line")


class _MemorySampler(threading.Thread):
    """Samples (perf_counter time, requests answered, resident bytes) every ``every_s`` until ``stop`` is set."""

    def __init__(self, pid: int, every_s: float, answered: Callable[[], int]):
        super().__init__(name="rss-sampler", daemon=True)
        self.pid, self.every_s, self.answered = pid, every_s, answered
        self.samples: list[tuple[float, int, int]] = []
        self.stop = threading.Event()

    def run(self) -> None:
        while True:
            self.samples.append((time.perf_counter(), self.answered(), resident_bytes(self.pid)))
            if self.stop.wait(self.every_s):
                self.samples.append((time.perf_counter(), self.answered(), resident_bytes(self.pid)))
                return

    def after(self, requests: int) -> int:
        """The first sample taken once ``requests`` requests were answered (the last one if none was)."""
        return next((rss for _, done, rss in self.samples if done >= requests), self.samples[-1][2])


def reference_texts(host: str, port: int, payloads: list[bytes], timeout_s: float) -> list[str]:
    """Each good upload sent alone -> its text; ConfigError when one is not answered 200."""
    texts = []
    connection = http.client.HTTPConnection(host, port, timeout=timeout_s)
    try:
        for index, data in enumerate(payloads):
            body, content_type = multipart_body(data)
            status, answer = request_json(connection, "POST", "/transcribe", body, content_type)
            if status != 200:
                raise ConfigError(f"good upload {index} alone was answered HTTP {status}: {answer}; the soak needs "
                                  f"uploads the server transcribes")
            texts.append(answer["text"])
    finally:
        connection.close()
    return texts


def run_soak(url: str, payloads: list[bytes], num_requests: int, concurrency: int, bad_every: int, server_pid: int,
             timeout_s: float, max_seconds: float, warmup_fraction: float = 0.25,
             sample_every_s: float = 0.5) -> dict:
    """The soak (module docstring) -> report: requests, outcome counts by kind, latency p50/p95 of the good
    requests, resident memory at the start, after the warm-up and at the end, and the growth after the warm-up."""
    if bad_every < 2:
        raise ConfigError(f"--bad-every must be >= 2, got {bad_every}")
    if not 0 <= warmup_fraction < 1:
        raise ConfigError(f"--warmup-fraction must be in [0, 1), got {warmup_fraction}")
    host, port = loopback_address(url)
    bads = bad_uploads()
    good_bodies = [multipart_body(data) for data in payloads]
    bad_bodies = [multipart_body(data, filename=f"bad{index}.wav") for index, (_, data) in enumerate(bads)]
    expected = reference_texts(host, port, payloads, timeout_s)
    failures_before = (server_health(host, port, timeout_s) or {}).get("failures")

    def is_bad(index: int) -> bool:
        return index % bad_every == bad_every - 1

    def body_of(index: int) -> tuple[bytes, str]:
        if is_bad(index):
            return bad_bodies[(index // bad_every) % len(bad_bodies)]
        return good_bodies[index % len(good_bodies)]

    lock = threading.Lock()
    outcomes: Counter[str] = Counter()
    samples: list[str] = []
    good_latencies_ms: list[float] = []
    done = [0]

    def classify(index: int, status: int | None, answer: dict) -> str:
        if is_bad(index):
            kind = bads[(index // bad_every) % len(bads)][0]
            refused = status is not None and 400 <= status < 500 and bool(answer.get("detail"))
            return f"bad ({kind}): {status}" if refused else f"bad ({kind}) {NOT_REFUSED}: {status}"
        if status == 200:
            return GOOD_OK if answer["text"] == expected[index % len(payloads)] else f"{GOOD_LOST}: other text"
        return f"{GOOD_LOST}: {'connection error' if status is None else f'HTTP {status}'}"

    def record(index: int, status: int | None, answer: dict, sent: float, latency_s: float) -> None:
        outcome = classify(index, status, answer)
        with lock:
            outcomes[outcome] += 1
            if outcome == GOOD_OK:
                good_latencies_ms.append(1000.0 * latency_s)
            elif (GOOD_LOST in outcome or NOT_REFUSED in outcome) and len(samples) < 5:
                samples.append(f"request {index}: {outcome}: {answer}")
            done[0] += 1

    tickets = iter(range(num_requests))
    ticket_lock = threading.Lock()
    start = time.perf_counter()

    def next_ticket() -> int | None:
        if time.perf_counter() - start >= max_seconds:
            return None
        with ticket_lock:
            return next(tickets, None)

    sampler = _MemorySampler(server_pid, sample_every_s, lambda: done[0])
    sampler.start()
    send_uploads(host, port, body_of, concurrency, next_ticket, record, timeout_s)
    wall_s = time.perf_counter() - start
    sampler.stop.set()
    sampler.join()
    health = server_health(host, port, timeout_s)
    rss_start, rss_end = sampler.samples[0][2], sampler.samples[-1][2]
    rss_warm = sampler.after(round(warmup_fraction * num_requests))
    good_sent = sum(1 for index in range(num_requests) if not is_bad(index))
    latencies = sorted(good_latencies_ms)
    return {
        "url": url, "requests": num_requests, "answered": done[0], "concurrency": concurrency,
        "bad_every": bad_every, "wall_s": round(wall_s, 2),
        "good_requests": good_sent, "good_ok": outcomes[GOOD_OK],
        "good_lost": sum(count for outcome, count in outcomes.items() if GOOD_LOST in outcome),
        "bad_not_refused": sum(count for outcome, count in outcomes.items() if NOT_REFUSED in outcome),
        "outcomes": dict(sorted(outcomes.items())), "problem_samples": samples,
        "good_latency_ms": ({"p50": round(percentile(latencies, 50), 1), "p95": round(percentile(latencies, 95), 1)}
                            if latencies else None),
        "rss_mib": {"start": _mib(rss_start), "after_warmup": _mib(rss_warm), "end": _mib(rss_end),
                    "max": _mib(max(rss for _, _, rss in sampler.samples)), "samples": len(sampler.samples)},
        "rss_series": [{"s": round(when - start, 1), "answered": answered, "mib": _mib(rss)}
                       for when, answered, rss in sampler.samples],
        "rss_growth_after_warmup": round((rss_end - rss_warm) / rss_warm, 4),
        "server_failures": {"before": failures_before, "after": (health or {}).get("failures")},
        "server_up": health is not None and health.get("status") == "ok",
    }


def soak_succeeded(report: dict, max_growth: float = 0.10) -> bool:
    """Every request answered, no good one lost, every bad one refused, the server up, memory growth bounded."""
    return (report["answered"] == report["requests"] and report["good_lost"] == 0 and report["bad_not_refused"] == 0
            and report["server_up"] and report["rss_growth_after_warmup"] < max_growth)


def soak_markdown(report: dict) -> str:
    latency = report["good_latency_ms"] or {"p50": float("nan"), "p95": float("nan")}
    rss = report["rss_mib"]
    refused = sum(count for outcome, count in report["outcomes"].items()
                  if outcome.startswith("bad (") and NOT_REFUSED not in outcome)
    return ("| requests | clients | good: 200 with their text | good lost | bad: 4xx | bad not refused "
            "| p50 good (ms) | p95 good (ms) | RSS start / after warm-up / end (MiB) | growth after warm-up |\n"
            "|---:|---:|---:|---:|---:|---:|---:|---:|---|---:|\n"
            f"| {report['answered']} | {report['concurrency']} | {report['good_ok']} | {report['good_lost']} "
            f"| {refused} | {report['bad_not_refused']} | {latency['p50']:.1f} | {latency['p95']:.1f} "
            f"| {rss['start']} / {rss['after_warmup']} / {rss['end']} "
            f"| {100 * report['rss_growth_after_warmup']:.1f} % |\n")


def _mib(num_bytes: int) -> float:
    return round(num_bytes / 2**20, 1)
