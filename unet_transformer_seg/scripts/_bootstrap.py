"""Lets the scripts run from a source checkout without installing: puts ../src on sys.path if needed."""

import sys
from pathlib import Path

try:
    import unet_transformer_seg  # noqa: F401
except ImportError:
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
