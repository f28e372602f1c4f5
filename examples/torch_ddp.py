#!/usr/bin/env python3
"""A small PyTorch DDP training run instrumented with the gpuwatch SDK.

    torchrun --nproc_per_node=2 examples/torch_ddp.py --steps 200
    python3 examples/torch_ddp.py --steps 50          # one process, no torchrun

An MLP on synthetic classification data. CUDA with NCCL when GPUs are present (one per
local rank), else CPU with gloo. Each rank reports to the node's gpuwatch agent: its steps
timed on the GPU (gpuwatch.torch.cuda_step; CPU-timed without CUDA), the data wait of the
DataLoader (track), the exposed allreduce time (DDP comm hook), loss and gradient norm, and a
checkpoint phase every --ckpt-every steps. It prints one line per step as the SDK reported
it: step, step_ms, data_ms, comm_ms, loss.
"""

import argparse
import os
import sys
import time

try:
    import gpuwatch as gw
except ImportError:  # run from a checkout without `pip install ./sdk/python`
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "sdk", "python"))
    import gpuwatch as gw

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler

import gpuwatch.torch as gwt


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--steps", type=int, default=100, help="training steps (default 100)")
    p.add_argument("--batch", type=int, default=256, help="samples per rank per step")
    p.add_argument("--dim", type=int, default=512, help="input and hidden width")
    p.add_argument("--layers", type=int, default=4, help="hidden layers")
    p.add_argument("--classes", type=int, default=10)
    p.add_argument("--samples", type=int, default=65536, help="size of the synthetic data set")
    p.add_argument("--workers", type=int, default=1, help="DataLoader worker processes")
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--ckpt-every", type=int, default=50, help="checkpoint every K steps (0: never)")
    p.add_argument("--ckpt-path", default=None, help="checkpoint file (default: a temp file)")
    p.add_argument("--forward-stderr", action="store_true", help="forward Python stderr lines")
    return p.parse_args()


def setup_distributed():
    if "RANK" not in os.environ:  # plain `python3 torch_ddp.py`: a world of one
        os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
        os.environ.setdefault("MASTER_PORT", str(29500 + os.getpid() % 1000))
        os.environ.update(RANK="0", WORLD_SIZE="1", LOCAL_RANK="0")
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    if torch.cuda.is_available():
        torch.cuda.set_device(local_rank % torch.cuda.device_count())
        device = torch.device("cuda", torch.cuda.current_device())
        backend = "nccl"
    else:
        device = torch.device("cpu")
        backend = "gloo"
    dist.init_process_group(backend)
    return device


def make_model(args):
    layers, width = [], args.dim
    for _ in range(args.layers):
        layers += [nn.Linear(width, args.dim), nn.GELU()]
        width = args.dim
    layers.append(nn.Linear(width, args.classes))
    return nn.Sequential(*layers)


def main():
    args = parse_args()
    device = setup_distributed()
    rank, world = dist.get_rank(), dist.get_world_size()

    gw.init(template="toy-ddp", project="examples", forward_stderr=args.forward_stderr)

    torch.manual_seed(0)  # same data and initial weights on every rank
    x = torch.randn(args.samples, args.dim)
    w_true = torch.randn(args.dim, args.classes)
    y = (x @ w_true).argmax(dim=1)
    data = TensorDataset(x, y)
    sampler = DistributedSampler(data, num_replicas=world, rank=rank, shuffle=True)
    loader = DataLoader(data, batch_size=args.batch, sampler=sampler, num_workers=args.workers,
                        pin_memory=device.type == "cuda", drop_last=True,
                        persistent_workers=args.workers > 0)

    model = make_model(args).to(device)
    ddp = DDP(model, device_ids=[device.index] if device.type == "cuda" else None)
    gwt.register_comm_hook(ddp)  # allreduce time -> comm_s, allreduce_s
    opt = torch.optim.AdamW(ddp.parameters(), lr=args.lr)

    ckpt_path = args.ckpt_path or os.path.join(
        os.environ.get("TMPDIR", "/tmp"), "gpuwatch-toy-ddp-%d.pt" % os.getpid())
    if rank == 0:
        print("gpuwatch: job %s rank %d/%d, sending to %s" % (gw.client().job, rank, world, gw.client().address), flush=True)
        print("step  step_ms  data_ms  comm_ms  loss", flush=True)

    step, epoch, printed, losses = 0, 0, None, {}
    t_start = time.perf_counter()
    while step < args.steps:
        sampler.set_epoch(epoch)
        for xb, yb in gw.track(loader):
            if step >= args.steps:
                break
            xb = xb.to(device, non_blocking=True)
            yb = yb.to(device, non_blocking=True)
            with gwt.cuda_step(samples=xb.shape[0]):
                opt.zero_grad(set_to_none=True)
                loss = F.cross_entropy(ddp(xb), yb)
                loss.backward()
                grad_norm = torch.nn.utils.clip_grad_norm_(ddp.parameters(), 1.0)
                opt.step()
                # .item() waits for the GPU; a real job would read it every few steps.
                losses[step] = loss.item()
                gw.log(loss=losses[step], grad_norm=grad_norm.item(), lr=opt.param_groups[0]["lr"])
            if args.ckpt_every and (step + 1) % args.ckpt_every == 0:
                # Every rank waits for rank 0's save (the barrier), as in real jobs; the time
                # is checkpoint_s of the next step.
                with gw.phase("checkpoint"):
                    if rank == 0:
                        torch.save({"model": model.state_dict(), "opt": opt.state_dict(), "step": step}, ckpt_path)
                    dist.barrier()
            last = gw.client().last_step  # with CUDA, a step is reported once its events completed
            if rank == 0 and last is not None and last is not printed:
                printed = last
                n, d, data_s, comm_s, _ = last
                print("%4d  %7.2f  %7.2f  %7.2f  %.4f" % (
                    n, d * 1e3, (data_s or 0.0) * 1e3, (comm_s or 0.0) * 1e3, losses.pop(n, float("nan"))), flush=True)
            step += 1
        epoch += 1

    elapsed = time.perf_counter() - t_start
    if rank == 0:
        print("done: %d steps in %.1f s (%.1f steps/s); gpuwatch sent %d, dropped %d" % (
            step, elapsed, step / elapsed, gw.client().sent, gw.client().dropped), flush=True)
        if args.ckpt_every and not args.ckpt_path and os.path.exists(ckpt_path):
            os.unlink(ckpt_path)
    gw.end(0)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
