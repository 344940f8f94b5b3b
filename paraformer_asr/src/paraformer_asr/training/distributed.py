"""Multi-process training with torchrun: process group set-up and the few collectives the loop needs.

``torchrun --nproc_per_node=N scripts/train.py --config ...`` sets WORLD_SIZE / RANK / LOCAL_RANK;
the backend is nccl when the run uses CUDA and gloo otherwise. Without those variables (or with
WORLD_SIZE 1) everything here is a no-op and training is single-process.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist

from paraformer_asr.errors import ConfigError


@dataclass
class DistContext:
    rank: int = 0
    world_size: int = 1
    local_rank: int = 0

    @property
    def enabled(self) -> bool:
        return self.world_size > 1

    @property
    def is_main(self) -> bool:
        return self.rank == 0


def check_gpu_for_rank(local_rank: int) -> None:
    """ConfigError when torchrun started more processes on this machine than it has GPUs (each process takes the GPU
    of its LOCAL_RANK), instead of CUDA's 'invalid device ordinal' from inside set_device."""
    gpus = torch.cuda.device_count()
    if local_rank >= gpus:
        raise ConfigError(f"torchrun started local rank {local_rank} on a machine with {gpus} CUDA device(s) for "
                          f"run.device 'cuda' (or 'auto'): start at most {gpus} process(es) per node "
                          "(--nproc_per_node), or train on the CPU with --set run.device=cpu")


def init_distributed(use_cuda: bool) -> DistContext:
    """Join the torchrun process group if there is one (idempotent)."""
    world_size = int(os.environ.get("WORLD_SIZE", "1"))
    if world_size <= 1:
        return DistContext()
    ctx = DistContext(int(os.environ["RANK"]), world_size, int(os.environ.get("LOCAL_RANK", "0")))
    if not dist.is_initialized():
        if use_cuda:
            check_gpu_for_rank(ctx.local_rank)
            torch.cuda.set_device(ctx.local_rank)
        dist.init_process_group(backend="nccl" if use_cuda else "gloo")
    return ctx


def shutdown(ctx: DistContext) -> None:
    """Leave the process group (no barrier: a rank that failed must not hang the others' exit)."""
    if ctx.enabled and dist.is_initialized():
        dist.destroy_process_group()


def broadcast_object(value: Any, ctx: DistContext) -> Any:
    """Rank 0's ``value`` on every rank."""
    if not ctx.enabled:
        return value
    holder = [value]
    dist.broadcast_object_list(holder, src=0)
    return holder[0]


def all_reduce_sum(values: list[float], ctx: DistContext, device: torch.device) -> list[float]:
    """Element-wise sum of a list of floats over all ranks (float64)."""
    if not ctx.enabled:
        return list(values)
    tensor = torch.tensor(values, dtype=torch.float64, device=device)
    dist.all_reduce(tensor)
    return tensor.tolist()


def barrier(ctx: DistContext) -> None:
    if ctx.enabled:
        dist.barrier()
