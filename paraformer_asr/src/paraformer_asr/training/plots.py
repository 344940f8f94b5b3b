"""Training plots (matplotlib, Agg backend): loss curves and CIF alignments."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import torch  # noqa: E402

from paraformer_asr.data.batching import Batch  # noqa: E402
from paraformer_asr.data.tokenizer import Tokenizer  # noqa: E402
from paraformer_asr.decode.timestamps import alignment_plot_data, decoded_token_times  # noqa: E402


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
    """Per utterance: the input features (log-mel spectrogram or toy features) over time, the alphas on a
    second axis, every token written at its end (fire, red dashed line) with its span as a bar along the
    top, and the true boundaries (green dotted) when known. The x axis is milliseconds."""
    rows = max(1, len(plot_data))
    fig, axes = plt.subplots(rows, 1, figsize=(11, 3.0 * rows), squeeze=False)
    for axis, entry, title in zip(axes[:, 0], plot_data, titles):
        features = entry["features"]  # [T][F]
        duration = len(features) * entry["frame_ms"]
        axis.imshow(list(map(list, zip(*features))), origin="lower", aspect="auto", cmap="magma",
                    extent=(0.0, duration, 0, len(features[0]) if features else 1))
        axis.set_ylabel("feature")
        height = len(features[0]) if features else 1
        for i, (start, end, token) in enumerate(zip(entry["starts_ms"], entry["ends_ms"], entry["tokens"])):
            axis.axvspan(start, end, ymin=0.94, ymax=1.0, color="white" if i % 2 else "silver")
            axis.axvline(end, color="red", linestyle="--", linewidth=1,
                         label="CIF fire (token end)" if i == 0 else None)
            axis.text(end, height * 0.92, token if token.strip() else "\u2423", fontsize=8, ha="right", va="top",
                      bbox={"facecolor": "white", "edgecolor": "none", "pad": 1, "alpha": 0.8})
        for i, bound in enumerate(entry.get("reference_ms", [])):
            axis.axvline(bound, color="lime", linestyle=":", linewidth=2, label="true boundary" if i == 0 else None)
        alpha_axis = axis.twinx()
        alpha_axis.plot(entry["alpha_ms"], entry["alphas"], color="cyan", marker=".", linewidth=1, label="alpha")
        alpha_axis.set_ylim(0, max(1.05, max(entry["alphas"], default=0.0) * 1.05))
        alpha_axis.set_ylabel("alpha")
        axis.set_xlim(0.0, duration)
        axis.set_title(title, fontsize=9)
        axis.set_xlabel("time (ms)")
        if axis.get_legend_handles_labels()[0]:  # nothing to name before the first token fires
            axis.legend(loc="lower right", fontsize=7, framealpha=0.8)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)


@torch.no_grad()
def plot_validation_alignments(model, batch: Batch, tokenizer: Tokenizer, clock, path: Path) -> None:
    """Decode ``batch`` (a few validation utterances) with ``model``'s CIF and draw each one's alignment."""
    model.eval()
    tokens, lengths, cif = model.decode_aligned(batch.features, batch.feat_mask)
    times = decoded_token_times(model, cif, batch.features, batch.feat_lengths, batch.durations, clock)
    pieces = [tokenizer.pieces(row[:n]) for row, n in zip(tokens.tolist(), lengths.tolist())]
    encoder_frames = model.encoder.output_lengths(batch.feat_lengths)
    count = batch.features.shape[0]
    data = alignment_plot_data(batch, cif.frame_weights, encoder_frames, times, pieces, clock, count)
    titles = [f"{batch.ids[i]}  ref '{batch.texts[i]}'  hyp '{tokenizer.decode(tokens[i, :lengths[i]])}'"
              for i in range(count)]
    plot_cif_alignments(data, titles, path)
