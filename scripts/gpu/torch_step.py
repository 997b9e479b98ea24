#!/usr/bin/env python3
"""PyTorch's training step of a strata network, for the side-by-side comparison
with `strata run --device cuda` (same network, batch, precision and update rule).

The network comes from `strata describe NET --format json` (layers, their
inputs and specs, expanded blocks included), so both run exactly the same
layers; every layer's output shape is checked against strata's, and the
parameter count is printed (a tied fc counts its embedding's table once, as
strata's does). Convolutional networks run in strata's layout (batch,
channels, height, width). A network whose first layer is an embedding (the
transformers) runs in the layout a PyTorch user writes, (batch, positions,
features): embedding with learnt positions, layernorm (eps 1e-5), attention
as backend.h's AttentionDesc, gelu (tanh form), per-position fc as
nn.Linear, the fc tied to the embedding's token table, and the softmax
cross-entropy averaged over every position of every example. A vision
transformer (torchvision's ViT: patches by a conv, then a sequence) stays in
strata's layout, a sequence being (batch, features, positions, 1): its class
token, position table and token layers, and attention and layernorm over each
position's channels.

Precision: fp32 with TF32 off (strata's CUDA default), --tf32 (TF32 tensor
cores for fp32 GEMMs and convolutions), or --bf16 (autocast to bf16 with fp32
master weights, as strata's --element bf16). Update rule: --optimizer
sgd|momentum|adam|adamw (strata run's default: momentum 0.9, lr 0.01).

Prints one JSON line: the median step (the upper median, as strata run picks
it) over the steps after the warm-up and the spread (min, max), in
milliseconds, measured by CUDA events on the GPU and by the host clock with
--device cpu; the parameter count; the loss of the first and the last step;
on the GPU the most memory PyTorch's allocator held.

  strata describe alexnet-owt --format json > alexnet-owt.json
  python3 scripts/gpu/torch_step.py alexnet-owt.json --batch 128 --steps 12
  python3 scripts/gpu/torch_step.py gpt2-small.json --batch 8 --steps 8 --bf16 --optimizer adam
"""
import argparse
import json
import math
import statistics
import sys
import time

import torch
import torch.nn.functional as F
from torch import nn


class LrnAsStrata(nn.Module):
    """strata's LRN: alpha is not divided by size (Krizhevsky et al. 2012);
    PyTorch's LocalResponseNorm divides it, so it gets alpha * size."""

    def __init__(self, size, alpha=1e-4, beta=0.75, k=2.0):
        super().__init__()
        self.lrn = nn.LocalResponseNorm(size, alpha=alpha * size, beta=beta, k=k)

    def forward(self, x):
        return self.lrn(x)


# ---- transformer layers, in the sequence layout (batch, positions, features) ----

class Embedding(nn.Module):
    """Token table (vocab x features) plus, when strata's has one, a learnt
    position table (positions x features): y[t] = table[id_t] + pos[t]. Both
    start with variance 1/features, as strata's, so that a tied fc's logits over
    a normalised input have variance ~1."""

    def __init__(self, vocab, features, positions):
        super().__init__()
        self.tok = nn.Embedding(vocab, features)
        nn.init.normal_(self.tok.weight, std=features**-0.5)
        self.pos = (nn.Parameter(torch.randn(positions, features) * features**-0.5)
                    if positions else None)

    def forward(self, ids):
        b, _, h, w = ids.shape  # strata's input: (batch, 1, positions, 1) token ids
        y = self.tok(ids.reshape(b, h * w).long())
        if self.pos is not None:
            y = y + self.pos[:h * w]
        return y


