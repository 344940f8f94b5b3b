"""Measurement: what the benchmark scripts time and report (decoding lives in the library's decode/, serving in
its serving/).

- :mod:`~paraformer_asr_tools.benchmarks.cif`: the vectorised CIF against the frame-by-frame loop
  (``scripts/benchmark.py``).
- :mod:`~paraformer_asr_tools.benchmarks.decoding`: decoding speed and CER of trained models and exports
  (``scripts/benchmark.py --checkpoints``).
- :mod:`~paraformer_asr_tools.benchmarks.long_form`: time and memory of transcribing long recordings, one process
  each (``scripts/long_form_benchmark.py``).
- :mod:`~paraformer_asr_tools.benchmarks.service_load` and :mod:`~paraformer_asr_tools.benchmarks.service_soak`:
  load and soak tests of a running server on loopback (``scripts/load_test.py``).
- :mod:`~paraformer_asr_tools.benchmarks.stream_latency`: latency of streaming recognition, in process and over the
  service's WebSocket (``scripts/stream_latency.py``).
"""
