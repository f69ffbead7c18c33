#!/usr/bin/env python3
"""A minimal PyTorch DDP training on CPU (gloo), for scripts/ddp-check.sh.

Reads the rendezvous from the environment as `init_method="env://"` does: RANK, WORLD_SIZE,
LOCAL_RANK, MASTER_ADDR, MASTER_PORT. Tandem sets them for every `srun` task (from the
allocation), and torchrun sets them for the workers it starts, so the same file runs either way.

Each rank builds its model from a different seed and trains on different data: DDP's
constructor broadcasts rank 0's parameters, and each step all-reduces the gradients, so the
ranks end with identical parameters only if both worked. Every rank prints one line; rank 0
gathers every rank's parameter checksum, prints `DDP OK world=W` when they all match, and
every rank exits non-zero when they do not.
"""

import datetime
import os
import socket
import sys

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

STEPS = 5


def checksum(model: torch.nn.Module) -> torch.Tensor:
    """Sum of the parameters, and a position-weighted sum (catches permutations), in float64."""
    flat = torch.cat([p.detach().reshape(-1).double() for p in model.parameters()])
    weights = torch.arange(1, flat.numel() + 1, dtype=torch.float64)
    return torch.stack([flat.sum(), (flat * weights).sum()])


def main() -> int:
    for k in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"):
        if k not in os.environ:
            print(f"ddp.py: {k} is not set (run under srun or torchrun)", file=sys.stderr)
            return 2
    rank = int(os.environ["RANK"])
    world = int(os.environ["WORLD_SIZE"])
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    host = os.environ.get("SLURMD_NODENAME") or socket.gethostname()
    torch.set_num_threads(1)

    dist.init_process_group("gloo", init_method="env://", rank=rank, world_size=world,
                            timeout=datetime.timedelta(seconds=120))
    try:
        assert dist.get_world_size() == world and dist.get_rank() == rank

        torch.manual_seed(1000 + rank)  # different initial parameters on every rank
        model = torch.nn.Linear(16, 4)
        before = checksum(model)
        ddp = DDP(model)  # broadcasts rank 0's parameters
        opt = torch.optim.SGD(ddp.parameters(), lr=0.1)

        gen = torch.Generator().manual_seed(rank)  # different data on every rank
        target = torch.nn.Linear(16, 4)
        torch.nn.init.constant_(target.weight, 0.5)
        loss = torch.tensor(float("nan"))
        for _ in range(STEPS):
            x = torch.randn(32, 16, generator=gen)
            with torch.no_grad():
                y = target(x)
            opt.zero_grad()
            loss = torch.nn.functional.mse_loss(ddp(x), y)
            loss.backward()  # gradients all-reduced (averaged) across the ranks here
            opt.step()

        mine = checksum(model)
        print(f"rank {rank}/{world} on {host} (local rank {local_rank}, master "
              f"{os.environ['MASTER_ADDR']}:{os.environ['MASTER_PORT']}): loss {loss.item():.6f} "
              f"params-checksum {mine[0].item():.12f} {mine[1].item():.12f} "
              f"(initial {before[0].item():.6f})", flush=True)

        gathered = [torch.zeros_like(mine) for _ in range(world)]
        dist.all_gather(gathered, mine)
        ok = all(torch.equal(g, gathered[0]) for g in gathered)
        if rank == 0:
            if ok:
                print(f"DDP OK world={world}", flush=True)
            else:
                sums = ", ".join(f"{i}: {g.tolist()}" for i, g in enumerate(gathered))
                print(f"DDP FAILED world={world}: parameters differ across ranks ({sums})", flush=True)
        dist.barrier()
        return 0 if ok else 1
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    sys.exit(main())
