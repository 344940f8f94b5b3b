"""Measurement: what the benchmark scripts time and report (decoding lives in decode/, serving in serving/).

- :mod:`~paraformer_asr.benchmarks.cif`: the vectorised CIF against the frame-by-frame loop (``scripts/benchmark.py``).
- :mod:`~paraformer_asr.benchmarks.decoding`: decoding speed and CER of trained models and exports
  (``scripts/benchmark.py --checkpoints``).
- :mod:`~paraformer_asr.benchmarks.long_form`: time and memory of ``infer.py`` on long recordings
  (``scripts/long_form_benchmark.py``).
- :mod:`~paraformer_asr.benchmarks.service_load` and :mod:`~paraformer_asr.benchmarks.service_soak`: load and soak
  tests of a running server on loopback (``scripts/load_test.py``).
"""
