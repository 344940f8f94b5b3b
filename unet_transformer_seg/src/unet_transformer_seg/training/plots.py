"""Plots written into the run folder: loss curves, metric curves, and an image | truth | prediction grid."""

from __future__ import annotations

from pathlib import Path
from typing import Dict, List

import torch

from ..data.image_io import display_image
from ..labels import colour_labels


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


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
    images: List[torch.Tensor], truths: List[torch.Tensor], preds: List[torch.Tensor], path: Path, num_classes: int
) -> None:
    """images [C, H_i, W_i] (as read), truths / preds [H_i, W_i] -> one row per image: image | truth | prediction."""
    plt = _pyplot()
    count = len(images)
    fig, axes = plt.subplots(count, 3, figsize=(6, 2 * count), squeeze=False)
    for row in range(count):
        shown = display_image(images[row].cpu()).permute(1, 2, 0).numpy()  # [H, W, 3]
        panels = (shown, colour_labels(truths[row], num_classes),
                  colour_labels(preds[row], num_classes))
        for col, (panel, title) in enumerate(zip(panels, ("image", "truth", "prediction"))):
            axes[row, col].imshow(panel, cmap="gray" if panel.ndim == 2 else None, vmin=0, vmax=1)
            axes[row, col].set_axis_off()
            if row == 0:
                axes[row, col].set_title(title)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def plot_augmentation_preview(images: torch.Tensor, masks: torch.Tensor, path: Path, num_classes: int) -> None:
    """images [n, 3, S, S] in display range [0, 1] (`display_image`), masks [n, S, S] -> two rows: the images over their masks (ignored
    pixels white), so that a misaligned mask shows at a glance."""
    plt = _pyplot()
    count = images.shape[0]
    fig, axes = plt.subplots(2, count, figsize=(1.6 * count, 3.4), squeeze=False)
    for col in range(count):
        axes[0, col].imshow(images[col].clamp(0, 1).permute(1, 2, 0).cpu().numpy())
        axes[1, col].imshow(colour_labels(masks[col], num_classes))
        for row in range(2):
            axes[row, col].set_axis_off()
    fig.suptitle("training windows after augmentation (image / mask)", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
