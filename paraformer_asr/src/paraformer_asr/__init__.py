"""paraformer_asr: a hand-written Paraformer (non-autoregressive ASR with a CIF predictor)."""

from paraformer_asr.errors import CheckpointError, ConfigError, DataError, UserError

__all__ = ["UserError", "ConfigError", "DataError", "CheckpointError"]
__version__ = "0.1.0"
