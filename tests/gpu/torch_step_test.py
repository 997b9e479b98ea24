#!/usr/bin/env python3
"""scripts/gpu/torch_step.py on the CPU (--device cpu), with a python that has
torch (TORCH_PYTHON, /usr/bin/python3 or python3; none: skipped, exit 77).

- tiny-gpt and tiny-cnn from this build's `strata describe`: two steps each
  print the JSON line, with strata's parameter count (the tied lm_head once);
  bf16, adam, adamw and sgd runs say so; --tf32 on the CPU is a usage mistake.
- The transformer layers against their definitions written out here in
  float64: attention as backend.h's AttentionDesc (causal and not, 1 and 4
  heads, PyTorch's fused path and the formula path), the embedding with
  positions, layernorm (eps 1e-5), gelu's tanh form, the tied fc (one table,
  its gradient from both uses), the loss as the mean over every position.
- The vision layers: a YAML network with concat, a squeeze-excitation mul,
  every activation, a conv with pad_w and dilation and a ceil_mode max pool
  builds with strata's shapes and parameters and trains two steps; the
  activations against their definitions (docs/configs.md); torchvision's
  GoogLeNet and MobileNetV3-small imported from ONNX (when this strata reads
  ONNX) build with torchvision's parameter counts.
- A vision transformer's layers: a YAML network with a class token, the
  position table, a bidirectional attention block and a token to the head
  builds with strata's shapes and parameters and trains two steps; the class
  token, the position table, the token and attention over strata's C x T x 1
  layout against their definitions.

  torch_step_test.py --strata build/cli/strata
"""
import argparse
import importlib.util
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
SCRIPT = os.path.join(ROOT, "scripts", "gpu", "torch_step.py")
SKIP = 77


def torch_python():
    """This interpreter when it has torch, else the first candidate that has."""
    if importlib.util.find_spec("torch") is not None:
        return sys.executable
    for candidate in (os.environ.get("TORCH_PYTHON"), "/usr/bin/python3", "python3"):
        exe = candidate and shutil.which(candidate)
        if exe and subprocess.run([exe, "-c", "import torch"], capture_output=True).returncode == 0:
            return exe
    return None


ap = argparse.ArgumentParser()
ap.add_argument("--strata", required=True)
args, rest = ap.parse_known_args()
python = torch_python()
if python is None:
    print("SKIP: no python with torch (TORCH_PYTHON, /usr/bin/python3, python3; "
          "Debian: apt install python3-torch)")
    sys.exit(SKIP)
if python != sys.executable:
    os.execv(python, [python, os.path.abspath(__file__), *sys.argv[1:]])

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

sys.path.insert(0, os.path.dirname(SCRIPT))
import torch_step  # noqa: E402


def describe(network):
    r = subprocess.run([args.strata, "describe", network, "--format", "json"],
                       capture_output=True, text=True, check=True)
    return json.loads(r.stdout)


VISION = """name: vision-step
input: {channels: 3, height: 18, width: 18}
layers:
  - {name: wide, kind: conv, filters: 4, kernel_h: 1, kernel_w: 5, pad: 0, pad_w: 2}
  - {name: act1, kind: hardswish}
  - {name: dil, kind: conv, input: input, filters: 4, kernel: 3, dilation: 2, pad: 2}
  - {name: act2, kind: silu}
  - {name: cat, kind: concat, inputs: [act1, act2]}
  - {name: pool, kind: pool, mode: max, kernel: 3, stride: 2, ceil_mode: true}
  - {name: squeeze, kind: pool, mode: avg, global: true}
  - {name: reduce, kind: conv, filters: 2, kernel: 1}
  - {name: r6, kind: relu6}
  - {name: expand, kind: conv, filters: 8, kernel: 1}
  - {name: gate, kind: hardsigmoid}
  - {name: scale, kind: mul, inputs: [pool, gate]}
  - {name: s, kind: sigmoid}
  - {name: keep, kind: slice, channels: 3}
  - {name: take, kind: slice, input: s, offset: 3, channels: 5}
  - {name: pw, kind: conv, filters: 5, kernel: 1}
  - {name: join, kind: concat, inputs: [keep, pw]}
  - {name: mix, kind: shuffle, groups: 2}
  - {name: gamma, kind: scale}
  - {name: fc, kind: fc, outputs: 5}
  - {name: loss, kind: softmax}
"""


