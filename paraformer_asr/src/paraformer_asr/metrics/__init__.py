"""Recognition metrics."""

from paraformer_asr.metrics.asr_metrics import (RecognitionScores, edit_distance, matched_pairs, score_transcripts,
                                                word_boundary_errors)
from paraformer_asr.metrics.hotwords import hotword_scores

__all__ = ["edit_distance", "score_transcripts", "RecognitionScores", "matched_pairs", "word_boundary_errors",
           "hotword_scores"]
