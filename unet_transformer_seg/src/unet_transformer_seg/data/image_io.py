"""Image and mask files, and channel conversion.

Images come back as [C, H, W] float32 with every stored value kept (`read_image`):

| Stored samples | Values returned |
|---|---|
| unsigned 8-bit, 16-bit (PNG, JPEG, BMP, TIFF, `.npy`) | divided by 255 or 65535: [0, 1], every level distinct |
| 1-bit | 0 or 1 |
| float (16/32/64-bit) and signed or 32-bit integers (TIFF, `.npy`) | as stored (a float32 copy) |

A value float32 cannot hold (NaN, Inf, beyond the float32 range, an integer beyond 2**24) is a DataError naming the
file and the pixel, never a clip. Files: PNG (8/16-bit, gray, gray + alpha, RGB, RGBA, indexed; 16-bit colour PNGs
are decoded by `png16.py`, as Pillow keeps only their high byte), JPEG, BMP through Pillow; TIFF through tifffile
(gray, RGB, multi-page / multi-channel stacks, any sample type; palette, CMYK and YCbCr TIFFs through Pillow);
`.npy` arrays [H, W] or [H, W, C] (channels last, as image files). Pixels are used as stored (no EXIF rotation), so
an image and its mask stay aligned.

Masks come back as [H, W] int64 class ids, with IGNORE_LABEL (-1) where the file holds `data.ignore_index`.
Mask formats (`read_mask`):

| File | Mode (Pillow) | Class id of a pixel |
|---|---|---|
| 1-bit PNG / TIFF / BMP | `1` | 0 or 1 |
| 8-bit gray | `L` (`LA`: alpha dropped) | the gray value |
| 16-bit gray | `I;16` (`I`) | the gray value, 0..65535 kept exactly |
| 16-bit gray + alpha PNG | (read by `png16.py`) | the gray value, exactly; a 16-bit RGB / RGBA PNG mask is refused |
| indexed colour (VOC, Cityscapes style) | `P` (`PA`) | the palette index, not its colour |
| RGB / RGBA with `data.palette` | `RGB`, `RGBA` | k where palette[k] is the pixel's colour |
| gray stored as RGB / RGBA, no palette | `RGB`, `RGBA` with r = g = b | the gray value |

With `data.mask_values` (gray masks stored as other values than 0..N-1, e.g. binary masks saved as 0 / 255) the
class id is k where mask_values[k] is the stored value.
"""

from __future__ import annotations

import struct
import zlib
from pathlib import Path
from typing import Optional, Sequence

import numpy as np
import tifffile
import torch
from PIL import Image, UnidentifiedImageError

from ..errors import DataError
from ..labels import IGNORE_LABEL, class_colours
from .png16 import read_png16_colour, sixteen_bit_colour_type

IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".tif", ".tiff", ".bmp", ".npy")
MASK_SUFFIXES = (".png", ".tif", ".tiff", ".bmp")  # lossless only: JPEG would change class ids
TIFF_SUFFIXES = (".tif", ".tiff")
LUMA_WEIGHTS = (0.299, 0.587, 0.114)
VOC_VOID = 255
MAX_INDEXED_CLASSES = 256  # more classes than this are written as 16-bit gray ids
EXACT_FLOAT32_INTEGER = 2**24  # every integer up to this magnitude is exact in float32
UNIT_SCALE = {np.dtype(np.uint8): 255.0, np.dtype(np.uint16): 65535.0}
ALPHA_MODES = ("LA", "PA", "RGBA")
TIFFFILE_PHOTOMETRIC = ("MINISBLACK", "RGB")  # other TIFFs (palette, CMYK, YCbCr, min-is-white) go through Pillow
SPATIAL_AXES = ("Y", "X")


def open_image(path: str | Path) -> Image.Image:
    """Open an image file (first frame of a multi-frame file); a missing or unreadable file is a DataError."""
    path = Path(path)
    if not path.is_file():
        raise DataError(f"file not found: {path}")
    try:
        image = Image.open(path)
        image.load()
    except (UnidentifiedImageError, OSError, ValueError, SyntaxError, struct.error, zlib.error) as exc:
        raise DataError(f"cannot read image {path}: {exc}") from None
    if image.width == 0 or image.height == 0:
        raise DataError(f"image {path} is empty ({image.width}x{image.height})")
    return image


def _tiff_series(path: Path):
    """(shape, axes, photometric name, extra samples) of the first series of a TIFF, from its header."""
    try:
        with tifffile.TiffFile(path) as tiff:
            series = tiff.series[0]
            page = series.pages[0]
            return tuple(series.shape), series.axes, page.photometric.name, len(page.extrasamples or ())
    except Exception as exc:  # tifffile raises TiffFileError, ValueError, IndexError, ... on damaged files
        raise DataError(f"cannot read image {path}: {exc}") from None


def _reads_with_tifffile(path: Path) -> bool:
    return path.suffix.lower() in TIFF_SUFFIXES and _tiff_series(path)[2] in TIFFFILE_PHOTOMETRIC