class Attention(nn.Module):
    """Multi-head self-attention as backend.h's AttentionDesc, per example with
    x (positions x d): QKV = x Wqkv^T + bqkv (features [0, d) Q, [d, 2d) K,
    [2d, 3d) V; head h's are features [h dh, (h+1) dh) of each);
    P_h = softmax(Q_h K_h^T / sqrt(dh)) per query, keys after the query masked
    out when causal; C_h = P_h V_h; y = C Wo^T + bo. 4 d^2 (+ 4 d) parameters,
    as strata counts. PyTorch >= 2.0 runs the heads through
    scaled_dot_product_attention (its fused kernels, what a PyTorch user runs);
    older ones (and `fused = False`) through the formula above."""

    def __init__(self, features, heads, causal, bias):
        super().__init__()
        if features % heads:
            raise SystemExit(f"torch_step.py: {features} features do not split into {heads} heads")
        self.qkv = nn.Linear(features, 3 * features, bias=bias)
        self.out = nn.Linear(features, features, bias=bias)
        self.heads, self.causal = heads, causal
        self.fused = hasattr(F, "scaled_dot_product_attention")
        self._masks = {}  # (positions, device): the causal mask, not a buffer (DDP has none)

    def forward(self, x):
        b, t, d = x.shape
        dh = d // self.heads
        q, k, v = (z.reshape(b, t, self.heads, dh).transpose(1, 2)
                   for z in self.qkv(x).split(d, dim=2))  # each (b, heads, t, dh)
        if self.fused:
            c = F.scaled_dot_product_attention(q, k, v, is_causal=self.causal)
        else:
            scores = (q @ k.transpose(-2, -1)) / math.sqrt(dh)
            if self.causal:
                where = (t, x.device)
                if where not in self._masks:
                    self._masks[where] = torch.ones(t, t, dtype=torch.bool,
                                                    device=x.device).triu(1)
                scores = scores.masked_fill(self._masks[where], float("-inf"))
            c = scores.softmax(dim=-1) @ v
        return self.out(c.transpose(1, 2).reshape(b, t, d))


class ChannelAttention(Attention):
    """Attention over strata's layout (batch, features, h, w), the h w positions a
    sequence (a vision transformer's): the positions and features swapped round
    Attention, which runs on (batch, positions, features)."""

    def forward(self, x):
        n, c, h, w = x.shape
        y = super().forward(x.flatten(2).transpose(1, 2))  # (n, h w, c)
        return y.transpose(1, 2).reshape(n, c, h, w)


class ClassToken(nn.Module):
    """strata's class_token (torchvision's ViT class_token, zeros): `tokens` learned
    vectors of C features before the input's positions. In strata's layout the
    input's H W positions are read as a sequence: (batch, C, H, W) gives
    (batch, C, tokens + H W, 1); in the sequence layout (batch, T, C) gives
    (batch, tokens + T, C)."""

    def __init__(self, channels, tokens, sequence):
        super().__init__()
        self.sequence = sequence
        self.tokens = nn.Parameter(torch.zeros(1, tokens, channels) if sequence
                                   else torch.zeros(1, channels, tokens))

    def forward(self, x):
        n = x.shape[0]
        if self.sequence:
            return torch.cat([self.tokens.expand(n, -1, -1), x], dim=1)
        return torch.cat([self.tokens.expand(n, -1, -1), x.flatten(2)], dim=2).unsqueeze(3)


class PosEmbedding(nn.Module):
    """strata's pos_embedding (torchvision's ViT pos_embedding, normal with std
    0.02): a learned table of one example's shape added to every example."""

    def __init__(self, shape, sequence):
        super().__init__()
        c, h, w = shape
        self.table = nn.Parameter(torch.empty(h * w, c) if sequence else torch.empty(c, h, w))
        nn.init.normal_(self.table, std=0.02)

    def forward(self, x):
        return x + self.table


def token_of(x, index, sequence):
    """strata's token: position `index` of each channel (ViT's x[:, 0]), as strata's
    C x 1 x 1 ((batch, 1, C) in the sequence layout)."""
    if sequence:
        return x[:, index:index + 1, :]
    n, c = x.shape[:2]
    return x.flatten(2)[:, :, index].reshape(n, c, 1, 1)


class TiedFc(nn.Module):
    """Per-position fc whose weight is an embedding's token table (GPT's lm_head):
    logits = x table^T (+ bias). The table is set by build_net once every module
    exists."""

    def __init__(self, outputs, bias):
        super().__init__()
        self.weight = None
        self.bias = nn.Parameter(torch.zeros(outputs)) if bias else None

    def forward(self, x):
        return F.linear(x, self.weight, self.bias)


# strata's pointwise activations of vision networks, as torch modules.
ACTIVATIONS = {"sigmoid": nn.Sigmoid, "silu": nn.SiLU, "relu6": nn.ReLU6,
               "hardsigmoid": nn.Hardsigmoid, "hardswish": nn.Hardswish}


def is_sequence(described):
    """Whether the network runs in the sequence layout: its first layer is an embedding."""
    return described["layers"][0]["kind"] == "embedding"


