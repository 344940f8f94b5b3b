"""The optional ``[onnx]`` extra (onnx + onnxruntime): a clear message naming it when it is missing."""

from __future__ import annotations

import importlib
import importlib.util

from paraformer_asr.errors import ConfigError

ONNX_MODULES = ("onnx", "onnxruntime")
INSTALL_HINT = "pip install -e 'paraformer_asr[onnx]'"


def require_onnx() -> dict[str, str]:
    """-> the versions of onnx and onnxruntime; ConfigError naming the extra when either is not installed."""
    missing = [name for name in ONNX_MODULES if importlib.util.find_spec(name) is None]
    if missing:
        raise ConfigError(f"ONNX export and the onnx backend need the optional 'onnx' packages (missing: "
                          f"{', '.join(missing)}); install them with: {INSTALL_HINT}")
    return {name: importlib.import_module(name).__version__ for name in ONNX_MODULES}
