"""Plots written into the run folder (loss curves, metric curves, an image | truth | prediction grid) and by eval.py
(a confusion matrix)."""

from __future__ import annotations

from pathlib import Path
from typing import Dict, List, Optional, Sequence

import numpy as np
import torch

from ..data.image_io import display_image
from ..labels import class_colours, colour_labels


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


def _class_legend(fig, names: Sequence[str]) -> None:
    """A legend under the figure (saved with bbox_inches="tight" to keep it): each class's colour and name."""
    from matplotlib.patches import Patch

    colours = class_colours(len(names)) / 255.0  # [K, 3]
    handles = [Patch(facecolor=colour, edgecolor="gray", label=name) for colour, name in zip(colours, names)]
    fig.legend(handles=handles, loc="upper center", bbox_to_anchor=(0.5, 0), ncol=min(len(names), 4), fontsize=7,
               frameon=False)


def _save_with_legend(fig, path: Path, class_names: Optional[Sequence[str]]) -> None:
    """Lay out and write the figure at 100 dpi, with the class legend under it when `class_names` is given; close it."""
    fig.tight_layout()
    if class_names is not None:
        _class_legend(fig, class_names)
    fig.savefig(path, dpi=100, bbox_inches="tight" if class_names is not None else None)
    _pyplot().close(fig)


def plot_samples(
    images: List[torch.Tensor], truths: List[torch.Tensor], preds: List[torch.Tensor], path: Path, num_classes: int,
    class_names: Optional[Sequence[str]] = None,
) -> None:
    """images [C, H_i, W_i] (as read), truths / preds [H_i, W_i] -> one row per image: image | truth | prediction;
    with `class_names`, a legend naming the class colours."""
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
    _save_with_legend(fig, path, class_names)


def plot_augmentation_preview(images: torch.Tensor, masks: torch.Tensor, path: Path, num_classes: int,
                              class_names: Optional[Sequence[str]] = None) -> None:
    """images [n, 3, S, S] in display range [0, 1] (`display_image`), masks [n, S, S] -> two rows: the images over
    their masks (ignored pixels white), so that a misaligned mask shows at a glance; with `class_names`, a legend
    naming the colours."""
    plt = _pyplot()
    count = images.shape[0]
    fig, axes = plt.subplots(2, count, figsize=(1.6 * count, 3.4), squeeze=False)
    for col in range(count):
        axes[0, col].imshow(images[col].clamp(0, 1).permute(1, 2, 0).cpu().numpy())
        axes[1, col].imshow(colour_labels(masks[col], num_classes))
        for row in range(2):
            axes[row, col].set_axis_off()
    fig.suptitle("training windows after augmentation (image / mask)", fontsize=9)
    _save_with_legend(fig, path, class_names)


def plot_confusion_matrix(matrix: torch.Tensor, class_names: Sequence[str], path: Path) -> None:
    """matrix [K, K] pixel counts (rows truth, columns prediction) -> a heat map of each row normalised to sum 1 (the
    share of a true class's pixels given each label; an empty row stays 0), classes named, shares written in the
    cells when K <= 12."""
    plt = _pyplot()
    counts = torch.as_tensor(matrix, dtype=torch.float64)  # [K, K]
    shares = (counts / counts.sum(dim=1, keepdim=True).clamp(min=1)).numpy()  # rows sum to 1 (or 0: no pixels)
    size = len(class_names)
    side = min(2.5 + 0.45 * size, 14)
    fig, ax = plt.subplots(figsize=(side + 1, side))
    shown = ax.imshow(shares, cmap="Blues", vmin=0, vmax=1)
    fig.colorbar(shown, ax=ax, fraction=0.046, pad=0.04, label="share of the true class's pixels")
    ax.set_xticks(range(size), labels=class_names, rotation=45, ha="right", fontsize=8)
    ax.set_yticks(range(size), labels=class_names, fontsize=8)
    ax.set(xlabel="prediction", ylabel="truth", title="confusion matrix (rows normalised)")
    if size <= 12:
        for (row, col), share in np.ndenumerate(shares):
            ax.text(col, row, f"{share:.2f}", ha="center", va="center", fontsize=7,
                    color="white" if share > 0.5 else "black")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
