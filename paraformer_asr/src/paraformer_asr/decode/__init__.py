"""Decoding: greedy and beam search over the Paraformer's per-position posteriors."""

from paraformer_asr.decode.beam import factorized_beam_search
from paraformer_asr.decode.search import beam_search, greedy_decode, transcribe_batches

__all__ = ["greedy_decode", "beam_search", "factorized_beam_search", "transcribe_batches"]
