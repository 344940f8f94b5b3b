"""Reading images and masks with matplotlib, writing PNGs with zlib, channel conversion.

Images come back as [C, H, W] float32 in [0, 1]; masks as [H, W] int64 class ids.
"""

from __future__ import annotations

import struct
import zlib
from pathlib import Path
from typing import Optional, Sequence

import numpy as np
import torch

from ..errors import DataError

IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg")
LUMA_WEIGHTS = (0.299, 0.587, 0.114)


def _read_array(path: Path) -> np.ndarray:
    import matplotlib.image

    if not path.is_file():
        raise DataError(f"file not found: {path}")
    try:
        array = np.asarray(matplotlib.image.imread(str(path)))
    except Exception as exc:  # PIL raises several unrelated types for unreadable files
        raise DataError(f"cannot read image {path}: {exc}") from None
    if array.ndim not in (2, 3) or (array.ndim == 3 and array.shape[2] not in (1, 3, 4)) or array.size == 0:
        raise DataError(f"unsupported image layout {array.shape} in {path}")
    return array


def _to_unit_float(array: np.ndarray) -> np.ndarray:
    if array.dtype == np.uint8:
        return array.astype(np.float32) / 255.0
    if array.dtype == np.uint16:
        return array.astype(np.float32) / 65535.0
    return array.astype(np.float32)


def convert_channels(image: torch.Tensor, channels: int) -> torch.Tensor:
    """[C_in, H, W] with C_in in {1, 3, 4} -> [channels, H, W]; alpha dropped, RGB->gray by luma, gray->RGB copied."""
    if image.shape[0] == 4:
        image = image[:3]
    if image.shape[0] == channels:
        return image
    if channels == 1:
        weights = torch.tensor(LUMA_WEIGHTS, dtype=image.dtype).view(3, 1, 1)
        return (image * weights).sum(dim=0, keepdim=True)
    return image.expand(channels, -1, -1).clone()


def read_image(path: str | Path, channels: int) -> torch.Tensor:
    """Image file (PNG, JPEG; gray, RGB or RGBA) -> [channels, H, W] float32 in [0, 1]."""
    path = Path(path)
    array = _to_unit_float(_read_array(path))
    if array.ndim == 2:
        array = array[..., None]
    image = torch.from_numpy(np.ascontiguousarray(array)).permute(2, 0, 1)  # [C_in, H, W]
    return convert_channels(image, channels)


def read_mask(path: str | Path, num_classes: int, palette: Optional[Sequence[Sequence[int]]] = None) -> torch.Tensor:
    """Mask PNG -> [H, W] int64 class ids.

    A single-channel mask holds class ids directly as 8-bit pixel values. A colour mask (RGB/RGBA) needs `palette`
    (palette[k] = [r, g, b] of class k); any colour not in the palette is an error naming the file.
    """
    path = Path(path)
    array = _read_array(path)
    if array.ndim == 3 and array.shape[2] == 1:
        array = array[..., 0]
    if array.ndim == 3 and array.shape[2] == 4 and np.allclose(array[..., :3], array[..., :1]) and palette is None:
        array = array[..., 0]  # gray stored as RGBA (e.g. palette PNGs of gray levels)
    if array.ndim == 2:
        levels = array.astype(np.int64) if array.dtype.kind in "ui" else np.rint(array * 255.0).astype(np.int64)
        ids = torch.from_numpy(levels)
    else:
        if palette is None:
            raise DataError(f"mask {path} is a colour image; set data.palette to map its colours to class ids")
        rgb = array[..., :3]
        rgb = rgb.astype(np.int64) if rgb.dtype.kind in "ui" else np.rint(rgb * 255.0).astype(np.int64)
        codes = torch.from_numpy((rgb[..., 0] << 16) | (rgb[..., 1] << 8) | rgb[..., 2])  # [H, W]
        palette_codes = torch.tensor([(r << 16) | (g << 8) | b for r, g, b in palette])  # [K]
        matches = codes.unsqueeze(-1) == palette_codes  # [H, W, K]
        unknown = ~matches.any(dim=-1)
        if bool(unknown.any()):
            y, x = (int(v) for v in unknown.nonzero()[0])
            raise DataError(f"mask {path} has colour {rgb[y, x].tolist()} at (row {y}, col {x}) not in data.palette")
        ids = matches.int().argmax(dim=-1).long()
    if int(ids.max()) >= num_classes:
        raise DataError(f"mask {path} holds class id {int(ids.max())} >= data.num_classes = {num_classes}")
    return ids


def _png_chunk(kind: bytes, payload: bytes) -> bytes:
    return struct.pack(">I", len(payload)) + kind + payload + struct.pack(">I", zlib.crc32(kind + payload) & 0xFFFFFFFF)


def write_png(path: str | Path, array: np.ndarray) -> None:
    """Write uint8 [H, W] (grayscale) or [H, W, 3] (RGB) as an 8-bit PNG."""
    array = np.ascontiguousarray(array)
    if array.dtype != np.uint8 or array.ndim not in (2, 3) or (array.ndim == 3 and array.shape[2] != 3):
        raise ValueError(f"write_png needs uint8 [H, W] or [H, W, 3], got {array.dtype} {array.shape}")
    height, width = array.shape[:2]
    colour_type = 0 if array.ndim == 2 else 2
    rows = array.reshape(height, -1)
    raw = np.concatenate([np.zeros((height, 1), dtype=np.uint8), rows], axis=1).tobytes()  # filter byte 0 per row
    header = struct.pack(">IIBBBBB", width, height, 8, colour_type, 0, 0, 0)
    data = b"\x89PNG\r\n\x1a\n" + _png_chunk(b"IHDR", header) + _png_chunk(b"IDAT", zlib.compress(raw, 6))
    data += _png_chunk(b"IEND", b"")
    Path(path).write_bytes(data)


def image_to_uint8(image: torch.Tensor) -> np.ndarray:
    """[C, H, W] float in [0, 1] -> [H, W] (C=1) or [H, W, 3] uint8."""
    array = (image.clamp(0, 1) * 255.0).round().to(torch.uint8).permute(1, 2, 0).numpy()
    return array[..., 0] if array.shape[2] == 1 else array
