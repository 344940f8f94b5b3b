"""paraformer_asr: a hand-written Paraformer (non-autoregressive ASR with a CIF predictor)."""

import os

# oneDNN (torch's CPU convolutions) keeps a compiled primitive for every input shape it meets, up to 1024 of them.
# Audio comes in every length, so the cache only ever grows: after an hour of long-form decoding it held about
# 650 MB (docs/history.md, "Time and memory"). Shapes rarely repeat, so a small cache costs no speed. Set before
# the first convolution runs; a value in the environment wins.
os.environ.setdefault("ONEDNN_PRIMITIVE_CACHE_CAPACITY", "16")

from paraformer_asr.errors import CheckpointError, ConfigError, DataError, TrainingError, UserError  # noqa: E402

__all__ = ["UserError", "ConfigError", "DataError", "CheckpointError", "TrainingError"]
__version__ = "0.1.0"
