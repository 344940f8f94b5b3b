"""Training: data setup, loop, checkpoints, run folder and plots."""