VIT = """name: vit-step
input: {channels: 3, height: 16, width: 16}
layers:
  - {name: patches, kind: conv, filters: 8, kernel: 4, stride: 4}
  - {name: cls, kind: class_token, tokens: 2}
  - {name: pos, kind: pos_embedding}
  - {name: ln1, kind: layernorm}
  - {name: attn, kind: attention, heads: 2, causal: false}
  - {name: res1, kind: add, inputs: [pos, attn]}
  - {name: ln2, kind: layernorm}
  - {name: mlp1, kind: fc, outputs: 16, flatten: false}
  - {name: act, kind: gelu}
  - {name: mlp2, kind: fc, outputs: 8, flatten: false}
  - {name: res2, kind: add, inputs: [res1, mlp2]}
  - {name: ln, kind: layernorm}
  - {name: first, kind: token}
  - {name: head, kind: fc, outputs: 5}
  - {name: loss, kind: softmax}
"""


class VisionLayers(unittest.TestCase):
    def test_vision_transformer_builds_with_strata_shapes_and_trains(self):
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "vit-step.yaml")
            with open(path, "w") as f:
                f.write(VIT)
            d = describe(path)
            layers = {l["name"]: l for l in d["layers"]}
            # 4 x 4 patches: 8 x 4 x 4; 2 tokens before the 16 positions.
            self.assertEqual(layers["cls"]["output"], [8, 18, 1])
            self.assertEqual(layers["cls"]["spec"], {"tokens": 2})
            self.assertEqual(layers["first"]["spec"], {"index": 0})
            self.assertEqual(layers["first"]["output"], [8, 1, 1])
            net = torch_step.build_net(d)
            # strata's parameters: tokens C x 2, the table C x 18.
            self.assertEqual(net.mods["cls"].tokens.numel(), 8 * 2)
            self.assertEqual(net.mods["pos"].table.numel(), 8 * 18)
            self.assertEqual(sum(p.numel() for p in net.parameters()), d["totals"]["params"])
            net(torch.randn(2, 3, 16, 16), check_shapes=True)
            desc = os.path.join(tmp, "vit-step.json")
            with open(desc, "w") as f:
                json.dump(d, f)
            r = subprocess.run([sys.executable, SCRIPT, desc, "--device", "cpu", "--steps", "2",
                                "--warmup", "1", "--batch", "2"], capture_output=True, text=True,
                               timeout=300)
            self.assertEqual(r.returncode, 0, r.stderr)
            j = json.loads(r.stdout.splitlines()[0])
            self.assertEqual(j["params"], d["totals"]["params"])
            self.assertTrue(math.isfinite(j["loss_last"]))

    def test_vision_transformer_layers_are_their_definitions(self):
        # 2 examples of 3 channels x 2 x 2 positions, read as a sequence of 4.
        x = torch.randn(2, 3, 2, 2, dtype=torch.float64)
        cls = torch_step.ClassToken(3, 2, sequence=False).double()
        self.assertTrue(torch.equal(cls.tokens, torch.zeros(1, 3, 2, dtype=torch.float64)))
        with torch.no_grad():
            cls.tokens.uniform_(-1, 1)
            y = cls(x)
        self.assertEqual(list(y.shape), [2, 3, 6, 1])
        for e in range(2):
            for c in range(3):
                self.assertEqual(y[e, c, :2, 0].tolist(), cls.tokens[0, c].tolist())
                self.assertEqual(y[e, c, 2:, 0].tolist(), x[e, c].flatten().tolist())
        pos = torch_step.PosEmbedding([3, 6, 1], sequence=False).double()
        self.assertLess(abs(float(torch_step.PosEmbedding([64, 32, 32], False).table.std()) - 0.02),
                        1e-3)
        with torch.no_grad():
            torch.testing.assert_close(pos(y), y + pos.table[None])
        # Position 3 of each channel: x's position 1 (h 0, w 1), after the 2 tokens.
        picked = torch_step.token_of(y, 3, sequence=False)
        self.assertEqual(list(picked.shape), [2, 3, 1, 1])
        self.assertTrue(torch.equal(picked[:, :, 0, 0], x[:, :, 0, 1]))
        # Attention over strata's C x T x 1 is Attention over (T, C).
        a = torch_step.ChannelAttention(3, 1, causal=False, bias=True).double()
        with torch.no_grad():
            want = torch_step.Attention.forward(a, y[:, :, :, 0].transpose(1, 2))
            torch.testing.assert_close(a(y)[:, :, :, 0], want.transpose(1, 2))
        # The sequence layout (batch, T, C): tokens first, the token a (batch, 1, C).
        s = torch.randn(2, 4, 3, dtype=torch.float64)
        seq = torch_step.ClassToken(3, 1, sequence=True).double()
        self.assertEqual(list(seq(s).shape), [2, 5, 3])
        self.assertTrue(torch.equal(torch_step.token_of(seq(s), 2, sequence=True)[:, 0], s[:, 1]))

    def test_vision_network_builds_with_strata_shapes_and_trains(self):
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "vision-step.yaml")
            with open(path, "w") as f:
                f.write(VISION)
            d = describe(path)
            # 18 -> 9 with ceil_mode: (18 - 3) / 2 = 7.5 rounded up, + 1 (down: 8).
            self.assertEqual(next(l for l in d["layers"] if l["name"] == "pool")["output"],
                             [8, 9, 9])
            net = torch_step.build_net(d)
            x = torch.randn(2, 3, 18, 18)
            net(x, check_shapes=True)
            self.assertEqual(sum(p.numel() for p in net.parameters()), d["totals"]["params"])
            desc = os.path.join(tmp, "vision-step.json")
            with open(desc, "w") as f:
                json.dump(d, f)
            r = subprocess.run([sys.executable, SCRIPT, desc, "--device", "cpu", "--steps", "2",
                                "--warmup", "1", "--batch", "2"], capture_output=True, text=True,
                               timeout=300)
            self.assertEqual(r.returncode, 0, r.stderr)
            j = json.loads(r.stdout.splitlines()[0])
            self.assertEqual(j["params"], d["totals"]["params"])
            self.assertTrue(math.isfinite(j["loss_last"]))

    def test_activations_are_their_definitions(self):
        x = torch.linspace(-8, 8, 161, dtype=torch.float64)
        relu6 = lambda v: torch.clamp(v, 0, 6)  # noqa: E731
        sig = 1 / (1 + torch.exp(-x))
        want = {"sigmoid": sig, "silu": x * sig, "relu6": relu6(x),
                "hardsigmoid": relu6(x + 3) / 6, "hardswish": x * relu6(x + 3) / 6}
        for kind, expected in want.items():
            got = torch_step.ACTIVATIONS[kind]()(x)
            self.assertLess(float((got - expected).abs().max()), 1e-12, kind)

    def test_shuffle_is_torchvisions_channel_shuffle(self):
        from torchvision.models.shufflenetv2 import channel_shuffle
        x = torch.randn(2, 12, 3, 5)
        for groups in (1, 2, 3, 4, 12):
            self.assertTrue(torch.equal(torch_step.channel_shuffle(x, groups, False),
                                        channel_shuffle(x, groups)), groups)

    def test_torchvision_models_from_onnx_keep_their_parameters(self):
        zoo = os.path.join(ROOT, "tests", "fixtures", "onnx", "torchvision")
        for name, params in (("googlenet", 6624904), ("mobilenet_v3_small", 2542856),
                             ("shufflenet_v2_x0_5", 1366792), ("convnext_tiny", 28589128)):
            r = subprocess.run([args.strata, "describe", os.path.join(zoo, f"{name}.onnx"),
                                "--format", "json"], capture_output=True, text=True)
            if "without ONNX support" in r.stderr:
                self.skipTest("this strata was built without ONNX")
            self.assertEqual(r.returncode, 0, r.stderr)
            d = json.loads(r.stdout)
            net = torch_step.build_net(d)
            net.eval()
            with torch.no_grad():
                net(torch.randn(1, 3, 224, 224), check_shapes=True)
            self.assertEqual(sum(p.numel() for p in net.parameters()), params)