def image_size(path: str | Path) -> tuple:
    """(height, width) from the file header, without decoding the pixels."""
    path = Path(path)
    if path.suffix.lower() == ".npy":
        return _npy_array(path, header_only=True).shape[:2]
    if _reads_with_tifffile(path):
        shape, axes, _, _ = _tiff_series(path)
        return tuple(shape[axes.index(axis)] for axis in SPATIAL_AXES)
    try:
        with Image.open(path) as image:
            return image.height, image.width
    except (UnidentifiedImageError, OSError, ValueError, SyntaxError) as exc:
        raise DataError(f"cannot read image {path}: {exc}") from None


def _npy_array(path: Path, header_only: bool = False) -> np.ndarray:
    """A `.npy` image [H, W] or [H, W, C] -> [H, W, C] (memory-mapped when only the shape is needed)."""
    try:
        array = np.load(path, mmap_mode="r" if header_only else None, allow_pickle=False)
    except (OSError, ValueError, EOFError) as exc:
        raise DataError(f"cannot read image {path}: {exc}") from None
    if array.ndim not in (2, 3) or 0 in array.shape:
        raise DataError(f"image {path} holds an array of shape {array.shape}; images are [H, W] or [H, W, C]")
    return array if array.ndim == 3 else array[..., None]


def _tiff_array(path: Path) -> tuple:
    """A gray / RGB TIFF or a stack with one channel-like axis -> ([H, W, C] as stored, has_alpha)."""
    shape, axes, _, extra_samples = _tiff_series(path)
    try:
        array = tifffile.imread(path, series=0)
    except Exception as exc:  # truncated strips, unsupported compression, ...
        raise DataError(f"cannot read image {path}: {exc}") from None
    kept = [index for index, size in enumerate(array.shape) if size > 1 or axes[index] in SPATIAL_AXES]
    array = array.reshape([array.shape[index] for index in kept])
    kept_axes = "".join(axes[index] for index in kept)
    channel_axes = [axis for axis in kept_axes if axis not in SPATIAL_AXES]
    if len(channel_axes) > 1:
        raise DataError(f"image {path} is a TIFF with axes {axes} and shape {shape}: one channel axis at most "
                        f"(besides Y and X) can be read as image channels")
    order = [kept_axes.index(axis) for axis in SPATIAL_AXES + tuple(channel_axes)]
    array = np.transpose(array, order)
    return (array if array.ndim == 3 else array[..., None]), extra_samples > 0


def _pillow_array(path: Path) -> tuple:
    """A file Pillow decodes -> ([H, W, C] as stored, has_alpha); 16-bit colour PNGs through `png16`."""
    colour_type = sixteen_bit_colour_type(path) if path.is_file() else None
    if colour_type is not None:
        return read_png16_colour(path), colour_type in (4, 6)
    image = open_image(path)
    if image.mode in ("P", "PA"):  # the colours of an indexed image
        image = image.convert("RGBA" if "transparency" in image.info or image.mode == "PA" else "RGB")
    elif image.mode == "1":
        image = image.convert("L")
    elif image.mode in ("CMYK", "YCbCr", "LAB", "HSV"):
        image = image.convert("RGB")
    array = np.asarray(image)
    if image.mode.startswith("I;16"):
        array = array.astype(np.uint16)  # I;16B and friends come as big-endian uint16
    return (array if array.ndim == 3 else array[..., None]), image.mode in ALPHA_MODES


def _first_pixel(where: np.ndarray) -> str:
    row, col = (int(v) for v in np.argwhere(where)[0][:2])
    return f"(row {row}, col {col})"


def to_float32(array: np.ndarray, path: Path) -> np.ndarray:
    """[H, W, C] samples as stored -> float32 as the module docstring says; an unrepresentable value is a DataError."""
    if array.dtype == np.bool_:
        return array.astype(np.float32)
    if array.dtype in UNIT_SCALE:
        return array.astype(np.float32) / UNIT_SCALE[array.dtype]
    if np.issubdtype(array.dtype, np.integer):
        too_large = np.abs(array.astype(np.int64)) > EXACT_FLOAT32_INTEGER if array.size else np.zeros(0, bool)
        if too_large.any():
            raise DataError(f"image {path} holds the integer {int(array[tuple(np.argwhere(too_large)[0])])} at "
                            f"{_first_pixel(too_large)}, beyond 2**24: float32 cannot hold it exactly; rescale the "
                            f"image or store it as float")
        return array.astype(np.float32)
    if np.issubdtype(array.dtype, np.floating):
        bad = ~np.isfinite(array) | (np.abs(array) > np.finfo(np.float32).max)
        if bad.any():
            value = array[tuple(np.argwhere(bad)[0])]
            raise DataError(f"image {path} holds {value} at {_first_pixel(bad)}; images must hold finite values "
                            f"within the float32 range")
        return array.astype(np.float32)
    raise DataError(f"image {path} holds samples of type {array.dtype}; images are integers, floats or booleans")


