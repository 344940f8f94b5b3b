"""Training plots (matplotlib, Agg backend): loss curves and CIF alignments."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def plot_loss_curves(step_log: list[dict], history: list[dict], path: Path) -> None:
    """Left: logged training loss terms per step. Right: validation CER per epoch."""
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4))
    if step_log:
        steps = [entry["step"] for entry in step_log]
        for key in ("loss", "ce", "quantity", "ctc"):
            if key in step_log[0]:
                left.plot(steps, [entry[key] for entry in step_log], label=key)
        left.set_yscale("log")
    left.set_xlabel("step")
    left.set_title("training losses")
    left.legend()
    if history:
        right.plot([h["epoch"] for h in history], [h["val_cer"] for h in history], marker="o", label="val CER")
        right.plot([h["epoch"] for h in history], [h["val_length_accuracy"] for h in history], marker="s",
                   label="val length accuracy")
    right.set_xlabel("epoch")
    right.set_title("validation")
    right.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)


def plot_cif_alignments(plot_data: list[dict], titles: list[str], path: Path) -> None:
    """Per utterance: alpha per encoder frame, CIF fire positions (red) and true boundaries (green)."""
    rows = max(1, len(plot_data))
    fig, axes = plt.subplots(rows, 1, figsize=(10, 2.6 * rows), squeeze=False)
    for axis, entry, title in zip(axes[:, 0], plot_data, titles):
        frames = range(len(entry["alphas"]))
        axis.bar(frames, entry["alphas"], color="steelblue", width=0.8, label="alpha")
        for i, fire in enumerate(entry["fires"]):
            axis.axvline(fire, color="red", linestyle="--", linewidth=1, label="CIF fire" if i == 0 else None)
        for i, bound in enumerate(entry.get("boundaries", [])):
            axis.axvline(bound, color="green", linestyle=":", linewidth=2, label="true boundary" if i == 0 else None)
        axis.set_ylim(0, 1.05)
        axis.set_title(title, fontsize=9)
        axis.set_xlabel("encoder frame")
        axis.legend(loc="upper right", fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)
