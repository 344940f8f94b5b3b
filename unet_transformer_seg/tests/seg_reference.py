"""Plain-loop reference implementations that the vectorised code is checked against."""

import math

import torch


def attention_reference(mha, query, key, value, mask=None):
    """Loop over batch items, heads and queries; mask [B, T, S] bool (True = attend) or None."""
    batch, length, dim = query.shape
    q, k, v = mha.q_proj(query), mha.k_proj(key), mha.v_proj(value)
    out = torch.zeros(batch, length, dim)
    d = mha.head_dim
    for b in range(batch):
        for h in range(mha.num_heads):
            cols = slice(h * d, (h + 1) * d)
            for t in range(length):
                scores = torch.stack([q[b, t, cols] @ k[b, s, cols] / math.sqrt(d) for s in range(key.shape[1])])
                if mask is not None:
                    scores = scores.masked_fill(~mask[b, t], float("-inf"))
                weights = torch.softmax(scores, dim=0)
                out[b, t, cols] = (weights[:, None] * v[b, :, cols]).sum(0)
    return mha.out_proj(out)


def confusion_reference(pred, target, num_classes):
    """Counts pixel by pixel."""
    matrix = torch.zeros(num_classes, num_classes, dtype=torch.int64)
    for p, t in zip(pred.flatten().tolist(), target.flatten().tolist()):
        matrix[t, p] += 1
    return matrix


def per_image_confusion_reference(pred, target, num_classes, ignore=-1):
    """One matrix per image, pixel by pixel, skipping ignored targets."""
    matrices = torch.zeros(pred.shape[0], num_classes, num_classes, dtype=torch.int64)
    for image in range(pred.shape[0]):
        for p, t in zip(pred[image].flatten().tolist(), target[image].flatten().tolist()):
            if t != ignore:
                matrices[image, t, p] += 1
    return matrices


def boundary_reference(region):
    """Pixels of a region (nested lists of bools, [H][W]) with a 4-neighbour outside it or beyond the border."""
    height, width = len(region), len(region[0])
    edges = [[False] * width for _ in range(height)]
    for y in range(height):
        for x in range(width):
            if not region[y][x]:
                continue
            for dy, dx in ((1, 0), (-1, 0), (0, 1), (0, -1)):
                ny, nx = y + dy, x + dx
                if not (0 <= ny < height and 0 <= nx < width) or not region[ny][nx]:
                    edges[y][x] = True
    return [(y, x) for y in range(height) for x in range(width) if edges[y][x]]


def percentile_reference(values, q):
    """Linear-interpolation percentile of a list, written out."""
    ordered = sorted(values)
    position = (len(ordered) - 1) * q
    low, high = math.floor(position), math.ceil(position)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def hd95_reference(pred, target, class_id, ignore=-1):
    """HD95 of one class in one image ([H, W] tensors): every boundary pair measured, no tricks."""
    valid = (target != ignore).tolist()
    pred_points = boundary_reference([[p == class_id and v for p, v in zip(prow, vrow)]
                                      for prow, vrow in zip(pred.tolist(), valid)])
    true_points = boundary_reference([[t == class_id for t in trow] for trow in target.tolist()])
    if not pred_points and not true_points:
        return float("nan")
    if not pred_points or not true_points:
        return math.hypot(*target.shape)
    forward = [min(math.dist(a, b) for b in true_points) for a in pred_points]
    backward = [min(math.dist(a, b) for b in pred_points) for a in true_points]
    return max(percentile_reference(forward, 0.95), percentile_reference(backward, 0.95))


def windows_reference(image, tops, lefts, window):
    """Window i of a [C, H, W] image, image[:, tops[i]:+window, lefts[i]:+window], by slicing one at a time."""
    return torch.stack([image[:, top : top + window, left : left + window] for top, left in zip(tops, lefts)])


def blend_reference(window_logits, tops, lefts, weights, height, width):
    """Weighted mean of overlapping window logits [n, K, S, S], accumulated window by window."""
    window = window_logits.shape[-1]
    total = torch.zeros(window_logits.shape[1], height, width)
    weight_sum = torch.zeros(height, width)
    for logits, top, left in zip(window_logits, tops, lefts):
        total[:, top : top + window, left : left + window] += logits * weights
        weight_sum[top : top + window, left : left + window] += weights
    return total / weight_sum


def png_filter_reference(raw: bytes, previous: bytes, kind: int, bytes_per_pixel: int) -> bytes:
    """One PNG row filtered with filter `kind` (0 none, 1 sub, 2 up, 3 average, 4 Paeth), byte by byte, as the PNG
    specification writes it (the encoder side of the decoder in data/png16.py)."""
    out = bytearray()
    for i, value in enumerate(raw):
        left = raw[i - bytes_per_pixel] if i >= bytes_per_pixel else 0
        up = previous[i]
        corner = previous[i - bytes_per_pixel] if i >= bytes_per_pixel else 0
        if kind == 4:
            estimate = left + up - corner
            distances = (abs(estimate - left), abs(estimate - up), abs(estimate - corner))
            predictor = (left, up, corner)[distances.index(min(distances))]
        else:
            predictor = (0, left, up, (left + up) // 2)[kind]
        out.append((value - predictor) % 256)
    return bytes(out)


def write_png16_reference(path, pixels, colour_type: int) -> None:
    """pixels [H, W, S] uint16 -> a 16-bit PNG (colour type 2 RGB, 4 gray + alpha, 6 RGBA) whose row r uses filter
    r % 5, so every filter is exercised."""
    import struct
    import zlib

    import numpy as np

    height, width, samples = pixels.shape
    rows = pixels.astype(">u2").reshape(height, width * samples).view(np.uint8)  # [H, W * S * 2] big-endian
    previous, body = bytes(rows.shape[1]), bytearray()
    for index in range(height):
        raw = rows[index].tobytes()
        body += bytes([index % 5]) + png_filter_reference(raw, previous, index % 5, samples * 2)
        previous = raw

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    header = struct.pack(">IIBBBBB", width, height, 16, colour_type, 0, 0, 0)
    path.write_bytes(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(bytes(body)))
                     + chunk(b"IEND", b""))
