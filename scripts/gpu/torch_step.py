#!/usr/bin/env python3
"""PyTorch's training step of a strata network, for the side-by-side comparison
with `strata run --device cuda` (same network, batch and precision).

The network comes from `strata describe NET --format json` (layers, their
inputs and specs, expanded blocks included), so both run exactly the same
layers; every layer's output shape is checked against strata's. Precision:
fp32 with TF32 off (as strata's CUDA backend by default), or --tf32.
Prints one JSON line: the median step time over the steps after the warm-up
and the spread (min, max), in milliseconds, measured by CUDA events.

  strata describe alexnet-owt --format json > alexnet-owt.json
  python3 scripts/gpu/torch_step.py alexnet-owt.json --batch 128 --steps 12
"""
import argparse
import json
import statistics
import sys

import torch
from torch import nn


class LrnAsStrata(nn.Module):
    """strata's LRN: alpha is not divided by size (Krizhevsky et al. 2012);
    PyTorch's LocalResponseNorm divides it, so it gets alpha * size."""

    def __init__(self, size, alpha=1e-4, beta=0.75, k=2.0):
        super().__init__()
        self.lrn = nn.LocalResponseNorm(size, alpha=alpha * size, beta=beta, k=k)

    def forward(self, x):
        return self.lrn(x)


def module_of(layer):
    kind, spec = layer["kind"], layer["spec"]
    c_in = layer["input_shape"][0]
    if kind == "conv":
        return nn.Conv2d(c_in, spec["filters"], tuple(spec["kernel"]), stride=spec["stride"],
                         padding=spec["pad"], groups=spec["groups"], bias=spec["bias"])
    if kind == "pool":
        if spec["global"]:
            return nn.AdaptiveMaxPool2d(1) if spec["mode"] == "max" else nn.AdaptiveAvgPool2d(1)
        if spec["mode"] == "max":
            return nn.MaxPool2d(tuple(spec["kernel"]), stride=spec["stride"], padding=spec["pad"])
        # strata's average never counts padding.
        return nn.AvgPool2d(tuple(spec["kernel"]), stride=spec["stride"], padding=spec["pad"],
                            count_include_pad=False)
    if kind == "fc":
        if spec["flatten"]:
            features = c_in * layer["input_shape"][1] * layer["input_shape"][2]
            return nn.Sequential(nn.Flatten(), nn.Linear(features, spec["outputs"],
                                                         bias=spec["bias"]),
                                 nn.Unflatten(1, (spec["outputs"], 1, 1)))
        return nn.Conv2d(c_in, spec["outputs"], 1, bias=spec["bias"])  # per position
    if kind == "relu":
        return nn.ReLU()
    if kind == "lrn":
        return LrnAsStrata(spec["size"])
    if kind == "dropout":
        return nn.Dropout(spec["rate"])
    if kind == "batchnorm":
        return nn.BatchNorm2d(c_in)
    if kind in ("add", "softmax"):
        return None
    raise SystemExit(f"torch_step.py: layer '{layer['name']}': kind {kind} is not supported")


def key(name):
    """A module name PyTorch accepts: strata's expanded blocks have dots."""
    return name.replace(".", "__")


class StrataNet(nn.Module):
    def __init__(self, described, make_module=module_of):
        """make_module(layer): the layer's torch module, None for add and softmax;
        scripts/cpu/torch_step.py passes one that also knows the transformer layers."""
        super().__init__()
        self.layers = described["layers"]
        self.mods = nn.ModuleDict()
        for layer in self.layers:
            m = make_module(layer)
            if m is not None:
                self.mods[key(layer["name"])] = m

    def forward(self, x, check_shapes=False):
        values = {"input": x}
        logits = None
        for layer in self.layers:
            ins = [values[name] for name in layer["inputs"]]
            if layer["kind"] == "add":
                y = ins[0]
                for other in ins[1:]:
                    y = y + other
            elif layer["kind"] == "softmax":
                logits = ins[0]
                y = logits
            else:
                y = self.mods[key(layer["name"])](ins[0])
            if check_shapes and list(y.shape[1:]) != layer["output"]:
                raise SystemExit(f"torch_step.py: layer '{layer['name']}' gives {list(y.shape[1:])}"
                                 f", strata says {layer['output']}")
            values[layer["name"]] = y
        return logits if logits is not None else y


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("described", help="output of `strata describe NET --format json` (- = stdin)")
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--steps", type=int, default=12, help="steps; the first two are warm-up")
    ap.add_argument("--tf32", action="store_true", help="allow TF32 (default: full FP32)")
    ap.add_argument("--no-dropout", action="store_true", help="dropout layers as identity")
    args = ap.parse_args()
    if args.batch < 1 or args.steps < 3:
        raise SystemExit("torch_step.py: --batch must be >= 1 and --steps >= 3")
    described = json.load(sys.stdin if args.described == "-" else open(args.described))
    if not torch.cuda.is_available():
        raise SystemExit("torch_step.py: no CUDA device")
    torch.backends.cuda.matmul.allow_tf32 = args.tf32
    torch.backends.cudnn.allow_tf32 = args.tf32
    torch.backends.cudnn.benchmark = True  # as strata: the fastest algorithm per shape
    dev = torch.device("cuda")
    net = StrataNet(described).to(dev)
    if args.no_dropout:
        for m in net.modules():
            if isinstance(m, nn.Dropout):
                m.p = 0.0
    c, h, w = (described["input"][k] for k in ("channels", "height", "width"))
    x = torch.randn(args.batch, c, h, w, device=dev)
    with torch.no_grad():
        logits = net(x, check_shapes=True)
    classes, positions = logits.shape[1], logits.shape[2] * logits.shape[3]
    labels = torch.randint(0, classes, (args.batch, logits.shape[2], logits.shape[3]), device=dev)
    opt = torch.optim.SGD(net.parameters(), lr=0.01, momentum=0.9)
    loss_fn = nn.CrossEntropyLoss()
    times = []
    for step in range(args.steps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        opt.zero_grad(set_to_none=False)
        loss = loss_fn(net(x), labels)
        loss.backward()
        opt.step()
        end.record()
        torch.cuda.synchronize()
        if step >= 2:
            times.append(start.elapsed_time(end))
    print(json.dumps({"network": described["network"], "batch": args.batch,
                      "precision": "tf32" if args.tf32 else "fp32", "positions": positions,
                      "median_step_ms": statistics.median(times), "min_step_ms": min(times),
                      "max_step_ms": max(times), "steps_timed": len(times),
                      "torch": torch.__version__}))


if __name__ == "__main__":
    main()
