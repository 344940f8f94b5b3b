"""Decoding: searches over the models' outputs, LM fusion, timestamps, long-form stitching.

Greedy and beam search are the models' own methods (models/interface.py); :func:`transcribe_batches`
runs them over batches."""

from paraformer_asr.decode.beam import factorized_beam_search
from paraformer_asr.decode.search import transcribe_batches

__all__ = ["factorized_beam_search", "transcribe_batches"]
