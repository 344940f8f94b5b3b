"""Recognition metrics."""

from paraformer_asr.metrics.asr_metrics import RecognitionScores, edit_distance, score_transcripts

__all__ = ["edit_distance", "score_transcripts", "RecognitionScores"]
