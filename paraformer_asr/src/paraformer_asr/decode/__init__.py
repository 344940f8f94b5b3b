"""Decoding: greedy and beam search over the Paraformer's per-position posteriors."""
