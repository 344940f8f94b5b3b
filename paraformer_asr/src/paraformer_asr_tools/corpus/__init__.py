"""Making test corpora: audio files plus JSON Lines manifests that the library's data/manifest.py reads.

- :mod:`~paraformer_asr_tools.corpus.speech_corpus`: what the synthetic corpus says (phrases, words, rare words)
  and in which accents.
- :mod:`~paraformer_asr_tools.corpus.voices`: the speech synthesisers (espeak-ng, flite, festival) and their voices.
- :mod:`~paraformer_asr_tools.corpus.utterance_plans`: one plan per utterance (text, voice, prosody, noise).
- :mod:`~paraformer_asr_tools.corpus.synthesis`: the plans spoken and written as a corpus
  (``scripts/make_speech_corpus.py``).
- :mod:`~paraformer_asr_tools.corpus.word_timing`: utterances with known word times, from words synthesised apart.
- :mod:`~paraformer_asr_tools.corpus.long_recording`: long recordings joined from a manifest's utterances
  (``scripts/make_long_recording.py``).
- :mod:`~paraformer_asr_tools.corpus.real_recordings`: real people's speech from Debian packages
  (``scripts/make_real_testset.py``).
"""
