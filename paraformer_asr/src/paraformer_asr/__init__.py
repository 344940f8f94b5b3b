"""paraformer_asr: a hand-written Paraformer (non-autoregressive ASR with a CIF predictor)."""

from paraformer_asr.errors import CheckpointError, ConfigError, DataError, TrainingError, UserError

__all__ = ["UserError", "ConfigError", "DataError", "CheckpointError", "TrainingError"]
__version__ = "0.1.0"
