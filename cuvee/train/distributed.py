"""Multi-GPU plumbing for ``torchrun``: process group setup and FSDP2 sharding (``fully_shard``).

Single process (no ``WORLD_SIZE``) is the default and needs none of this.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

import torch


@dataclass
class DistInfo:
    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    device: torch.device = field(default_factory=lambda: torch.device("cpu"))

    @property
    def is_main(self) -> bool:
        return self.rank == 0


def setup() -> DistInfo:
    """Join the torchrun process group if there is one; pick this process's device."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world > 1:
        import torch.distributed as dist

        local = int(os.environ.get("LOCAL_RANK", "0"))
        if torch.cuda.is_available():
            torch.cuda.set_device(local)
            dist.init_process_group("nccl", device_id=torch.device("cuda", local))
            device = torch.device("cuda", local)
        else:
            dist.init_process_group("gloo")
            device = torch.device("cpu")
        return DistInfo(dist.get_rank(), dist.get_world_size(), local, device)
    return DistInfo(device=torch.device("cuda") if torch.cuda.is_available() else torch.device("cpu"))


def shard_model(model: torch.nn.Module, bf16_params: bool) -> torch.nn.Module:
    """FSDP2: shard each transformer block, then the root (embeddings, final norm, head)."""
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    mp = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32) if bf16_params else None
    kwargs = {"mp_policy": mp} if mp else {}
    for layer in model.layers:
        fully_shard(layer, **kwargs)
    fully_shard(model, **kwargs)
    return model


def all_reduce_sum(x: torch.Tensor, info: DistInfo) -> torch.Tensor:
    if info.world_size > 1:
        import torch.distributed as dist

        dist.all_reduce(x, op=dist.ReduceOp.SUM)
    return x


def all_gather_objects(obj, info: DistInfo) -> list:
    if info.world_size == 1:
        return [obj]
    import torch.distributed as dist

    out = [None] * info.world_size
    dist.all_gather_object(out, obj)
    return out


def full_state_dict(model: torch.nn.Module, info: DistInfo) -> dict:
    """Unsharded CPU state dict (FSDP2 DTensors gathered); identical to ``model.state_dict()`` when unsharded."""
    if info.world_size == 1:
        return {k: v.detach().cpu().clone() for k, v in model.state_dict().items()}
    from torch.distributed.checkpoint.state_dict import (
        StateDictOptions,
        get_model_state_dict,
    )

    return get_model_state_dict(model, options=StateDictOptions(full_state_dict=True, cpu_offload=True))


def broadcast_from_main(obj, info: DistInfo):
    """Rank 0's ``obj`` on every rank (e.g. the outcome of checks only rank 0 may do, such as taking a lock)."""
    if info.world_size == 1:
        return obj
    import torch.distributed as dist

    box = [obj if info.is_main else None]
    dist.broadcast_object_list(box, src=0)
    return box[0]


def teardown(info: DistInfo, clean: bool = True) -> None:
    """Leave the process group on every rank before returning.

    ``clean``: all ranks got here together, so first wait at a barrier: no rank may exit (and take its
    gloo/NCCL threads down) while another is still in a collective or writing the checkpoint; a rank that
    exited early is what aborted with "terminate called without an active exception". After an error the
    others may never reach a barrier, so the group is just destroyed.
    """
    if info.world_size == 1:
        return
    import torch.distributed as dist

    if not dist.is_initialized():
        return
    try:
        if clean:
            dist.barrier()
    finally:
        dist.destroy_process_group()
