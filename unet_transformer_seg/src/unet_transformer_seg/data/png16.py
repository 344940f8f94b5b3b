"""16-bit colour PNGs (RGB, RGBA, gray + alpha at 16 bits per sample), which Pillow decodes to 8 bits per sample
(dropping the low byte). This module reads their pixels exactly: chunks, zlib, then the PNG row filters undone.

The filters make pixel (r, c) depend on its left (r, c-1), upper (r-1, c) and upper-left (r-1, c-1) neighbours, so
the pixels of one anti-diagonal r + c = d depend only on earlier diagonals: `unfilter` reconstructs one whole
anti-diagonal per step (H + W - 1 vectorised steps instead of a loop over pixels).
"""

from __future__ import annotations

import struct
import zlib
from pathlib import Path
from typing import Optional

import numpy as np

from ..errors import DataError

SIGNATURE = b"\x89PNG\r\n\x1a\n"
COLOUR_SAMPLES = {2: 3, 4: 2, 6: 4}  # PNG colour type -> samples per pixel: RGB, gray + alpha, RGBA


def sixteen_bit_colour_type(path: Path) -> Optional[int]:
    """The PNG colour type (2, 4 or 6) when `path` is a 16-bit colour or gray + alpha PNG, else None."""
    with open(path, "rb") as handle:
        header = handle.read(29)
    if len(header) < 29 or header[:8] != SIGNATURE or header[12:16] != b"IHDR":
        return None
    bit_depth, colour_type = header[24], header[25]
    return colour_type if bit_depth == 16 and colour_type in COLOUR_SAMPLES else None


def unfilter(filtered: np.ndarray, filters: np.ndarray) -> np.ndarray:
    """Undo the PNG row filters: filtered [H, W, B] uint8 (B bytes per pixel), filters [H] in 0..4 -> raw [H, W, B].

    0 none, 1 sub (+ left), 2 up (+ upper), 3 average (+ floor((left + upper) / 2)), 4 Paeth; all modulo 256, with 0
    outside the image."""
    height, width, depth = filtered.shape
    raw = np.zeros((height + 1, width + 1, depth), dtype=np.int32)  # row 0 and column 0: the zeros outside
    values = filtered.astype(np.int32)
    for diagonal in range(height + width - 1):
        rows = np.arange(max(0, diagonal - width + 1), min(height, diagonal + 1))  # [n]
        cols = diagonal - rows  # [n]
        left, up, corner = raw[rows + 1, cols], raw[rows, cols + 1], raw[rows, cols]  # [n, B] each
        estimate = left + up - corner
        far_left, far_up, far_corner = abs(estimate - left), abs(estimate - up), abs(estimate - corner)
        paeth = np.where((far_left <= far_up) & (far_left <= far_corner), left,
                         np.where(far_up <= far_corner, up, corner))
        kind = filters[rows][:, None]  # [n, 1]
        predictor = np.select([kind == 1, kind == 2, kind == 3, kind == 4], [left, up, (left + up) // 2, paeth], 0)
        raw[rows + 1, cols + 1] = (values[rows, cols] + predictor) & 0xFF
    return raw[1:, 1:].astype(np.uint8)


def _chunks(data: bytes, path: Path):
    """(type, body) of every chunk after the signature; a chunk running past the end of the file is a DataError."""
    position = len(SIGNATURE)
    while position < len(data):
        if position + 8 > len(data):
            raise DataError(f"cannot read image {path}: truncated PNG chunk header")
        length, kind = struct.unpack(">I4s", data[position : position + 8])
        body = data[position + 8 : position + 8 + length]
        if len(body) != length:
            raise DataError(f"cannot read image {path}: truncated PNG (chunk {kind!r} cut short)")
        yield kind, body
        position += 12 + length


def read_png16_colour(path: Path) -> np.ndarray:
    """A 16-bit RGB / RGBA / gray + alpha PNG -> [H, W, S] uint16 with every sample exact."""
    data = path.read_bytes()
    header, compressed = None, []
    for kind, body in _chunks(data, path):
        if kind == b"IHDR":
            header = struct.unpack(">IIBBBBB", body[:13])
        elif kind == b"IDAT":
            compressed.append(body)
    if header is None:
        raise DataError(f"cannot read image {path}: PNG without an IHDR chunk")
    width, height, _, colour_type, _, _, interlace = header
    if interlace:
        raise DataError(f"image {path} is an interlaced 16-bit colour PNG; save it without interlacing or as TIFF")
    samples = COLOUR_SAMPLES[colour_type]
    stride = width * samples * 2
    try:
        raw = zlib.decompress(b"".join(compressed))
    except zlib.error as exc:
        raise DataError(f"cannot read image {path}: damaged or truncated PNG data ({exc})") from None
    if len(raw) != height * (stride + 1):
        raise DataError(f"cannot read image {path}: truncated PNG ({len(raw)} bytes of pixel data, "
                        f"{height * (stride + 1)} expected)")
    rows = np.frombuffer(raw, dtype=np.uint8).reshape(height, stride + 1)  # [H, 1 + W * S * 2]
    filters = rows[:, 0]
    if filters.max(initial=0) > 4:
        raise DataError(f"cannot read image {path}: PNG row filter {int(filters.max())} does not exist")
    pixels = unfilter(rows[:, 1:].reshape(height, width, samples * 2), filters)  # [H, W, S * 2] big-endian bytes
    return pixels.view(">u2").astype(np.uint16)  # [H, W, S]
