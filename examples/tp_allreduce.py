"""A tensor-parallel MLP step, all-reduce heavy, launched by torchrun (issue "Multi-GPU verify run").

Each rank holds 1/world of a Llama-70B-sized MLP (hidden 8192, FFN 28672, SiLU): the up
projection is split by columns, the down projection by rows, so every step ends in an
all-reduce of the full activations (``torch.distributed.all_reduce`` over NCCL on GPUs, gloo on
the CPU for a rehearsal). After warm-up steps, it times ``--steps`` steps and rank 0 prints one
JSON line that ``liftgate verify`` reads (the last JSON line of the run): tokens per second, step
time, all-reduce time and bus bandwidth, world size, backend and device.

    torchrun --nproc_per_node 2 examples/tp_allreduce.py
    torchrun --nproc_per_node 2 examples/tp_allreduce.py --device cpu --tokens 64 --hidden 256 --ffn 1024

NVLink multicast stays off (NCCL_NVLS_ENABLE=0, TORCH_SYMM_MEM_DISABLE_MULTICAST=1,
NVSHMEM_DISABLE_NVLS=1), set here before anything initialises NCCL, so in every rank whatever
the launcher passed.
"""

from __future__ import annotations

import argparse
import json
import os
import time

for _name, _value in (
    ("NCCL_NVLS_ENABLE", "0"),
    ("TORCH_SYMM_MEM_DISABLE_MULTICAST", "1"),
    ("NVSHMEM_DISABLE_NVLS", "1"),
):
    os.environ[_name] = _value


def main() -> int:
    import torch
    import torch.distributed as dist

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tokens", type=int, default=4096)
    parser.add_argument("--hidden", type=int, default=8192)
    parser.add_argument("--ffn", type=int, default=28672)
    parser.add_argument("--steps", type=int, default=50)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--device", choices=("auto", "cuda", "cpu"), default="auto")
    args = parser.parse_args()

    cuda = args.device == "cuda" or (args.device == "auto" and torch.cuda.is_available())
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    if cuda:
        torch.cuda.set_device(local_rank)
    dist.init_process_group(backend="nccl" if cuda else "gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    if args.ffn % world:
        raise SystemExit(f"--ffn {args.ffn} does not split over {world} ranks")
    device = torch.device("cuda", local_rank) if cuda else torch.device("cpu")
    dtype = torch.bfloat16 if cuda else torch.float32
    generator = torch.Generator(device=device).manual_seed(1234 + rank)
    shard = args.ffn // world
    x = torch.randn(args.tokens, args.hidden, device=device, dtype=dtype, generator=generator)
    w_up = torch.randn(args.hidden, shard, device=device, dtype=dtype, generator=generator) / args.hidden**0.5
    w_down = torch.randn(shard, args.hidden, device=device, dtype=dtype, generator=generator) / shard**0.5

    def sync() -> None:
        if cuda:
            torch.cuda.synchronize()

    def step() -> torch.Tensor:
        y = torch.nn.functional.silu(x @ w_up) @ w_down
        dist.all_reduce(y)
        return y

    for _ in range(args.warmup):
        step()
    sync()
    dist.barrier()
    start = time.perf_counter()
    for _ in range(args.steps):
        y = step()
    sync()
    elapsed = time.perf_counter() - start

    # The all-reduce alone, on a tensor of the step's output size.
    buffer = torch.empty_like(y)
    for _ in range(args.warmup):
        dist.all_reduce(buffer)
    sync()
    dist.barrier()
    ar_start = time.perf_counter()
    for _ in range(args.steps):
        dist.all_reduce(buffer)
    sync()
    ar_elapsed = time.perf_counter() - ar_start
    size = buffer.numel() * buffer.element_size()
    ar_s = ar_elapsed / args.steps
    if rank == 0:
        print(
            json.dumps(
                {
                    "tokens_per_s": round(args.tokens * args.steps / elapsed, 1),
                    "step_ms": round(elapsed / args.steps * 1e3, 3),
                    "allreduce_ms": round(ar_s * 1e3, 3),
                    # NCCL's bus bandwidth for all-reduce: bytes * 2 (n-1)/n per second
                    "allreduce_busbw_gb_s": round(size * 2 * (world - 1) / world / ar_s / 1e9, 2),
                    "world_size": world,
                    "backend": dist.get_backend(),
                    "device": torch.cuda.get_device_name(device) if cuda else "cpu",
                    "checksum": round(float(y.float().abs().mean()), 6),
                }
            ),
            flush=True,
        )
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
