"""Helpers shared by the paraformer_asr tests (importable by name; the fixtures live in conftest.py)."""

from __future__ import annotations

import contextlib
import importlib.util
import io
import json
import logging
import math
import os
import random
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import torch

PROJECT = Path(__file__).resolve().parents[1]


def script_environment() -> dict[str, str]:
    """A bare environment for script subprocesses (CI=1: no progress bars), keeping PYTHONPATH so that they import
    the same package as the tests."""
    env = {"CI": "1", "PATH": "/usr/bin:/bin"}
    if "PYTHONPATH" in os.environ:
        env["PYTHONPATH"] = os.environ["PYTHONPATH"]
    return env


def run_script(name: str, *args, cwd, check: bool = True) -> subprocess.CompletedProcess:
    """scripts/<name> in a subprocess from ``cwd`` (CI=1: no progress bars); AssertionError with its stderr when
    ``check`` and it fails."""
    result = subprocess.run([sys.executable, str(PROJECT / "scripts" / name), *map(str, args)], cwd=cwd,
                            capture_output=True, text=True, env=script_environment(), timeout=240)
    if check and result.returncode != 0:
        raise AssertionError(f"{name} failed ({result.returncode}):\n{result.stderr[-3000:]}")
    return result


def call_script(name: str, *args, cwd, check: bool = True) -> subprocess.CompletedProcess:
    """scripts/<name> run in this process, as its entry point runs it (``run_main(main)``: a user error prints
    ``error: ...`` and gives exit code 2), from ``cwd``, its stdout and stderr captured: what :func:`run_script`
    checks, without the seconds a fresh interpreter spends importing torch. Each script also runs in a real
    subprocess somewhere in the suite; this one is for the calls after that. torch's thread count, which the
    scripts set from the config, is restored afterwards."""
    from paraformer_asr.cli import run_main

    module = load_script(Path(name).stem)
    stdout, stderr = io.StringIO(), io.StringIO()
    threads, previous_dir = torch.get_num_threads(), os.getcwd()
    os.chdir(cwd)
    try:
        with contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(stderr):
            code = run_main(module.main, [str(arg) for arg in args])
    finally:
        os.chdir(previous_dir)
        torch.set_num_threads(threads)
    result = subprocess.CompletedProcess([name, *map(str, args)], code, stdout.getvalue(), stderr.getvalue())
    if check and code != 0:
        raise AssertionError(f"{name} failed ({code}):\n{result.stderr[-3000:]}")
    return result


def load_script(name: str):
    """scripts/<name>.py as a module (its ``main`` and helpers), without running it."""
    spec = importlib.util.spec_from_file_location(f"asr_script_{name}", PROJECT / "scripts" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def tiny_raw_config(output_dir: str = "runs") -> dict:
    """A config mapping for a model and toy task small enough to train in seconds."""
    return {
        "run": {"name": "tiny", "output_dir": output_dir, "seed": 0, "num_threads": 1},
        "data": {"kind": "toy", "toy": {"alphabet": "abcdef", "feature_dim": 16, "num_train": 96, "num_val": 16,
                                        "num_test": 8, "min_tokens": 2, "max_tokens": 5, "min_frames_per_token": 4,
                                        "max_frames_per_token": 7, "noise_std": 0.1}},
        "model": {"d_model": 32, "num_heads": 4, "encoder_layers": 1, "decoder_layers": 1, "ffn_dim": 64,
                  "subsampling": "2x", "subsampling_channels": 4, "dropout": 0.1},
        "train": {"epochs": 2, "batch_size": 16, "eval_batch_size": 16, "lr": 0.003, "warmup_steps": 2,
                  "log_every": 5, "plot_utterances": 2},
    }


def tiny_model(model_type: str = "paraformer"):
    """(cfg, data, model in eval mode) for the tiny config with ``model.type = model_type``; weights seeded with 0."""
    from paraformer_asr.config import config_from_dict
    from paraformer_asr.data.setup import build_data
    from paraformer_asr.factory import build_model

    raw = tiny_raw_config()
    raw["model"]["type"] = model_type
    cfg = config_from_dict(raw)
    data = build_data(cfg)
    torch.manual_seed(0)
    return cfg, data, build_model(cfg, data.input_dim, data.tokenizer).eval()


def overfit(model, batch, steps: int, lr: float = 3e-3) -> list[float]:
    """Train ``model`` on one batch for ``steps`` AdamW steps; returns the total loss seen at each step."""
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr)
    losses = []
    for _ in range(steps):
        out = model.compute_loss(batch)
        optimizer.zero_grad()
        out.total.backward()
        optimizer.step()
        losses.append(float(out.total.detach()))
    return losses


SPEECH_RATE = 16000


