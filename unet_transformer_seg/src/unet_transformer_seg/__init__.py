"""Image segmentation with a hand-written U-Net and a U-Net whose bottleneck is a transformer."""

__version__ = "0.1.0"