def module_of(layer, sequence=False):
    """The layer's torch module (None for add, concat, mul, slice, shuffle, token and softmax,
    which forward does itself); `sequence`: the network runs in the (batch, positions, features)
    layout."""
    kind, spec = layer["kind"], layer["spec"]
    shape = layer["input_shape"]
    c_in = shape[0]
    unsupported = SystemExit(f"torch_step.py: layer '{layer['name']}': kind {kind} is not "
                             f"supported in a {'sequence' if sequence else 'convolutional'} "
                             "network")
    if kind == "embedding":
        if not sequence:
            raise unsupported
        return Embedding(spec["vocab"], spec["outputs"], spec.get("positions", 0))
    if kind == "layernorm":
        if not sequence:
            return ChannelLayerNorm(c_in)  # over each position's channels (ConvNeXt's)
        return nn.LayerNorm(c_in)  # eps 1e-5, strata's
    if kind == "attention":
        # A vision transformer's sequence is strata's C x T x 1 (its H W positions).
        make = Attention if sequence else ChannelAttention
        return make(c_in, spec["heads"], spec["causal"], spec["bias"])
    if kind == "class_token":
        return ClassToken(c_in, spec["tokens"], sequence)
    if kind == "pos_embedding":
        return PosEmbedding(shape, sequence)
    if kind == "gelu":
        return nn.GELU(approximate="tanh")  # strata's gelu is the tanh form
    if kind == "fc" and spec.get("tied"):
        return TiedFc(spec["outputs"], spec["bias"])
    if kind == "relu":
        return nn.ReLU()
    if kind in ACTIVATIONS:
        return ACTIVATIONS[kind]()
    if kind == "dropout":
        return nn.Dropout(spec["rate"])
    if kind == "scale":
        return LayerScale(c_in, sequence)
    if kind in ("add", "concat", "mul", "slice", "shuffle", "token", "softmax"):
        return None
    if sequence:
        if kind == "fc" and not spec["flatten"]:
            return nn.Linear(c_in, spec["outputs"], bias=spec["bias"])  # per position
        raise unsupported
    if kind == "conv":
        return nn.Conv2d(c_in, spec["filters"], tuple(spec["kernel"]), stride=spec["stride"],
                         padding=(spec["pad"], spec.get("pad_w", spec["pad"])),
                         dilation=spec.get("dilation", 1), groups=spec["groups"],
                         bias=spec["bias"])
    if kind == "pool":
        if spec["global"]:
            return nn.AdaptiveMaxPool2d(1) if spec["mode"] == "max" else nn.AdaptiveAvgPool2d(1)
        if spec["mode"] == "max":
            return nn.MaxPool2d(tuple(spec["kernel"]), stride=spec["stride"], padding=spec["pad"],
                                ceil_mode=spec.get("ceil_mode", False))
        # strata's average never counts padding.
        return nn.AvgPool2d(tuple(spec["kernel"]), stride=spec["stride"], padding=spec["pad"],
                            count_include_pad=False)
    if kind == "fc":
        if spec["flatten"]:
            features = c_in * shape[1] * shape[2]
            return nn.Sequential(nn.Flatten(), nn.Linear(features, spec["outputs"],
                                                         bias=spec["bias"]),
                                 nn.Unflatten(1, (spec["outputs"], 1, 1)))
        return nn.Conv2d(c_in, spec["outputs"], 1, bias=spec["bias"])  # per position
    if kind == "lrn":
        return LrnAsStrata(spec["size"])
    if kind == "batchnorm":
        return nn.BatchNorm2d(c_in)
    raise unsupported


class ChannelLayerNorm(nn.LayerNorm):
    """strata's layernorm on C x H x W: over the channels of each position (torchvision's
    LayerNorm2d: channels last, normalised, channels first)."""

    def forward(self, x):
        return super().forward(x.permute(0, 2, 3, 1)).permute(0, 3, 1, 2)


class LayerScale(nn.Module):
    """strata's scale: a learned value per channel (ConvNeXt's layer_scale, [C, 1, 1])."""

    def __init__(self, channels, sequence):
        super().__init__()
        self.sequence = sequence
        self.gamma = nn.Parameter(torch.ones(channels) if sequence else torch.ones(channels, 1, 1))

    def forward(self, x):
        return x * self.gamma


