"""Deployment: ONNX export of trained checkpoints (export.py, graphs.py) and the onnxruntime backend (runtime.py)."""