class OnTheCpu(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp()
        cls.described = {}
        for net in ("tiny-gpt", "tiny-cnn"):
            cls.described[net] = describe(net)
            with open(os.path.join(cls.tmp, f"{net}.json"), "w") as f:
                json.dump(cls.described[net], f)

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp)

    def step(self, net, *options):
        r = subprocess.run([sys.executable, SCRIPT, os.path.join(self.tmp, f"{net}.json"),
                            "--device", "cpu", "--steps", "2", "--warmup", "1", "--batch", "2",
                            *options], capture_output=True, text=True, timeout=300)
        self.assertEqual(r.returncode, 0, r.stderr)
        lines = r.stdout.splitlines()
        self.assertEqual(len(lines), 1, r.stdout)
        return json.loads(lines[0])

    def test_parameters_and_json_line(self):
        for net, positions in (("tiny-gpt", 32), ("tiny-cnn", 1)):
            j = self.step(net)
            self.assertEqual(j["network"], net)
            self.assertEqual(j["params"], self.described[net]["totals"]["params"])
            self.assertEqual((j["device"], j["batch"], j["precision"], j["optimizer"], j["lr"]),
                             ("cpu", 2, "fp32", "momentum", 0.01))
            self.assertEqual(j["positions"], positions)
            self.assertEqual(j["steps_timed"], 1)
            self.assertEqual(j["median_step_ms"], j["min_step_ms"])
            self.assertGreater(j["median_step_ms"], 0)
            self.assertTrue(math.isfinite(j["loss_first"]) and math.isfinite(j["loss_last"]))
            self.assertIsNone(j["peak_memory_bytes"])
        # tiny-gpt starts near ln(vocab) = ln 512 (strata's init: 6.75 on its data).
        self.assertLess(abs(self.step("tiny-gpt")["loss_first"] - math.log(512)), 1.5)

    def test_precision_and_optimizers(self):
        j = self.step("tiny-gpt", "--bf16", "--optimizer", "adam", "--no-dropout")
        self.assertEqual((j["precision"], j["optimizer"], j["lr"]), ("bf16", "adam", 0.001))
        j = self.step("tiny-cnn", "--optimizer", "adamw", "--lr", "0.002")
        self.assertEqual((j["optimizer"], j["lr"]), ("adamw", 0.002))
        j = self.step("tiny-cnn", "--optimizer", "sgd", "--bf16")
        self.assertEqual((j["precision"], j["optimizer"]), ("bf16", "sgd"))

    def test_usage_mistakes(self):
        for options, message in ((["--tf32"], "--tf32 needs --device cuda"),
                                 (["--steps", "2", "--warmup", "2"], "--steps > --warmup"),
                                 (["--tf32", "--bf16"], "not allowed with argument")):
            r = subprocess.run([sys.executable, SCRIPT, os.path.join(self.tmp, "tiny-cnn.json"),
                                "--device", "cpu", *options], capture_output=True, text=True)
            self.assertEqual(r.returncode, 2, options)
            self.assertIn(message, r.stderr)

    def test_a_shape_strata_does_not_have_is_refused(self):
        d = json.loads(json.dumps(self.described["tiny-gpt"]))
        d["layers"][2]["output"] = [64, 16, 1]  # h.1.attn
        net = torch_step.build_net(d)
        x = torch_step.synthetic_batch(d, 2, "cpu")
        with self.assertRaises(SystemExit) as e:
            net(x, check_shapes=True)
        self.assertIn("layer 'h.1.attn' gives [64, 32, 1], strata says [64, 16, 1]",
                      str(e.exception))

    def test_non_causal_attention_trains(self):
        d = json.loads(json.dumps(self.described["tiny-gpt"]))
        for layer in d["layers"]:
            if layer["kind"] == "attention":
                layer["spec"]["causal"] = False
        path = os.path.join(self.tmp, "tiny-gpt-bidirectional.json")
        with open(path, "w") as f:
            json.dump(d, f)
        r = subprocess.run([sys.executable, SCRIPT, path, "--device", "cpu", "--steps", "2",
                            "--warmup", "1", "--batch", "2"], capture_output=True, text=True)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(json.loads(r.stdout)["params"], d["totals"]["params"])


