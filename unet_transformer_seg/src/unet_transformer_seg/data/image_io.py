"""Image and mask files through Pillow, and channel conversion.

Images come back as [C, H, W] float32 in [0, 1]; masks as [H, W] int64 class ids, with IGNORE_LABEL (-1) where the
file holds `data.ignore_index`. Pixels are used as stored (no EXIF rotation), so an image and its mask stay aligned.

Mask formats (`read_mask`):

| File | Mode (Pillow) | Class id of a pixel |
|---|---|---|
| 1-bit PNG / TIFF / BMP | `1` | 0 or 1 |
| 8-bit gray | `L` (`LA`: alpha dropped) | the gray value |
| 16-bit gray | `I;16` (`I`) | the gray value, 0..65535 kept exactly |
| indexed colour (VOC, Cityscapes style) | `P` (`PA`) | the palette index, not its colour |
| RGB / RGBA with `data.palette` | `RGB`, `RGBA` | k where palette[k] is the pixel's colour |
| gray stored as RGB / RGBA, no palette | `RGB`, `RGBA` with r = g = b | the gray value |
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional, Sequence

import numpy as np
import torch
from PIL import Image, UnidentifiedImageError

from ..errors import DataError
from ..labels import IGNORE_LABEL, class_colours

IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".tif", ".tiff", ".bmp")
MASK_SUFFIXES = (".png", ".tif", ".tiff", ".bmp")  # lossless only: JPEG would change class ids
LUMA_WEIGHTS = (0.299, 0.587, 0.114)
VOC_VOID = 255
MAX_INDEXED_CLASSES = 256  # more classes than this are written as 16-bit gray ids


def open_image(path: str | Path) -> Image.Image:
    """Open an image file (first frame of a multi-frame file); a missing or unreadable file is a DataError."""
    path = Path(path)
    if not path.is_file():
        raise DataError(f"file not found: {path}")
    try:
        image = Image.open(path)
        image.load()
    except (UnidentifiedImageError, OSError, ValueError, SyntaxError) as exc:
        raise DataError(f"cannot read image {path}: {exc}") from None
    if image.width == 0 or image.height == 0:
        raise DataError(f"image {path} is empty ({image.width}x{image.height})")
    return image


def image_size(path: str | Path) -> tuple:
    """(height, width) from the file header, without decoding the pixels."""
    try:
        with Image.open(path) as image:
            return image.height, image.width
    except (UnidentifiedImageError, OSError, ValueError, SyntaxError) as exc:
        raise DataError(f"cannot read image {path}: {exc}") from None


def _unit_float_array(image: Image.Image, path: Path) -> np.ndarray:
    """Pixels as float32 [H, W] or [H, W, 3|4] in [0, 1], whatever the mode."""
    if image.mode in ("P", "PA"):  # colours of an indexed image
        image = image.convert("RGBA" if "transparency" in image.info or image.mode == "PA" else "RGB")
    elif image.mode in ("1", "LA"):
        image = image.convert("L")
    elif image.mode in ("CMYK", "YCbCr", "LAB", "HSV"):
        image = image.convert("RGB")
    array = np.asarray(image)
    if image.mode.startswith("I;16") or image.mode == "I":  # 16-bit gray
        return np.clip(array.astype(np.float32) / 65535.0, 0.0, 1.0)
    if image.mode == "F":
        return np.clip(array.astype(np.float32), 0.0, 1.0)
    if array.dtype != np.uint8:
        raise DataError(f"unsupported image mode {image.mode!r} in {path}")
    return array.astype(np.float32) / 255.0


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
    """Image file (PNG 8/16-bit, JPEG, TIFF, BMP; gray, RGB, RGBA or indexed) -> [channels, H, W] float32 in [0, 1]."""
    path = Path(path)
    array = _unit_float_array(open_image(path), path)
    if array.ndim == 2:
        array = array[..., None]
    image = torch.from_numpy(np.ascontiguousarray(array)).permute(2, 0, 1)  # [C_in, H, W]
    return convert_channels(image, channels)


def _ids_from_palette(rgb: np.ndarray, palette: Sequence[Sequence[int]], path: Path) -> np.ndarray:
    """[H, W, 3] uint8 colours -> [H, W] int64 class ids via palette[k] = [r, g, b]; unknown colours are an error."""
    codes = (rgb[..., 0].astype(np.int64) << 16) | (rgb[..., 1].astype(np.int64) << 8) | rgb[..., 2]  # [H, W]
    palette_codes = np.array([(r << 16) | (g << 8) | b for r, g, b in palette], dtype=np.int64)  # [K]
    order = np.argsort(palette_codes)
    sorted_codes = palette_codes[order]
    position = np.clip(np.searchsorted(sorted_codes, codes), 0, len(sorted_codes) - 1)  # [H, W]
    known = sorted_codes[position] == codes
    if not known.all():
        row, col = (int(v) for v in np.argwhere(~known)[0])
        colour = rgb[row, col].tolist()
        raise DataError(f"mask {path} has colour {colour} at (row {row}, col {col}) not in data.palette")
    return order[position].astype(np.int64)


def _mask_ids(image: Image.Image, path: Path, palette: Optional[Sequence[Sequence[int]]]) -> np.ndarray:
    """The raw ids of a mask file as [H, W] int64 (see the module docstring for each format)."""
    mode = image.mode
    if mode in ("1", "L", "P") or mode.startswith("I;16") or mode == "I":
        return np.asarray(image).astype(np.int64)
    if mode in ("LA", "PA"):
        return np.asarray(image)[..., 0].astype(np.int64)
    if mode in ("RGB", "RGBA"):
        rgb = np.asarray(image)[..., :3]
        if palette is not None:
            return _ids_from_palette(rgb, palette, path)
        if (rgb == rgb[..., :1]).all():  # gray stored as RGB
            return rgb[..., 0].astype(np.int64)
        raise DataError(f"mask {path} is a colour image; set data.palette to map its colours to class ids")
    raise DataError(
        f"mask {path} has image mode {mode!r}; masks must be 1-, 8- or 16-bit gray, indexed colour, RGB or RGBA"
    )


def read_mask(
    path: str | Path,
    num_classes: int,
    palette: Optional[Sequence[Sequence[int]]] = None,
    ignore_index: Optional[int] = None,
) -> torch.Tensor:
    """Mask file -> [H, W] int64 class ids in 0..num_classes-1, IGNORE_LABEL where the file holds `ignore_index`.

    Any other value outside 0..num_classes-1 is a DataError naming the file, the value and its first pixel.
    """
    path = Path(path)
    ids = _mask_ids(open_image(path), path, palette)  # [H, W]
    ignored = ids == ignore_index if ignore_index is not None else np.zeros(ids.shape, dtype=bool)
    invalid = ((ids < 0) | (ids >= num_classes)) & ~ignored
    if invalid.any():
        row, col = (int(v) for v in np.argwhere(invalid)[0])
        value = int(ids[row, col])
        message = (f"mask {path} holds class id {value} at (row {row}, col {col}), but data.num_classes = "
                   f"{num_classes} allows 0..{num_classes - 1}")
        if value == VOC_VOID and ignore_index is None:
            message += f"; if {VOC_VOID} marks void pixels (as in PASCAL VOC), set data.ignore_index: {VOC_VOID}"
        raise DataError(message)
    ids[ignored] = IGNORE_LABEL
    return torch.from_numpy(ids)


def write_png(path: str | Path, array: np.ndarray) -> None:
    """Write uint8 [H, W] (gray) or [H, W, 3] (RGB) as an 8-bit PNG."""
    array = np.ascontiguousarray(array)
    if array.dtype != np.uint8 or array.ndim not in (2, 3) or (array.ndim == 3 and array.shape[2] != 3):
        raise ValueError(f"write_png needs uint8 [H, W] or [H, W, 3], got {array.dtype} {array.shape}")
    Image.fromarray(array).save(path, format="PNG")


def write_label_png(path: str | Path, labels: torch.Tensor, num_classes: int) -> None:
    """labels [H, W] class ids -> indexed PNG: pixel value = class id, palette = class colours.

    With more than 256 classes (an indexed PNG holds at most 256) the ids are written as a 16-bit gray PNG.
    """
    ids = labels.cpu().numpy()
    if num_classes > MAX_INDEXED_CLASSES:
        Image.fromarray(ids.astype(np.uint16)).save(path, format="PNG")
        return
    indexed = Image.fromarray(ids.astype(np.uint8))  # mode L; putpalette turns it into P with the same values
    indexed.putpalette(class_colours(num_classes).reshape(-1).tolist())
    indexed.save(path, format="PNG")


def image_to_uint8(image: torch.Tensor) -> np.ndarray:
    """[C, H, W] float in [0, 1] -> [H, W] (C=1) or [H, W, 3] uint8."""
    array = (image.clamp(0, 1) * 255.0).round().to(torch.uint8).permute(1, 2, 0).numpy()
    return array[..., 0] if array.shape[2] == 1 else array
