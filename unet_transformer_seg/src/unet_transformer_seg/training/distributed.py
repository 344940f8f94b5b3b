"""Process-group helpers. Under `torchrun` (RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT set, even with one process)
training uses DistributedDataParallel; otherwise everything here is a no-op for a single process.

On CUDA the group is created with the backend string "cpu:gloo,cuda:nccl": collectives on CUDA tensors (the per-step
loss, DDP's gradients, SyncBatchNorm) go through nccl, those on CPU tensors (the validation counters, the weight
check) through gloo, so every collective runs on a device its backend serves. On CPU the group is gloo only.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import List

import numpy as np
import torch
import torch.distributed as dist

from unet_transformer_seg.errors import ConfigError

TORCHRUN_VARIABLES = ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")


@dataclass
class DistInfo:
    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    enabled: bool = False  # a process group exists (launched by torchrun)

    @property
    def is_main(self) -> bool:
        return self.rank == 0


def backend_for(device_type: str) -> str:
    return "cpu:gloo,cuda:nccl" if device_type == "cuda" else "gloo"


def check_gpu_for_rank(local_rank: int) -> None:
    """ConfigError when torchrun started more processes on this machine than it has GPUs (each process takes the GPU
    of its LOCAL_RANK), instead of CUDA's 'invalid device ordinal' from inside set_device."""
    gpus = torch.cuda.device_count()
    if local_rank >= gpus:
        raise ConfigError(f"torchrun started local rank {local_rank} on a machine with {gpus} CUDA device(s) for "
                          f"run.device 'cuda': start at most {gpus} process(es) per node (--nproc_per_node), or "
                          "train on the CPU with --set run.device=cpu")


def init_distributed(device_type: str) -> DistInfo:
    """Join the process group when launched by torchrun; a plain `python scripts/train.py` gets DistInfo()."""
    if not all(name in os.environ for name in TORCHRUN_VARIABLES):
        return DistInfo()
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    if device_type == "cuda":
        check_gpu_for_rank(local_rank)
        torch.cuda.set_device(local_rank)
    if not dist.is_initialized():
        dist.init_process_group(backend=backend_for(device_type))
    return DistInfo(dist.get_rank(), dist.get_world_size(), local_rank, enabled=True)


def barrier(info: DistInfo) -> None:
    """Wait for every rank (no-op for one process)."""
    if info.enabled:
        dist.barrier()


def shutdown_distributed(info: DistInfo) -> None:
    if info.enabled and dist.is_initialized():
        dist.destroy_process_group()


def all_reduce_sum(tensor: torch.Tensor, info: DistInfo) -> torch.Tensor:
    """Sum over ranks (on a copy, on the tensor's own device); identity without a process group."""
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


def rank_seed(seed: int, rank: int) -> int:
    """The seed of one rank's own random draws: run.seed on rank 0 (so one process and rank 0 draw alike), a distinct
    stream from numpy's SeedSequence on every other rank."""
    return seed if rank == 0 else int(np.random.SeedSequence([seed, rank]).generate_state(1)[0])


def gather_objects(value, info: DistInfo) -> List:
    """[value of rank 0, value of rank 1, ...] on every rank; [value] for one process."""
    if not info.enabled:
        return [value]
    gathered = [None] * info.world_size
    dist.all_gather_object(gathered, value)
    return gathered


def average_float_buffers(model: torch.nn.Module, info: DistInfo) -> None:
    """Average every floating-point buffer (BatchNorm running mean and variance) over ranks, in place.

    DDP broadcasts rank 0's buffers at the start of each training forward, and each rank then updates them with its own
    batch, so after a step they differ across ranks; validation runs after this, so that every rank evaluates, and
    rank 0 saves, one and the same model."""
    if not info.enabled:
        return
    for buffer in model.buffers():
        if buffer.is_floating_point():
            dist.all_reduce(buffer, op=dist.ReduceOp.SUM)
            buffer.div_(info.world_size)
