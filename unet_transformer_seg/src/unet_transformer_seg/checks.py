"""Cheap runtime checks used at module boundaries, plus two debugging aids.

`assert_shape(t, "B,C,H,W", name="x")` checks the rank and every named dimension; symbolic names are bound the first
time they are seen and must agree afterwards (pass the returned dict as `dims` to carry bindings across tensors).
Integers in the spec must match exactly.
"""

from __future__ import annotations

from typing import Dict, Iterator, List, Optional, Tuple

import torch
from torch import nn

from .errors import NonFiniteError, ShapeError


def assert_shape(
    tensor: torch.Tensor, spec: str, name: str = "tensor", dims: Optional[Dict[str, int]] = None
) -> Dict[str, int]:
    """Check `tensor.shape` against a comma-separated spec such as "B,3,H,W"; return the symbol bindings."""
    names = [part.strip() for part in spec.split(",")]
    bound = {} if dims is None else dims
    if tensor.dim() != len(names):
        raise ShapeError(f"{name}: expected {len(names)} dims [{spec}], got shape {list(tensor.shape)}")
    for axis, (symbol, size) in enumerate(zip(names, tensor.shape)):
        if symbol.lstrip("-").isdigit():
            if int(symbol) != size:
                raise ShapeError(f"{name}: dim {axis} must be {symbol} [{spec}], got shape {list(tensor.shape)}")
        elif symbol in bound and bound[symbol] != size:
            raise ShapeError(
                f"{name}: dim {axis} ({symbol}) must be {bound[symbol]} [{spec}], got shape {list(tensor.shape)}"
            )
        else:
            bound[symbol] = int(size)
    return bound


def check_finite(tensor: torch.Tensor, name: str = "tensor") -> None:
    """Raise NonFiniteError naming the tensor if it holds NaN or Inf (one reduction, no host sync beyond the flag)."""
    if tensor.is_floating_point() and not bool(torch.isfinite(tensor).all()):
        num_nan = int(torch.isnan(tensor).sum())
        num_inf = int(torch.isinf(tensor).sum())
        raise NonFiniteError(f"{name} holds {num_nan} NaN and {num_inf} Inf values (shape {list(tensor.shape)})")


def _first_tensor(output) -> Optional[torch.Tensor]:
    if isinstance(output, torch.Tensor):
        return output
    if isinstance(output, (tuple, list)) and output and isinstance(output[0], torch.Tensor):
        return output[0]
    return None


def install_nonfinite_hooks(model: nn.Module) -> List[torch.utils.hooks.RemovableHandle]:
    """Make every submodule check its output; the first NaN/Inf raises an error naming that submodule.

    Remove the hooks with `for h in handles: h.remove()`.
    """
    handles = []
    for module_name, module in model.named_modules():
        label = module_name or type(model).__name__

        def hook(_module, _inputs, output, label=label):
            tensor = _first_tensor(output)
            if tensor is not None:
                check_finite(tensor, f"output of module '{label}'")

        handles.append(module.register_forward_hook(hook))
    return handles


def gradient_norms(model: nn.Module) -> Iterator[Tuple[str, Optional[float]]]:
    """Yield (parameter name, gradient L2 norm or None when the parameter got no gradient)."""
    for param_name, param in model.named_parameters():
        yield param_name, None if param.grad is None else float(param.grad.detach().norm())


def parameters_without_gradient(model: nn.Module) -> List[str]:
    """Names of trainable parameters whose gradient is missing or all zero after a backward pass."""
    return [
        param_name
        for param_name, param in model.named_parameters()
        if param.requires_grad and (param.grad is None or not bool(param.grad.abs().sum() > 0))
    ]