def attention_reference(x, wqkv, bqkv, wo, bo, heads, causal):
    """backend.h's AttentionDesc, per example, x (d, T) as strata holds it:
    QKV = Wqkv x + bqkv; P_h = softmax(Q_h^T K_h / sqrt(dh)) per query row, keys
    after the query masked when causal; C_h = V_h P_h^T; y = Wo C + bo."""
    d, t = x.shape
    dh = d // heads
    qkv = wqkv @ x + bqkv[:, None]
    q, k, v = qkv[:d], qkv[d:2 * d], qkv[2 * d:]
    c = torch.zeros(d, t, dtype=x.dtype)
    for h in range(heads):
        rows = slice(h * dh, (h + 1) * dh)
        s = q[rows].T @ k[rows] / math.sqrt(dh)  # (query, key)
        if causal:
            for i in range(t):
                s[i, i + 1:] = float("-inf")
        p = torch.softmax(s, dim=1)
        c[rows] = v[rows] @ p.T
    return wo @ c + bo[:, None]


class Layers(unittest.TestCase):
    def setUp(self):
        torch.manual_seed(3)

    def test_attention_is_attention_desc(self):
        d, t, b = 8, 5, 3
        x = torch.randn(b, t, d, dtype=torch.float64)
        paths = [False] + ([True] if hasattr(F, "scaled_dot_product_attention") else [])
        for heads in (1, 4):
            for causal in (True, False):
                for fused in paths:
                    a = torch_step.Attention(d, heads, causal, bias=True).double()
                    for p in a.parameters():
                        torch.nn.init.uniform_(p, -1, 1)
                    a.fused = fused
                    with torch.no_grad():
                        y = a(x)
                        for e in range(b):
                            want = attention_reference(
                                x[e].T, a.qkv.weight, a.qkv.bias, a.out.weight, a.out.bias,
                                heads, causal)
                            torch.testing.assert_close(y[e].T, want, rtol=1e-10, atol=1e-10,
                                                       msg=f"heads {heads} causal {causal}")
        # 4 d^2 + 4 d parameters with biases, 4 d^2 without: strata's count.
        self.assertEqual(torch_step.parameter_count(torch_step.Attention(8, 2, True, True)), 288)
        self.assertEqual(torch_step.parameter_count(torch_step.Attention(8, 2, True, False)), 256)

    def test_causal_output_ignores_later_positions(self):
        a = torch_step.Attention(8, 2, causal=True, bias=True).double()
        x = torch.randn(1, 6, 8, dtype=torch.float64)
        x2 = x.clone()
        x2[0, 4:] += 1.0
        with torch.no_grad():
            torch.testing.assert_close(a(x)[0, :4], a(x2)[0, :4])
            self.assertFalse(torch.allclose(a(x)[0, 4:], a(x2)[0, 4:]))

    def test_embedding_adds_positions(self):
        e = torch_step.Embedding(vocab=7, features=4, positions=5)
        ids = torch.tensor([[3, 0, 6, 3, 1]]).reshape(1, 1, 5, 1)
        with torch.no_grad():
            y = e(ids)
            for t, token in enumerate([3, 0, 6, 3, 1]):
                torch.testing.assert_close(y[0, t], e.tok.weight[token] + e.pos[t])
        self.assertEqual(torch_step.parameter_count(e), 7 * 4 + 5 * 4)
        self.assertIsNone(torch_step.Embedding(7, 4, 0).pos)

    def test_layernorm_and_gelu(self):
        layer = {"name": "ln", "kind": "layernorm", "spec": {}, "input_shape": [6, 3, 1]}
        ln = torch_step.module_of(layer, sequence=True).double()
        torch.nn.init.uniform_(ln.weight, 0.5, 2)
        torch.nn.init.uniform_(ln.bias, -1, 1)
        x = torch.randn(2, 3, 6, dtype=torch.float64)
        mean = x.mean(dim=2, keepdim=True)
        var = ((x - mean) ** 2).mean(dim=2, keepdim=True)
        with torch.no_grad():
            torch.testing.assert_close(ln(x), (x - mean) / torch.sqrt(var + 1e-5) * ln.weight
                                       + ln.bias)
        gelu = torch_step.module_of({"name": "g", "kind": "gelu", "spec": {},
                                     "input_shape": [6, 3, 1]}, sequence=True)
        z = torch.linspace(-4, 4, 41, dtype=torch.float64)
        torch.testing.assert_close(gelu(z), 0.5 * z * (1 + torch.tanh(
            math.sqrt(2 / math.pi) * (z + 0.044715 * z ** 3))))

    def test_tied_fc_reads_and_trains_the_one_table(self):
        d = describe("tiny-gpt")
        net = torch_step.build_net(d)
        table = net.mods["wte"].tok.weight
        self.assertIs(net.mods["lm_head"].weight, table)
        self.assertEqual(torch_step.parameter_count(net), d["totals"]["params"])
        x = torch_step.synthetic_batch(d, 2, "cpu")
        logits = net(x)
        self.assertEqual(list(logits.shape), [2, 32, 512])
        # Both uses add into the table's gradient: the lm_head's alone is
        # x^T dlogits over every position, which reaches every row.
        labels = net.random_labels(logits)
        net.loss(logits, labels).backward()
        self.assertEqual(int((table.grad.abs().sum(dim=1) > 0).sum()), 512)

    def test_loss_is_the_mean_over_positions(self):
        d = describe("tiny-gpt")
        net = torch_step.build_net(d)
        logits = torch.randn(3, 32, 512)
        labels = torch.randint(0, 512, (3, 32))
        logp = torch.log_softmax(logits.double(), dim=2)
        want = -sum(logp[b, t, labels[b, t]] for b in range(3) for t in range(32)) / (3 * 32)
        torch.testing.assert_close(net.loss(logits, labels).double(), want, rtol=1e-6,
                                   atol=1e-6)


if __name__ == "__main__":
    unittest.main(argv=[sys.argv[0]] + rest)
