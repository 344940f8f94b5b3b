"""Time and peak memory of transcribing long recordings as ``scripts/infer.py`` does, one process per recording.

Each recording is transcribed by a fresh ``python -m paraformer_asr_tools.benchmarks.long_form --checkpoint CKPT
RECORDING [infer options]``, which makes infer.py's library calls (``load_model``, then ``transcribe_inputs``) with
its backend, decoding and long-form options (start-up and model loading included, as a user would see it); its wall
time comes from the clock and its peak resident memory from ``os.wait4``'s resource usage of that process alone, both
taken by a small launcher process. The load average is read before and after each run: the machine may be shared.

Contract:
    measure_process(argv) -> {"wall_s", "peak_rss_mb", "exit_status"}
    benchmark_recordings(checkpoint, recordings, infer_args=(), repeats=1) -> list of rows
        row: recording, audio_s, wall_s (median of the repeats), rtf (wall_s / audio_s), peak_rss_mb (largest),
             load_before, load_after, walls (every repeat)
    markdown_rows(rows) -> Markdown table
    transcribe_recordings(argv) -> exit status: the measured command (this module run with -m)
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from paraformer_asr.cli import add_backend_arguments, parse_decoding_arguments, run_main
from paraformer_asr.data.audio import audio_info
from paraformer_asr.errors import DataError
from paraformer_asr.inference import load_model
from paraformer_asr.transcribe import transcribe_inputs


# A bare Python process between the caller and the measured command. Linux carries the largest resident size of a
# process across exec, and a child started from the caller (vfork, or fork) begins with the caller's: a caller that
# has torch loaded would add its own few hundred MB to the figure. The launcher holds little, times the command and
# reports the command's own peak (os.wait4's resource usage of that child alone) as one JSON line.
_LAUNCHER = """
import json, os, subprocess, sys, time
started = time.perf_counter()
child = subprocess.Popen(sys.argv[1:], stdout=subprocess.DEVNULL)
_, status, usage = os.wait4(child.pid, 0)
print(json.dumps({"wall_s": time.perf_counter() - started, "peak_rss_mb": usage.ru_maxrss / 1024.0,
                  "exit_status": os.waitstatus_to_exitcode(status)}))
"""


def measure_process(argv: list[str]) -> dict:
    """Run ``argv`` (its output discarded) -> wall seconds, its peak resident memory in MB, exit status.

    DataError naming the command and the end of its stderr when it fails."""
    with tempfile.TemporaryFile() as stderr:  # a file, not a pipe: a chatty command cannot fill it and stall
        launcher = subprocess.run([sys.executable, "-c", _LAUNCHER, *argv], stdout=subprocess.PIPE, stderr=stderr,
                                  check=False)
        stderr.seek(0)
        error_text = stderr.read().decode("utf-8", "replace").strip()
    if launcher.returncode != 0:
        raise DataError(f"cannot run {argv[0]}: {error_text[-500:]}")
    measured = json.loads(launcher.stdout)
    if measured["exit_status"] != 0:
        raise DataError(f"{' '.join(argv)} failed with exit status {measured['exit_status']}: {error_text[-500:]}")
    return measured


def benchmark_recordings(checkpoint: str, recordings: list[str], infer_args: tuple[str, ...] = (),
                         repeats: int = 1) -> list[dict]:
    rows = []
    for recording in recordings:
        audio_s = audio_info(recording).duration_s
        argv = [sys.executable, "-m", __name__, "--checkpoint", str(checkpoint), str(recording), *infer_args]
        load_before = os.getloadavg()[0]
        runs = [measure_process(argv) for _ in range(repeats)]
        wall = statistics.median(run["wall_s"] for run in runs)
        rows.append({"recording": str(recording), "audio_s": round(audio_s, 1), "wall_s": round(wall, 2),
                     "rtf": round(wall / audio_s, 4), "peak_rss_mb": round(max(r["peak_rss_mb"] for r in runs), 1),
                     "load_before": round(load_before, 2), "load_after": round(os.getloadavg()[0], 2),
                     "walls": [round(run["wall_s"], 2) for run in runs]})
    return rows


def markdown_rows(rows: list[dict]) -> str:
    lines = ["| recording | audio (min) | wall time (s) | real-time factor | peak memory (MB) | load average "
             "before / after |", "|---|---:|---:|---:|---:|---|"]
    lines += [f"| {Path(row['recording']).name} | {row['audio_s'] / 60:.1f} | {row['wall_s']:.1f} | {row['rtf']:.4f} "
              f"| {row['peak_rss_mb']:.0f} | {row['load_before']:.1f} / {row['load_after']:.1f} |" for row in rows]
    return "\n".join(lines) + "\n"


def transcribe_recordings(argv: list[str] | None = None) -> int:
    """The measured command: audio files transcribed as ``scripts/infer.py`` transcribes them (``load_model``, then
    ``transcribe_inputs``), with its backend, decoding and long-form options and ``--timestamps``; one transcript a
    line."""
    parser = argparse.ArgumentParser(description="transcribe recordings as scripts/infer.py does (the command the "
                                                 "long-form benchmark times)")
    add_backend_arguments(parser)
    parser.add_argument("inputs", nargs="+", help="audio files")
    parser.add_argument("--timestamps", action="store_true", help="decode token and word times too")
    args, options, decoding = parse_decoding_arguments(parser, argv)
    loaded, device = load_model(args.checkpoint, args.backend, args.device, args.num_threads)
    for result in transcribe_inputs(loaded, device, args.inputs, options, decoding=decoding, timed=args.timestamps):
        print(result["text"])
    return 0


if __name__ == "__main__":
    sys.exit(run_main(transcribe_recordings))
