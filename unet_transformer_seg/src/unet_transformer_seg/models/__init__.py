"""Models: UNet and UNetTransformer (`unet.py`, `transformer.py`), built from a config by `build_model` (`build.py`)."""

from .build import build_model, output_channels
from .unet import UNet, UNetTransformer

__all__ = ["UNet", "UNetTransformer", "build_model", "output_channels"]
