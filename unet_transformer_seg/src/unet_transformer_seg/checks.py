"""Runtime checks used at module boundaries, plus debugging aids.

`assert_shape(t, "B,C,H,W", name="x")` checks the rank and every named dimension; symbolic names are bound the first
time they are seen and must agree afterwards (pass the returned dict as `dims` to carry bindings across tensors).
Integers in the spec must match exactly. A mismatch raises `ContractError` (a bug, with traceback) unless the caller
says the tensor came from a user (`error=ShapeError`, as the model's entry check does).

Finiteness checks need a host sync each, so they are off the hot path: `install_nonfinite_hooks` puts one on the
model's input and on every module's output when `run.debug_checks` is true; the training loop checks the loss once
per optimizer step, reusing the sync it makes anyway to read the loss.
"""

from __future__ import annotations

from typing import Dict, Iterator, List, Optional, Tuple, Type

import torch
from torch import nn

from .errors import ContractError, NonFiniteError


def assert_shape(
    tensor: torch.Tensor,
    spec: str,
    name: str = "tensor",
    dims: Optional[Dict[str, int]] = None,
    error: Type[Exception] = ContractError,
) -> Dict[str, int]:
    """Check `tensor.shape` against a comma-separated spec such as "B,3,H,W"; return the symbol bindings."""
    names = [part.strip() for part in spec.split(",")]
    bound = {} if dims is None else dims
    if tensor.dim() != len(names):
        raise error(f"{name}: expected {len(names)} dims [{spec}], got shape {list(tensor.shape)}")
    for axis, (symbol, size) in enumerate(zip(names, tensor.shape)):
        if symbol.lstrip("-").isdigit():
            if int(symbol) != size:
                raise error(f"{name}: dim {axis} must be {symbol} [{spec}], got shape {list(tensor.shape)}")
        elif symbol in bound and bound[symbol] != size:
            raise error(
                f"{name}: dim {axis} ({symbol}) must be {bound[symbol]} [{spec}], got shape {list(tensor.shape)}"
            )
        else:
            bound[symbol] = int(size)
    return bound


def check_finite(tensor: torch.Tensor, name: str = "tensor") -> None:
    """Raise NonFiniteError naming the tensor if it holds NaN or Inf (one reduction and one host sync)."""
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
    """Check the model's input and every submodule's output; the first NaN/Inf raises an error naming its place.

    Used when `run.debug_checks` is true. Remove the hooks with `for handle in handles: handle.remove()`.
    """

    def input_hook(_module, inputs):
        tensor = _first_tensor(inputs)
        if tensor is not None:
            check_finite(tensor, "model input")

    handles = [model.register_forward_pre_hook(input_hook)]
    for module_name, module in model.named_modules():
        label = module_name or type(model).__name__

        def output_hook(_module, _inputs, output, label=label):
            tensor = _first_tensor(output)
            if tensor is not None:
                check_finite(tensor, f"output of module '{label}'")

        handles.append(module.register_forward_hook(output_hook))
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