def speech_like(seconds: float, seed: int, rate: int = SPEECH_RATE) -> torch.Tensor:
    """Bursts of tones (0.2-0.6 s) separated by 0.1-0.8 s of low noise, all drawn from ``seed``. -> [N]"""
    rng = random.Random(seed)
    generator = torch.Generator().manual_seed(seed)
    parts, total = [], 0
    while total < seconds * rate:
        burst = round(rng.uniform(0.2, 0.6) * rate)
        t = torch.arange(burst) / rate
        parts.append(0.3 * torch.sin(2 * math.pi * rng.uniform(200, 900) * t))
        parts.append(0.003 * torch.randn(round(rng.uniform(0.1, 0.8) * rate), generator=generator))
        total += parts[-1].numel() + burst
    return torch.cat(parts)[:round(seconds * rate)]


def tiny_audio_config(manifest: Path, output_dir: Path, name: str, epochs: int) -> dict:
    """A config mapping for a tiny Paraformer on 20 log-mels that trains and validates on ``manifest``."""
    return {
        "run": {"name": name, "output_dir": str(output_dir), "seed": 0, "num_threads": 1},
        "data": {"kind": "manifest", "train_manifest": str(manifest), "val_manifest": str(manifest), "n_mels": 20},
        "model": {"d_model": 32, "num_heads": 4, "encoder_layers": 1, "decoder_layers": 1, "ffn_dim": 64,
                  "subsampling": "4x", "subsampling_channels": 4, "dropout": 0.0},
        "train": {"epochs": epochs, "batch_size": 4, "eval_batch_size": 8, "lr": 0.003, "warmup_steps": 2,
                  "log_every": 50, "plot_utterances": 0},
    }


class PackageLog(logging.Handler):
    """``with PackageLog() as log:`` collects the messages logged under the ``paraformer_asr`` logger at ``level``
    (default: warnings) and worse, the logger lowered to that level meanwhile. A run folder's logging turns that
    logger's propagation off, so pytest's caplog misses them once a training test has run."""

    def __init__(self, level: int = logging.WARNING):
        super().__init__(level)
        self.messages: list[str] = []
        self.logger = logging.getLogger("paraformer_asr")
        self.saved_level = self.logger.level

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())

    @property
    def text(self) -> str:
        return "\n".join(self.messages)

    def __enter__(self) -> PackageLog:
        self.saved_level = self.logger.level
        self.logger.setLevel(min(self.level, self.logger.getEffectiveLevel()))
        self.logger.addHandler(self)
        return self

    def __exit__(self, *exc) -> None:
        self.logger.removeHandler(self)
        self.logger.setLevel(self.saved_level)


def untrained_audio_model(seed: int = 0):
    """A LoadedModel of the tiny audio Paraformer (tiny_audio_config, 20 log-mels, a digit-and-space vocabulary)
    with seeded random weights and no normaliser: nothing to train, for tests of the plumbing (service, batching,
    short clips), not of accuracy."""
    from paraformer_asr.config import config_from_dict
    from paraformer_asr.data.tokenizer import CharTokenizer
    from paraformer_asr.inference import LoadedModel
    from paraformer_asr.factory import build_model

    cfg = config_from_dict(tiny_audio_config(Path("unused.jsonl"), Path("runs"), "untrained", epochs=1))
    tokenizer = CharTokenizer.build(["0123456789 "])
    torch.manual_seed(seed)
    model = build_model(cfg, cfg.data.n_mels, tokenizer).eval()
    return LoadedModel(model, cfg, tokenizer, None, cfg.data.n_mels, Path("untrained"))


@contextlib.contextmanager
def served(app, wait_s: float = 60.0):
    """``app`` under uvicorn on a free 127.0.0.1 port in a background thread; yields its base URL, stops it after."""
    import uvicorn

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + wait_s
    while not server.started:
        assert thread.is_alive() and time.monotonic() < deadline, "the server did not start"
        time.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(wait_s)


def train_tone_checkpoint(folder: Path) -> Path:
    """A tiny Paraformer trained for one epoch on word-like tone bursts (transcripts with spaces between words);
    -> its last.pt. Enough to run long-form decoding and the service, not to be accurate."""
    from paraformer_asr.config import config_from_dict
    from paraformer_asr.data.audio import write_audio
    from paraformer_asr.training.launch import train

    lines = []
    for index in range(8):
        write_audio(folder / f"u{index}.wav", speech_like(1.5, 10 + index), SPEECH_RATE)
        lines.append(json.dumps({"audio": f"u{index}.wav", "text": ["12 3", "4 56", "7 8 9", "10"][index % 4]}))
    (folder / "train.jsonl").write_text("\n".join(lines) + "\n")
    cfg = config_from_dict(tiny_audio_config(folder / "train.jsonl", folder / "runs", "tones", epochs=1))
    return train(cfg) / "checkpoints" / "last.pt"


def streaming_copy(checkpoint: Path, folder: Path) -> Path:
    """A trained checkpoint with model.streaming switched on (no new weights): decoded at 15-frame (600 ms) chunks,
    two chunks of look-back, two frames of look-ahead."""
    payload = torch.load(checkpoint, map_location="cpu", weights_only=True)
    payload["config"]["model"]["streaming"] = {"enabled": True, "left_chunks": 2, "right_frames": 2,
                                               "decode_chunk_size": 15}
    path = folder / "streaming.pt"
    torch.save(payload, path)
    return path