def convert_channels(image: torch.Tensor, channels: int, has_alpha: bool = False, path: str | Path = "") -> torch.Tensor:
    """[C_in, H, W] -> [channels, H, W]: as it is when C_in == channels; else the alpha channel (last, when
    `has_alpha`) dropped, then gray copied to every channel or RGB to gray by luma. Anything else is a DataError."""
    if has_alpha and image.shape[0] != channels:
        image = image[:-1]
    if image.shape[0] == channels:
        return image
    if image.shape[0] == 1:
        return image.expand(channels, -1, -1).clone()
    if image.shape[0] == 3 and channels == 1:
        weights = torch.tensor(LUMA_WEIGHTS, dtype=image.dtype).view(3, 1, 1)
        return (image * weights).sum(dim=0, keepdim=True)
    raise DataError(f"image {path} has {image.shape[0]} channels{' (alpha dropped)' if has_alpha else ''}, but "
                    f"data.in_channels = {channels}: only gray -> N channels, RGB -> gray and dropping alpha are "
                    f"converted")


def read_stored_image(path: str | Path) -> tuple:
    """Image file -> ([H, W, C] samples as stored, in their own dtype; has_alpha)."""
    path = Path(path)
    if not path.is_file():
        raise DataError(f"file not found: {path}")
    if path.suffix.lower() == ".npy":
        return _npy_array(path), False
    if _reads_with_tifffile(path):
        return _tiff_array(path)
    return _pillow_array(path)


def read_image(path: str | Path, channels: int) -> torch.Tensor:
    """Image file (see the module docstring) -> [channels, H, W] float32 with its values kept."""
    path = Path(path)
    array, has_alpha = read_stored_image(path)
    image = torch.from_numpy(np.ascontiguousarray(to_float32(array, path))).permute(2, 0, 1)  # [C_in, H, W]
    return convert_channels(image, channels, has_alpha, path)


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


def sixteen_bit_mask(path: Path) -> Optional[np.ndarray]:
    """The ids [H, W] of a 16-bit gray + alpha PNG mask (Pillow would keep their high byte only); None for any other
    file. A 16-bit RGB / RGBA PNG mask is a DataError: colour masks are 8-bit colours with data.palette."""
    colour_type = sixteen_bit_colour_type(path) if path.is_file() else None
    if colour_type is None:
        return None
    if colour_type != 4:
        raise DataError(f"mask {path} is a 16-bit colour PNG; masks are 8/16-bit gray, indexed colour, or 8-bit RGB "
                        f"with data.palette")
    return read_png16_colour(path)[..., 0].astype(np.int64)


def mask_ids(path: str | Path, palette: Optional[Sequence[Sequence[int]]] = None) -> np.ndarray:
    """The ids a mask file holds, [H, W] int64, unchecked (`read_mask` checks them against the classes)."""
    path = Path(path)
    ids = sixteen_bit_mask(path)  # [H, W] or None
    return _mask_ids(open_image(path), path, palette) if ids is None else ids


def _ids_from_values(stored: np.ndarray, values: Sequence[int], ignore_index: Optional[int],
                     path: Path) -> np.ndarray:
    """[H, W] stored values -> class ids k where values[k] is the value; `ignore_index` kept as it is, any other
    value a DataError naming the file, the value and its first pixel."""
    order = np.argsort(values)
    sorted_values = np.asarray(values, dtype=np.int64)[order]  # [K]
    position = np.clip(np.searchsorted(sorted_values, stored), 0, len(values) - 1)  # [H, W]
    known = sorted_values[position] == stored
    ignored = stored == ignore_index if ignore_index is not None else np.zeros(stored.shape, dtype=bool)
    if not (known | ignored).all():
        row, col = (int(v) for v in np.argwhere(~(known | ignored))[0])
        raise DataError(f"mask {path} holds the value {int(stored[row, col])} at (row {row}, col {col}), which is "
                        f"not in data.mask_values {list(values)}")
    return np.where(ignored, stored, order[position])


def read_mask(
    path: str | Path,
    num_classes: int,
    palette: Optional[Sequence[Sequence[int]]] = None,
    ignore_index: Optional[int] = None,
    mask_values: Optional[Sequence[int]] = None,
) -> torch.Tensor:
    """Mask file -> [H, W] int64 class ids in 0..num_classes-1, IGNORE_LABEL where the file holds `ignore_index`;
    with `mask_values` the stored value mask_values[k] is class k.

    Any other value outside 0..num_classes-1 is a DataError naming the file, the value and its first pixel.
    """
    path = Path(path)
    ids = mask_ids(path, palette)  # [H, W]
    if mask_values is not None:
        ids = _ids_from_values(ids, mask_values, ignore_index, path)
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


def display_image(image: torch.Tensor) -> torch.Tensor:
    """[C, H, W] with any values -> [3, H, W] in [0, 1] for showing: the first three channels (fewer than three: the
    first, as gray); values outside [0, 1] (raw intensities) stretched from their minimum to their maximum."""
    shown = image[:3] if image.shape[0] >= 3 else image[:1].expand(3, -1, -1)
    low, high = float(shown.min()), float(shown.max())
    if low < 0.0 or high > 1.0:
        shown = (shown - low) / max(high - low, 1e-12)
    return shown
