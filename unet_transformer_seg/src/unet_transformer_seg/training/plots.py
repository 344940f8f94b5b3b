"""Plots written into the run folder: loss curves, metric curves, and an image | truth | prediction grid."""

from __future__ import annotations

from pathlib import Path
from typing import Dict, List

import numpy as np
import torch


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def class_colours(num_classes: int) -> np.ndarray:
    """[K, 3] uint8 display colours; class 0 is black."""
    import matplotlib

    cmap = matplotlib.colormaps["tab10"]
    colours = [(0.0, 0.0, 0.0)] + [cmap(i % 10)[:3] for i in range(num_classes - 1)]
    return (np.array(colours) * 255).round().astype(np.uint8)


def colourize(mask: torch.Tensor, num_classes: int) -> np.ndarray:
    """[H, W] class ids -> [H, W, 3] uint8."""
    return class_colours(num_classes)[mask.cpu().numpy()]


def plot_curves(history: List[Dict], plots_dir: Path) -> None:
    plt = _pyplot()
    epochs = [row["epoch"] for row in history]
    fig, ax = plt.subplots(figsize=(5, 3.5))
    ax.plot(epochs, [row["train_loss"] for row in history], marker="o", label="train")
    ax.plot(epochs, [row["val_loss"] for row in history], marker="o", label="val")
    ax.set(xlabel="epoch", ylabel="loss", title="loss")
    ax.legend()
    fig.tight_layout()
    fig.savefig(plots_dir / "loss.png", dpi=100)
    plt.close(fig)
    fig, ax = plt.subplots(figsize=(5, 3.5))
    for key in ("val_mean_dice", "val_mean_iou", "val_pixel_accuracy"):
        ax.plot(epochs, [row[key] for row in history], marker="o", label=key)
    ax.set(xlabel="epoch", ylabel="score", title="validation metrics", ylim=(0, 1.02))
    ax.legend()
    fig.tight_layout()
    fig.savefig(plots_dir / "metrics.png", dpi=100)
    plt.close(fig)


def plot_samples(
    images: torch.Tensor, truths: torch.Tensor, preds: torch.Tensor, path: Path, mean: float, std: float,
    num_classes: int,
) -> None:
    """images [N, C, H, W] (normalised), truths/preds [N, H, W] -> one row per image: image | truth | prediction."""
    plt = _pyplot()
    count = images.shape[0]
    fig, axes = plt.subplots(count, 3, figsize=(6, 2 * count), squeeze=False)
    for row in range(count):
        shown = (images[row] * std + mean).clamp(0, 1).permute(1, 2, 0).cpu().numpy()
        panels = (shown[..., 0] if shown.shape[2] == 1 else shown, colourize(truths[row], num_classes),
                  colourize(preds[row], num_classes))
        for col, (panel, title) in enumerate(zip(panels, ("image", "truth", "prediction"))):
            axes[row, col].imshow(panel, cmap="gray" if panel.ndim == 2 else None, vmin=0, vmax=1)
            axes[row, col].set_axis_off()
            if row == 0:
                axes[row, col].set_title(title)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
