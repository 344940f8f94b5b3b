"""Process-group helpers. Under `torchrun` (WORLD_SIZE > 1) training uses DistributedDataParallel with gloo on CPU
and nccl on CUDA; otherwise everything here is a no-op for a single process."""

from __future__ import annotations

import os
from dataclasses import dataclass

import torch
import torch.distributed as dist


@dataclass
class DistInfo:
    rank: int = 0
    world_size: int = 1
    local_rank: int = 0

    @property
    def enabled(self) -> bool:
        return self.world_size > 1

    @property
    def is_main(self) -> bool:
        return self.rank == 0


def init_distributed(device_type: str) -> DistInfo:
    world_size = int(os.environ.get("WORLD_SIZE", "1"))
    if world_size <= 1:
        return DistInfo()
    backend = "nccl" if device_type == "cuda" else "gloo"
    if not dist.is_initialized():
        dist.init_process_group(backend=backend)
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    if device_type == "cuda":
        torch.cuda.set_device(local_rank)
    return DistInfo(dist.get_rank(), dist.get_world_size(), local_rank)


def barrier(info: DistInfo) -> None:
    """Wait for every rank (no-op for one process)."""
    if info.enabled:
        dist.barrier()


def shutdown_distributed(info: DistInfo) -> None:
    if info.enabled and dist.is_initialized():
        dist.destroy_process_group()


def all_reduce_sum(tensor: torch.Tensor, info: DistInfo) -> torch.Tensor:
    """Sum over ranks (in place on a copy); identity for one process."""
    if not info.enabled:
        return tensor
    reduced = tensor.clone()
    dist.all_reduce(reduced, op=dist.ReduceOp.SUM)
    return reduced


def broadcast_object(value, info: DistInfo):
    if not info.enabled:
        return value
    holder = [value]
    dist.broadcast_object_list(holder, src=0)
    return holder[0]


def max_weight_difference_across_ranks(model: torch.nn.Module, info: DistInfo) -> float:
    """Largest |w_rank - w_rank0| over all parameters and ranks (0.0 for one process)."""
    if not info.enabled:
        return 0.0
    flat = torch.cat([p.detach().reshape(-1).float().cpu() for p in model.parameters()])
    reference = flat.clone()
    dist.broadcast(reference, src=0)
    difference = torch.tensor([float((flat - reference).abs().max())])
    dist.all_reduce(difference, op=dist.ReduceOp.MAX)
    return float(difference)