def channel_shuffle(x, groups, sequence):
    """ShuffleNet's shuffle as torchvision writes it: the channels viewed as
    (groups, channels / groups), transposed and flattened back."""
    if sequence:
        n, t, c = x.shape
        return x.view(n, t, groups, c // groups).transpose(2, 3).reshape(n, t, c)
    n, c, h, w = x.shape
    return x.view(n, groups, c // groups, h, w).transpose(1, 2).reshape(n, c, h, w)


def key(name):
    """A module name PyTorch accepts: strata's expanded blocks have dots."""
    return name.replace(".", "__")


class StrataNet(nn.Module):
    def __init__(self, described, make_module=module_of):
        """make_module(layer, sequence): the layer's torch module, None for add and softmax."""
        super().__init__()
        self.layers = described["layers"]
        self.sequence = is_sequence(described)
        self.mods = nn.ModuleDict()
        for layer in self.layers:
            m = make_module(layer, self.sequence)
            if m is not None:
                self.mods[key(layer["name"])] = m

    def strata_shape(self, y):
        """y's per-example shape as strata writes it: (channels, height, width);
        a sequence (positions, features) is strata's (features, positions, 1)."""
        if self.sequence:
            return [y.shape[2], y.shape[1], 1]
        return list(y.shape[1:])

    def forward(self, x, check_shapes=False):
        values = {"input": x}
        logits = None
        for layer in self.layers:
            ins = [values[name] for name in layer["inputs"]]
            if layer["kind"] == "add":
                y = ins[0]
                for other in ins[1:]:
                    y = y + other
            elif layer["kind"] == "concat":
                y = torch.cat(ins, dim=2 if self.sequence else 1)
            elif layer["kind"] == "mul":
                y = ins[0] * ins[1]  # a per-channel gate broadcasts over the positions
            elif layer["kind"] == "slice":
                spec = layer["spec"]
                y = ins[0].narrow(2 if self.sequence else 1, spec["offset"], spec["channels"])
            elif layer["kind"] == "shuffle":
                y = channel_shuffle(ins[0], layer["spec"]["groups"], self.sequence)
            elif layer["kind"] == "token":
                y = token_of(ins[0], layer["spec"]["index"], self.sequence)
            elif layer["kind"] == "softmax":
                logits = ins[0]
                y = logits
            else:
                y = self.mods[key(layer["name"])](ins[0])
            if check_shapes and self.strata_shape(y) != layer["output"]:
                raise SystemExit(f"torch_step.py: layer '{layer['name']}' gives "
                                 f"{self.strata_shape(y)}, strata says {layer['output']}")
            values[layer["name"]] = y
        return logits if logits is not None else y

    def random_labels(self, logits):
        """A class per position of every example."""
        if self.sequence:
            return torch.randint(0, logits.shape[2], logits.shape[:2], device=logits.device)
        return torch.randint(0, logits.shape[1], (logits.shape[0],) + tuple(logits.shape[2:]),
                             device=logits.device)

    def loss(self, logits, labels):
        """Softmax cross-entropy, the mean over positions and examples (strata's)."""
        if self.sequence:
            return F.cross_entropy(logits.reshape(-1, logits.shape[2]), labels.reshape(-1))
        return F.cross_entropy(logits, labels)


def build_net(described, make_module=module_of):
    """The network, with every tied fc reading its embedding's token table."""
    net = StrataNet(described, make_module)
    for layer in described["layers"]:
        if layer["kind"] == "fc" and layer["spec"].get("tied"):
            source = net.mods[key(layer["spec"]["tied"])]
            net.mods[key(layer["name"])].weight = source.tok.weight
    return net


def parameter_count(net):
    """Distinct parameters (a tied table once)."""
    return sum(p.numel() for p in net.parameters())


def synthetic_batch(described, batch, device):
    """Random inputs, or token ids when the first layer is an embedding."""
    c, h, w = (described["input"][k] for k in ("channels", "height", "width"))
    first = described["layers"][0]
    if first["kind"] == "embedding":
        return torch.randint(0, first["spec"]["vocab"], (batch, c, h, w), device=device)
    return torch.randn(batch, c, h, w, device=device)


def make_optimizer(name, params, lr):
    """strata run's update rules: SGD without and with momentum 0.9, Adam, AdamW
    (PyTorch's betas, eps and, for AdamW, weight decay 0.01)."""
    if name == "sgd":
        return torch.optim.SGD(params, lr=lr, momentum=0.0)
    if name == "momentum":
        return torch.optim.SGD(params, lr=lr, momentum=0.9)
    if name == "adam":
        return torch.optim.Adam(params, lr=lr)
    return torch.optim.AdamW(params, lr=lr, weight_decay=0.01)


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("described", help="output of `strata describe NET --format json` (- = stdin)")
    ap.add_argument("--batch", type=int, default=128, help="examples per step (default 128)")
    ap.add_argument("--steps", type=int, default=12,
                    help="steps, warm-up included (default 12)")
    ap.add_argument("--warmup", type=int, default=2, help="untimed first steps (default 2)")
    ap.add_argument("--device", choices=("cuda", "cpu"), default="cuda",
                    help="where to train (default cuda)")
    precision = ap.add_mutually_exclusive_group()
    precision.add_argument("--tf32", action="store_true",
                           help="TF32 for fp32 GEMMs and convolutions (default: full fp32)")
    precision.add_argument("--bf16", action="store_true",
                           help="autocast to bf16, fp32 master weights")
    ap.add_argument("--optimizer", choices=("sgd", "momentum", "adam", "adamw"),
                    default="momentum", help="update rule (default momentum, 0.9)")
    ap.add_argument("--lr", type=float, default=None,
                    help="learning rate (default 0.01 for sgd and momentum, as strata run; "
                         "0.001 for adam and adamw)")
    ap.add_argument("--no-dropout", action="store_true", help="dropout layers as identity")
    args = ap.parse_args(argv)
    if args.batch < 1 or args.warmup < 0 or args.steps <= args.warmup:
        ap.error("need --batch >= 1 and --steps > --warmup >= 0")
    if args.tf32 and args.device != "cuda":
        ap.error("--tf32 needs --device cuda (a CPU has no TF32)")
    if args.lr is None:
        args.lr = 0.01 if args.optimizer in ("sgd", "momentum") else 0.001
    if not args.lr > 0:
        ap.error("--lr must be positive")
    return args


def main(argv=None):
    args = parse_args(argv)
    described = json.load(sys.stdin if args.described == "-" else open(args.described))
    cuda = args.device == "cuda"
    if cuda:
        if not torch.cuda.is_available():
            raise SystemExit("torch_step.py: no CUDA device (--device cpu runs on the CPU)")
        torch.backends.cuda.matmul.allow_tf32 = args.tf32
        torch.backends.cudnn.allow_tf32 = args.tf32
        torch.backends.cudnn.benchmark = True  # as strata: the fastest algorithm per shape
    dev = torch.device(args.device)
    torch.manual_seed(1)
    net = build_net(described).to(dev)
    if args.no_dropout:
        for m in net.modules():
            if isinstance(m, nn.Dropout):
                m.p = 0.0
    x = synthetic_batch(described, args.batch, dev)
    with torch.no_grad():
        logits = net(x, check_shapes=True)
    labels = net.random_labels(logits)
    positions = labels[0].numel()
    opt = make_optimizer(args.optimizer, net.parameters(), args.lr)
    precision = "bf16" if args.bf16 else "tf32" if args.tf32 else "fp32"

    def step():
        opt.zero_grad(set_to_none=False)
        if args.bf16:
            with torch.autocast(device_type=args.device, dtype=torch.bfloat16):
                loss = net.loss(net(x), labels)
        else:
            loss = net.loss(net(x), labels)
        loss.backward()
        opt.step()
        return loss

    times, losses = [], []
    for i in range(args.steps):
        if cuda:
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            loss = step()
            end.record()
            torch.cuda.synchronize()
            ms = start.elapsed_time(end)
        else:
            t0 = time.perf_counter()
            loss = step()
            ms = (time.perf_counter() - t0) * 1e3
        losses.append(float(loss))
        if i >= args.warmup:
            times.append(ms)
    print(json.dumps({"network": described["network"], "device": args.device,
                      "batch": args.batch, "precision": precision, "optimizer": args.optimizer,
                      "lr": args.lr, "params": parameter_count(net), "positions": positions,
                      "median_step_ms": statistics.median_high(times), "min_step_ms": min(times),
                      "max_step_ms": max(times), "steps_timed": len(times),
                      "loss_first": losses[0], "loss_last": losses[-1],
                      # what PyTorch's allocator held at most (weights, optimizer state,
                      # activations), beside strata's memory estimate; none on the CPU
                      "peak_memory_bytes": torch.cuda.max_memory_allocated() if cuda else None,
                      "torch": torch.__version__}), flush=True)


if __name__ == "__main__":
    main()
