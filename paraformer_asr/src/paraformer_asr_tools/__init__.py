"""Tools beside the speech recogniser: what makes its test corpora and what measures it. The library
(``paraformer_asr``) never imports this package; the scripts that make corpora and run benchmarks do.

- :mod:`~paraformer_asr_tools.corpus`: synthetic spoken corpora, long test recordings and a small set of real
  recordings, written as audio files plus JSON Lines manifests (``scripts/make_speech_corpus.py``,
  ``scripts/make_long_recording.py``, ``scripts/make_real_testset.py``).
- :mod:`~paraformer_asr_tools.benchmarks`: what the benchmark scripts time and report.
"""
