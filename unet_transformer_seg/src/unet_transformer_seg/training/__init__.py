"""Training loop, evaluation, checkpoints, run folder, plots, multi-process helpers."""
