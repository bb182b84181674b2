"""Data-parallel training over several processes, as torchrun starts them.

    torchrun --nproc_per_node N -m lookback train CONFIG

torchrun starts N copies of the command and tells each, in environment
variables, its RANK (0 .. WORLD_SIZE-1, over all machines), the WORLD_SIZE
and its LOCAL_RANK on this machine. Every rank holds a whole model; each
trains on its own share of the batches, and DistributedDataParallel (DDP)
averages the gradients over the ranks in backward, so that every rank takes
the same optimiser step. Processes talk through gloo on CPUs and NCCL on
GPUs (rank r uses cuda:LOCAL_RANK).

Without torchrun (no WORLD_SIZE, or 1) there is no process group: every
helper here returns its input and training runs exactly as in one process.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from contextlib import nullcontext
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist
from torch import Tensor, nn
from torch.nn.parallel import DistributedDataParallel


def rank() -> int:
    """This process's rank over all machines; 0 without torchrun."""
    return dist.get_rank() if dist.is_initialized() else int(os.environ.get("RANK", "0"))


def world_size() -> int:
    """How many processes train together; 1 without torchrun."""
    return dist.get_world_size() if dist.is_initialized() else int(os.environ.get("WORLD_SIZE", "1"))


def is_main() -> bool:
    """Rank 0 validates and writes the run directory; the others only train."""
    return rank() == 0


def init(device: torch.device) -> torch.device:
    """Join the process group that torchrun describes; returns the device this rank trains on.

    gloo for CPUs; NCCL for GPUs, with rank r on cuda:LOCAL_RANK. Without
    torchrun nothing happens and `device` comes back unchanged.
    """
    if world_size() == 1:
        return device
    if device.type == "cuda":
        device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")))
        torch.cuda.set_device(device)  # NCCL's collectives and barriers run on the current device
    if not dist.is_initialized():
        if device.type == "cuda":
            dist.init_process_group("nccl", device_id=device)
        else:
            dist.init_process_group("gloo")
    return device


def cleanup() -> None:
    if dist.is_initialized():
        dist.destroy_process_group()


class LossModule(nn.Module):
    """`model.loss` as `forward`: DDP hooks into `forward` to synchronise gradients in backward."""

    def __init__(self, model: nn.Module):
        super().__init__()
        self.model = model

    def forward(self, src: Tensor, src_len: Tensor, tgt_in: Tensor, tgt_out: Tensor, terms) -> Tensor:
        return self.model.loss(src, src_len, tgt_in, tgt_out, terms)


def wrap(model: nn.Module, device: torch.device) -> nn.Module:
    """The training loss as a module; in DDP (which also copies rank 0's weights) under torchrun."""
    module = LossModule(model)
    if not dist.is_initialized():
        return module
    return DistributedDataParallel(module, device_ids=[device.index] if device.type == "cuda" else None)


def no_sync(module: nn.Module, sync: bool):
    """Skip DDP's gradient averaging for all but the last batch of an accumulated update."""
    module = getattr(module, "_orig_mod", module)  # under torch.compile (train.compile)
    return module.no_sync() if isinstance(module, DistributedDataParallel) and not sync else nullcontext()


@dataclass(frozen=True)
class Ranks:
    """The processes that train together, as one value: which one this is, and how they agree.

    Without a process group every method returns at once what one process alone decides.
    """

    rank: int = 0
    world: int = 1

    @classmethod
    def join(cls, device: torch.device) -> tuple[Ranks, torch.device]:
        """Join torchrun's process group (if any); this process's ranks and the device it trains on."""
        device = init(device)
        return cls(rank(), world_size()), device

    @property
    def main(self) -> bool:
        """Rank 0 validates and writes the run directory; the others only train."""
        return self.rank == 0

    def _collective(self, values: list[float], op: Callable) -> list[float]:
        if not dist.is_initialized():
            return list(values)
        # float64 holds token counts exactly; NCCL only moves tensors that live on the GPU
        gpu = dist.get_backend() == "nccl"
        t = torch.tensor(values, dtype=torch.float64, device=torch.cuda.current_device() if gpu else "cpu")
        op(t)
        return t.tolist()

    def sum(self, values: list[float]) -> list[float]:
        """Each value summed over the ranks."""
        return self._collective(values, dist.all_reduce)

    def from_main(self, compute: Callable[[], list[float]], n: int) -> list[float]:
        """`compute()` on rank 0 (n numbers), and its result on every rank: decided once, alike."""
        return self._collective(compute() if self.main else [0.0] * n, lambda t: dist.broadcast(t, src=0))

    def any(self, flag: object) -> bool:
        """Whether any rank's flag is set: all of them then act alike."""
        return self.sum([1.0 if flag else 0.0])[0] > 0

    def barrier(self) -> None:
        """Wait here until every rank arrives (for files that rank 0 writes and the others read)."""
        if dist.is_initialized():
            dist.barrier()

    def gather_rng(self, device: torch.device) -> list[dict[str, Tensor]]:
        """Every rank's random generators (dropout on CPU, or on its GPU); [] with one process."""
        if not dist.is_initialized():
            return []
        cuda = torch.cuda.get_rng_state(device) if device.type == "cuda" else torch.empty(0)
        out: list[Any] = [None] * self.world
        dist.all_gather_object(out, {"cpu": torch.get_rng_state(), "cuda": cuda})
        return out

    def rng_state(self, device: torch.device, gathered: list[dict[str, Tensor]]) -> dict[str, Any]:
        """The checkpoint's generator entries: this process's, and every rank's under torchrun."""
        one = self.world == 1  # else `gathered` holds each rank's GPU generator
        return {
            "rng": torch.get_rng_state(),
            "cuda_rng": torch.cuda.get_rng_state_all() if device.type == "cuda" and one else [],
            "rank_rng": gathered,  # torchrun: every rank's generators, from the last validation
            "world_size": self.world,  # processes that trained together; 1 otherwise
        }

    def restore_rng(self, state: dict[str, Any], device: torch.device, seed: int) -> None:
        """Each rank's generators as saved; a rank the saved run did not have starts afresh."""
        saved = state.get("rank_rng") or []
        if self.world > 1 and self.rank < len(saved):
            torch.set_rng_state(saved[self.rank]["cpu"])
            if device.type == "cuda" and saved[self.rank]["cuda"].numel():
                torch.cuda.set_rng_state(saved[self.rank]["cuda"], device)
        elif self.rank:
            torch.manual_seed(seed + self.rank)
        else:
            torch.set_rng_state(state["rng"])
            if device.type == "cuda" and state.get("cuda_rng") and self.world == 1:
                torch.cuda.set_rng_state_all(state["cuda_rng"])
