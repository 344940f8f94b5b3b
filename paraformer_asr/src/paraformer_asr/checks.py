"""Cheap runtime checks used at module boundaries.

* :func:`assert_shape` checks a tensor against a symbolic pattern such as ``"B,T,D"``; symbols
  are bound on first use in a shared ``dims`` dict so consistency across tensors is checked too.
* :func:`check_padding_mask` checks dtype (bool), shape and polarity (True = valid frame, valid
  frames form a non-empty prefix of every row).
* :func:`check_finite` raises when a tensor holds NaN or Inf.

All raise ``ValueError`` (programming errors), never :class:`paraformer_asr.errors.UserError`.
"""

from __future__ import annotations

import torch

Dims = dict[str, int]


def assert_shape(tensor: torch.Tensor, pattern: str, name: str = "tensor", dims: Dims | None = None) -> Dims:
    """Check ``tensor.shape`` against ``pattern`` and return the (updated) symbol bindings.

    ``pattern`` is a comma-separated list whose entries are integers (fixed size), ``*`` (any
    size) or symbols (bound to the size seen first, then required to match). Passing the same
    ``dims`` dict to several calls checks that e.g. ``B`` agrees between tensors.
    """
    bound: Dims = {} if dims is None else dims
    expected = [p.strip() for p in pattern.split(",") if p.strip()]
    if tensor.dim() != len(expected):
        raise ValueError(f"{name}: expected {len(expected)} dims [{pattern}], got shape {tuple(tensor.shape)}")
    for axis, (symbol, size) in enumerate(zip(expected, tensor.shape)):
        if symbol == "*":
            continue
        if symbol.lstrip("-").isdigit():
            if size != int(symbol):
                raise ValueError(f"{name}: dim {axis} must be {symbol} in [{pattern}], got shape {tuple(tensor.shape)}")
            continue
        if symbol in bound and bound[symbol] != size:
            raise ValueError(
                f"{name}: dim {axis} ('{symbol}') is {size} but '{symbol}' was bound to {bound[symbol]} "
                f"(pattern [{pattern}], shape {tuple(tensor.shape)})"
            )
        bound[symbol] = size
    return bound


def check_padding_mask(mask: torch.Tensor, name: str = "mask", shape: tuple[int, int] | None = None,
                       allow_empty_rows: bool = False) -> None:
    """Check a padding mask: bool dtype, [B, T], True on valid positions, valid positions a prefix.

    An inverted mask (True on padding) shows up as a row that is False then True, which is
    rejected, as is a row with no valid position unless ``allow_empty_rows``.
    """
    if mask.dtype != torch.bool:
        raise ValueError(f"{name}: padding mask must be torch.bool (True = valid), got {mask.dtype}")
    if mask.dim() != 2:
        raise ValueError(f"{name}: padding mask must be [B, T], got shape {tuple(mask.shape)}")
    if shape is not None and tuple(mask.shape) != tuple(shape):
        raise ValueError(f"{name}: padding mask shape {tuple(mask.shape)} does not match data {tuple(shape)}")
    if mask.shape[1] > 1 and bool((mask[:, 1:] & ~mask[:, :-1]).any()):
        raise ValueError(f"{name}: padding mask is not a prefix mask (True must mark valid positions at the start; "
                         "is the polarity inverted?)")
    if not allow_empty_rows and mask.shape[1] > 0 and not bool(mask[:, 0].all()):
        raise ValueError(f"{name}: a row of the padding mask has no valid position")


def check_finite(tensor: torch.Tensor, name: str = "tensor") -> None:
    """Raise ``ValueError`` if ``tensor`` holds NaN or Inf (reports how many and where the first is)."""
    if tensor.is_floating_point() and not bool(torch.isfinite(tensor).all()):
        bad = ~torch.isfinite(tensor)
        first = tuple(int(i) for i in bad.nonzero()[0])
        raise ValueError(f"{name}: {int(bad.sum())} non-finite values (NaN/Inf), first at index {first}")


def lengths_to_mask(lengths: torch.Tensor, max_len: int | None = None) -> torch.Tensor:
    """lengths [B] (long) -> padding mask [B, max_len] (bool, True = valid)."""
    max_len = int(lengths.max()) if max_len is None and lengths.numel() > 0 else (max_len or 0)
    positions = torch.arange(max_len, device=lengths.device)
    return positions.unsqueeze(0) < lengths.unsqueeze(1)
