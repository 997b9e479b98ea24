#!/usr/bin/env python3
"""PyTorch's CPU training step of a strata network, for the side-by-side comparison
with `strata run` on this machine (scripts/cpu-peer runs both).

The network comes from `strata describe NET --format json` and is built by
scripts/gpu/torch_step.py (same layers, the transformer ones included, every
output shape checked against strata's). The step is strata run's: SGD with momentum 0.9,
lr 0.01, on synthetic inputs (random floats, or token ids when the first layer
is an embedding). The first --warmup steps are not timed; the median is the
upper one, as strata run picks it. With --workers K, K processes train with
DistributedDataParallel over gloo on 127.0.0.1, each on its own batch, and
rank 0's steps are reported.

Prints one JSON line: median, min and max step in milliseconds, the threads,
and which BLAS and OpenBLAS kernel PyTorch runs.

  strata describe tiny-cnn --format json > tiny-cnn.json
  python3 scripts/cpu/torch_step.py tiny-cnn.json --batch 32 --workers 2 --steps 8
"""
import argparse
import ctypes
import importlib.util
import json
import os
import re
import socket
import statistics
import sys
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn

# scripts/gpu/torch_step.py by path: its module name is the same as this file's.
_spec = importlib.util.spec_from_file_location(
    "gpu_torch_step", os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "gpu",
                                   "torch_step.py"))
gpu = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(gpu)


# ---- which BLAS this process runs ----

def blas_report():
    """PyTorch's BLAS as built (BLAS_INFO) and as loaded (the libraries this process
    has mapped), OpenBLAS's kernel and config, and whether oneDNN is used.
    Returns (one readable line, the OpenBLAS library or None)."""
    try:
        import numpy  # noqa: F401  (maps numpy's BLAS as well)
    except ImportError:
        pass
    config = torch.__config__.show()
    built = re.search(r"BLAS_INFO=([^,\s]+)", config)
    onednn = re.search(r"MKL-DNN (v[\d.]+)", config)
    mapped = sorted({line.split()[-1] for line in open("/proc/self/maps") if "/" in line})
    parts = [f"PyTorch {torch.__version__} BLAS_INFO={built.group(1) if built else '?'}"]
    openblas = None
    # Debian's openblas-pthread/libblas.so.3 is a thin front of libopenblas: name the latter.
    candidates = sorted((p for p in mapped if "openblas" in p.lower()),
                        key=lambda p: "libopenblas" not in os.path.basename(p))
    for path in candidates:
        lib = ctypes.CDLL(path)
        if hasattr(lib, "openblas_get_corename"):
            lib.openblas_get_corename.restype = ctypes.c_char_p
            lib.openblas_get_config.restype = ctypes.c_char_p
            openblas = lib
            parts.append(f"OpenBLAS {path}: kernel {lib.openblas_get_corename().decode()}"
                         f", config '{lib.openblas_get_config().decode()}'")
            break
    # PyTorch (BLAS_INFO=generic) and numpy call libblas.so.3: one outside an
    # OpenBLAS folder is the reference BLAS, even when OpenBLAS's LAPACK is mapped too.
    reference = [p for p in mapped
                 if os.path.basename(p).startswith("libblas.so") and "openblas" not in p.lower()]
    if openblas is None or reference:
        parts.append("REFERENCE BLAS, NOT OpenBLAS: install libopenblas0-pthread (mapped: "
                     f"{', '.join(reference) or 'no libblas'})")
        print(f"torch_step.py: WARNING: {parts[-1]}", file=sys.stderr)
    usable = torch.backends.mkldnn.is_available() and torch.backends.mkldnn.enabled
    version = f" {onednn.group(1)}" if onednn else ""
    parts.append(f"oneDNN (MKLDNN){version} {'on' if usable else 'off'}")
    return "; ".join(parts), openblas


def set_threads(threads, openblas):
    """PyTorch's OpenMP threads, and OpenBLAS's own pthreads, which
    torch.set_num_threads does not reach."""
    torch.set_num_threads(threads)
    if openblas is not None:
        openblas.openblas_set_num_threads(threads)


# ---- the training step ----

def timed_steps(described, args, ddp):
    """Builds the network, checks its shapes, runs args.steps SGD steps; the
    seconds of each step after the warm-up."""
    torch.manual_seed(1)  # the same weights on every rank (DDP broadcasts rank 0's anyway)
    net = gpu.build_net(described)
    if args.no_dropout:
        for m in net.modules():
            if isinstance(m, nn.Dropout):
                m.p = 0.0
    torch.manual_seed(1 + (dist.get_rank() if ddp else 0))  # each rank its own data
    x = gpu.synthetic_batch(described, args.batch, "cpu")
    with torch.no_grad():
        labels = net.random_labels(net(x, check_shapes=True))
    # broadcast_buffers off: strata does not sync batchnorm running statistics.
    model = nn.parallel.DistributedDataParallel(net, broadcast_buffers=False) if ddp else net
    opt = gpu.make_optimizer("momentum", model.parameters(), 0.01)
    seconds = []
    for _ in range(args.steps):
        start = time.perf_counter()
        opt.zero_grad(set_to_none=False)
        loss = net.loss(model(x), labels)
        loss.backward()  # under DDP, returns once the gradient allreduce is done
        opt.step()
        seconds.append(time.perf_counter() - start)
    return seconds[args.warmup:]


def report(described, args, blas, seconds):
    ms = [s * 1e3 for s in seconds]
    print(json.dumps({"network": described["network"], "batch_per_worker": args.batch,
                      "workers": args.workers, "threads_per_worker": args.threads,
                      "median_step_ms": statistics.median_high(ms), "min_step_ms": min(ms),
                      "max_step_ms": max(ms), "steps_timed": len(ms), "blas": blas}),
          flush=True)


def ddp_worker(rank, described, args, port):
    blas, openblas = blas_report()
    set_threads(args.threads, openblas)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=args.workers)
    seconds = timed_steps(described, args, ddp=True)
    if rank == 0:
        report(described, args, blas, seconds)
    dist.destroy_process_group()


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("described", help="output of `strata describe NET --format json` (- = stdin)")
    ap.add_argument("--batch", type=int, default=128, help="examples per worker (default 128)")
    ap.add_argument("--steps", type=int, default=10, help="steps, warm-up included (default 10)")
    ap.add_argument("--warmup", type=int, default=1, help="untimed first steps (default 1)")
    ap.add_argument("--workers", type=int, default=1, help="DDP processes (default 1)")
    ap.add_argument("--threads", type=int, default=0,
                    help="threads per worker (default: the cores this process may use / workers)")
    ap.add_argument("--no-dropout", action="store_true", help="dropout layers as identity")
    args = ap.parse_args()
    if args.batch < 1 or args.workers < 1 or args.warmup < 0 or args.steps <= args.warmup:
        raise SystemExit("torch_step.py: need --batch >= 1, --workers >= 1 and "
                         "--steps > --warmup >= 0")
    if args.threads <= 0:
        args.threads = max(1, len(os.sched_getaffinity(0)) // args.workers)
    described = json.load(sys.stdin if args.described == "-" else open(args.described))
    if args.workers == 1:
        blas, openblas = blas_report()
        set_threads(args.threads, openblas)
        report(described, args, blas, timed_steps(described, args, ddp=False))
    else:
        os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")  # stay on localhost
        mp.spawn(ddp_worker, args=(described, args, free_port()), nprocs=args.workers)


if __name__ == "__main__":
    main()
