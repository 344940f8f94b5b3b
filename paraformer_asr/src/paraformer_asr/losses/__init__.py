"""Loss functions (one place for each formula)."""

from paraformer_asr.losses.seq_losses import (ctc_loss, hybrid_loss_weights, label_smoothed_cross_entropy,
                                              quantity_loss)

__all__ = ["label_smoothed_cross_entropy", "quantity_loss", "ctc_loss", "hybrid_loss_weights"]
