// Loads networks from YAML (schema in docs/configs.md) and expands the blocks:
// `bottleneck` into the layers of a ResNet bottleneck, `transformer` into a
// pre-LN GPT-2 block's and `llama` into a Llama block's.
#include "strata/model/network_loader.h"

#include <fmt/format.h>

#include <algorithm>
#include <filesystem>
#include <limits>
#include <unordered_map>

#include "config_node.h"
#include "network_from_config.h"
#include "strata/model/checked.h"
#include "strata/model/error.h"
#include "strata/model/layer_kinds.h"
#include "strata/model/limits.h"
#include "strata/model/network.h"

namespace strata {

namespace {

// A layer before its shapes are known: inputs still named.
struct RawLayer {
  Layer layer;
  std::vector<std::string> inputNames;  // empty: the previous layer
  std::string tiedName;                 // fc: the embedding whose table it shares
  bool startsBlock = false;             // first layer of an expanded block's repeat
  int index = 0;                        // index in the file's `layers` list
};

LayerKind parseKind(const ConfigNode& n) {
  const auto s = n.asString();
  if (const auto kind = parseLayerKind(s))
    return *kind;
  n.fail("unknown layer kind '" + s + "' (expected " + layerKindNames() +
         ", bottleneck, transformer, llama)");
}

void readKernel(const ConfigNode& n, LayerSpec& spec, bool required) {
  if (auto k = n.get("kernel")) {
    spec.kernelH = spec.kernelW = k->asPositiveInt();
  } else if (n.has("kernel_h") || n.has("kernel_w")) {
    spec.kernelH = n.require("kernel_h").asPositiveInt();
    spec.kernelW = n.require("kernel_w").asPositiveInt();
  } else if (required) {
    n.require("kernel");
  }
}

// An RMSNorm's epsilon: positive and small (Llama 2 uses 1e-5, and 1e-6
// for some releases).
double readEps(const ConfigNode& n) {
  const double eps = n.asDouble();
  if (!(eps > 0 && eps < 1))
    n.fail(fmt::format("must be in (0, 1), got {}", eps));
  return eps;
}

// The base of rotary positions' angles: above 1 (10000 in Su et al. 2021 and
// Llama 2, 500000 in Llama 3).
double readRotaryBase(const ConfigNode& n) {
  const double base = n.asDouble();
  if (!(base > 1))
    n.fail(fmt::format("must be over 1, got {}", base));
  return base;
}

// An attention layer's or block's implementation of its core: `fused`
// (FlashAttention: the scores never reach memory; default false, the core
// as separate GEMM, softmax and dropout kernels) and `attention_dropout`,
// the rate of dropout on the probabilities, in [0, 1) (default 0).
void readAttentionCore(const ConfigNode& n, LayerSpec& spec) {
  spec.fusedCore = n.boolOr("fused", false);
  if (auto r = n.get("attention_dropout")) {
    spec.attentionDropout = r->asDouble();
    if (spec.attentionDropout < 0 || spec.attentionDropout >= 1)
      r->fail(fmt::format("must be in [0, 1), got {}", spec.attentionDropout));
  }
}

// An attention's windows (Swin): window, shift, position_bias and cosine;
// its grid (MaxViT): grid.
void readWindows(const ConfigNode& n, LayerSpec& spec) {
  spec.window = n.nonNegativeIntOr("window", 0);  // checkWindows (layer_kinds.cpp)
  spec.grid = n.nonNegativeIntOr("grid", 0);
  spec.shift = n.nonNegativeIntOr("shift", 0);
  if (auto b = n.get("position_bias")) {
    const auto v = b->asString();
    if (v == "none") {
      spec.positionBias = PositionBias::kNone;
    } else if (v == "table") {
      spec.positionBias = PositionBias::kTable;
    } else if (v == "mlp") {
      spec.positionBias = PositionBias::kMlp;
    } else {
      b->fail("unknown position_bias '" + v +
              "' (expected none, table: Swin's learned table, or mlp: Swin V2's continuous "
              "position bias)");
    }
  }
  spec.cosine = n.boolOr("cosine", false);
}

RawLayer readLayer(const ConfigNode& n, LayerKind kind, int index) {
  RawLayer raw;
  raw.index = index;
  Layer& l = raw.layer;
  l.kind = kind;
  l.configLine = n.line();
  l.name = n.require("name").asString();
  // The keys of every layer, then its kind's (layer_kinds.cpp).
  std::vector<std::string_view> allowed{"name", "kind"};
  const auto keys = layerKindRow(kind).keys;
  allowed.insert(allowed.end(), keys.begin(), keys.end());
  n.allowOnly(allowed);
  // Each kind's keys, read from the YAML node.
  auto& s = l.spec;
  switch (kind) {
    case LayerKind::kConv:
      s.filters = n.require("filters").asPositiveInt();
      readKernel(n, s, true);
      s.stride = n.positiveIntOr("stride", 1);
      s.pad = n.nonNegativeIntOr("pad", 0);
      if (auto w = n.get("pad_w"))
        s.padW = w->asNonNegativeInt();
      s.dilation = n.positiveIntOr("dilation", 1);
      s.groups = n.positiveIntOr("groups", 1);
      s.bias = n.boolOr("bias", true);
      break;
    case LayerKind::kPool: {
      const auto mode = n.require("mode");
      const auto m = mode.asString();
      if (m == "max") {
        s.poolMode = PoolMode::kMax;
      } else if (m == "avg") {
        s.poolMode = PoolMode::kAvg;
      } else {
        mode.fail("unknown pool mode '" + m + "' (expected max or avg)");
      }
      s.global = n.boolOr("global", false);
      readKernel(n, s, !s.global);
      s.stride = n.positiveIntOr("stride", s.global ? 1 : s.kernelH);
      s.pad = n.nonNegativeIntOr("pad", 0);
      s.ceilMode = n.boolOr("ceil_mode", false);  // max pooling only: derivePool
      break;
    }
    case LayerKind::kFc:
      s.outputs = n.require("outputs").asPositiveInt();
      s.bias = n.boolOr("bias", true);
      s.flatten = n.boolOr("flatten", true);
      if (auto t = n.get("tied")) {
        raw.tiedName = t->asString();
        if (s.flatten)
          t->fail(
              "a tied fc applies the embedding's table at each position: it needs "
              "flatten: false");
      }
      break;
    case LayerKind::kEmbedding:
      s.vocab = n.require("vocab").asPositiveInt();
      s.outputs = n.require("outputs").asPositiveInt();
      s.positions = n.nonNegativeIntOr("positions", 0);
      break;
    case LayerKind::kAttention:
      s.heads = n.require("heads").asPositiveInt();
      s.causal = n.boolOr("causal", true);
      s.qkvBias = n.boolOr("qkv_bias", false);
      s.bias = n.boolOr("bias", !s.qkvBias);
      if (s.bias && s.qkvBias)
        n.require("qkv_bias")
            .fail(
                "qkv_bias is the Q, K and V projections' biases alone; bias: true has them "
                "and the output projection's (give one)");
      s.kvHeads = n.positiveIntOr("kv_heads", s.heads);  // divides heads: deriveAttention
      s.rotary = n.boolOr("rotary", false);
      if (auto base = n.get("rotary_base")) {
        if (!s.rotary)
          base->fail("rotary_base applies only with rotary: true");
        s.rotaryBase = readRotaryBase(*base);
      }
      s.rotaryDims = n.positiveIntOr("rotary_dims", 0);  // with rotary, even: deriveAttention
      readAttentionCore(n, s);
      readWindows(n, s);
      break;
    case LayerKind::kSpaceToDepth:
      s.blockSize = n.positiveIntOr("block_size", 2);  // at most 64: deriveSpaceToDepth
      break;
    case LayerKind::kRmsNorm:
      if (auto eps = n.get("eps"))
        s.eps = readEps(*eps);
      break;
    case LayerKind::kRnn: {
      s.hidden = n.require("hidden").asPositiveInt();
      s.bias = n.boolOr("bias", true);
      if (auto c = n.get("cell")) {
        const auto v = c->asString();
        if (v == "vanilla") {
          s.cell = RnnCell::kVanilla;
        } else if (v == "gru") {
          s.cell = RnnCell::kGru;
        } else if (v == "lstm") {
          s.cell = RnnCell::kLstm;
        } else {
          c->fail("unknown cell '" + v + "' (expected vanilla, gru or lstm)");
        }
      }
      break;
    }
    case LayerKind::kLrn:
      s.lrnSize = n.positiveIntOr("size", 5);
      break;
    case LayerKind::kDropout:
      if (auto r = n.get("rate")) {
        s.dropoutRate = r->asDouble();  // finite and not denormal
        if (s.dropoutRate < 0 || s.dropoutRate >= 1)
          r->fail(fmt::format("must be in [0, 1), got {}", s.dropoutRate));
      }
      break;
    case LayerKind::kAdd:
    case LayerKind::kConcat:
    case LayerKind::kMul: {
      const auto ins = n.require("inputs");
      const auto items = ins.items();
      const std::string kindName(toString(kind));
      if (kind == LayerKind::kMul && items.size() != 2)
        ins.fail("a mul needs two inputs: x and its gate (x's shape, or one value per channel)");
      if (items.size() < 2)
        ins.fail("a" + std::string(kind == LayerKind::kAdd ? "n " : " ") + kindName +
                 " needs at least two inputs");
      for (const auto& i : items) {
        const std::string name = i.asString();
        // Counted once or twice? An add of a layer with itself is 2x, which a
        // scale says better; a repeated name is read as a typo.
        if (std::find(raw.inputNames.begin(), raw.inputNames.end(), name) != raw.inputNames.end())
          i.fail("input '" + name + "' is listed twice: each input of a" +
                 std::string(kind == LayerKind::kAdd ? "n " : " ") + kindName +
                 " is another layer");
        raw.inputNames.push_back(name);
      }
      break;
    }
    case LayerKind::kSlice:
      s.offset = n.nonNegativeIntOr("offset", 0);
      s.channels = n.require("channels").asPositiveInt();
      break;
    case LayerKind::kShuffle:
      s.groups = n.require("groups").asPositiveInt();
      break;
    case LayerKind::kClassToken:
      s.tokens = n.positiveIntOr("tokens", 1);
      break;
    case LayerKind::kToken:
      s.index = n.nonNegativeIntOr("index", 0);  // below the positions: deriveToken
      break;
    case LayerKind::kPosEmbedding:
    case LayerKind::kRelu:
    case LayerKind::kBatchNorm:
    case LayerKind::kSoftmax:
    case LayerKind::kLayerNorm:
    case LayerKind::kGelu:
    case LayerKind::kSwiglu:
    case LayerKind::kSigmoid:
    case LayerKind::kSilu:
    case LayerKind::kRelu6:
    case LayerKind::kHardSigmoid:
    case LayerKind::kHardSwish:
    case LayerKind::kTanh:
    case LayerKind::kScale:
      break;
  }
  if (auto in = n.get("input"))
    raw.inputNames = {in->asString()};
  return raw;
}

// One layer of a block the loader expands from config node `n` (the file's
// `index`-th layer); `starts`: the first layer of one of its repeats.
RawLayer blockLayer(const ConfigNode& n, int index, const std::string& name, LayerKind kind,
                    std::vector<std::string> inputs, const LayerSpec& spec, bool starts) {
  RawLayer raw;
  raw.index = index;
  raw.layer.name = name;
  raw.layer.kind = kind;
  raw.layer.spec = spec;
  raw.layer.configLine = n.line();
  raw.inputNames = std::move(inputs);
  raw.startsBlock = starts;
  return raw;
}

// Expands `bottleneck` (ResNet v1.5: stride on the 3x3 conv) into its layers.
void expandBottleneck(const ConfigNode& n, int index, std::vector<RawLayer>& out) {
  n.allowOnly({"name", "kind", "input", "mid", "outputs", "stride", "repeat"});
  const auto name = n.require("name").asString();
  const int mid = n.require("mid").asPositiveInt();
  const int outputs = n.require("outputs").asPositiveInt();
  const int stride = n.positiveIntOr("stride", 1);
  const int repeat = n.positiveIntOr("repeat", 1);
  // 11 layers per block, 13 for the first: bounded before expanding.
  if (int64_t{repeat} * 11 + 2 + static_cast<int64_t>(out.size()) > kMaxNetworkLayers)
    n.require("repeat").fail(fmt::format(
        "{} blocks would make more than {} layers; the largest real networks have a few thousand",
        repeat, kMaxNetworkLayers));
  std::string prev = n.has("input") ? n.require("input").asString() : "";
  auto add = [&](const std::string& layerName, LayerKind kind, std::vector<std::string> inputs,
                 LayerSpec spec) {
    out.push_back(blockLayer(n, index, layerName, kind, std::move(inputs), spec,
                             layerName.ends_with(".conv1")));
  };
  auto conv = [](int filters, int k, int s, int pad) {
    LayerSpec spec;
    spec.filters = filters;
    spec.kernelH = spec.kernelW = k;
    spec.stride = s;
    spec.pad = pad;
    spec.bias = false;  // followed by batchnorm (He et al. 2015)
    return spec;
  };
  for (int r = 1; r <= repeat; ++r) {
    const std::string b = repeat == 1 ? name : fmt::format("{}.{}", name, r);
    const int s = r == 1 ? stride : 1;
    // The block's input: the previous layer (resolved later when empty).
    std::vector<std::string> blockIn =
        prev.empty() ? std::vector<std::string>{} : std::vector<std::string>{prev};
    add(b + ".conv1", LayerKind::kConv, blockIn, conv(mid, 1, 1, 0));
    add(b + ".bn1", LayerKind::kBatchNorm, {}, {});
    add(b + ".relu1", LayerKind::kRelu, {}, {});
    add(b + ".conv2", LayerKind::kConv, {}, conv(mid, 3, s, 1));
    add(b + ".bn2", LayerKind::kBatchNorm, {}, {});
    add(b + ".relu2", LayerKind::kRelu, {}, {});
    add(b + ".conv3", LayerKind::kConv, {}, conv(outputs, 1, 1, 0));
    add(b + ".bn3", LayerKind::kBatchNorm, {}, {});
    // The shortcut: a projection on the first block (its input shape differs
    // in channels or size in every ResNet-50 stage), identity afterwards.
    std::string shortcut = "@block-input";
    if (r == 1) {
      add(b + ".proj", LayerKind::kConv, {"@block-input"}, conv(outputs, 1, s, 0));
      add(b + ".projbn", LayerKind::kBatchNorm, {}, {});
      shortcut = b + ".projbn";
    }
    add(b + ".add", LayerKind::kAdd, {b + ".bn3", shortcut}, {});
    add(b + ".relu", LayerKind::kRelu, {}, {});
    prev = b + ".relu";
  }
}

// Expands `transformer` (a pre-LN GPT-2 block: Radford et al. 2019, section
// 2.3, and openai/gpt-2 src/model.py) into its layers:
//   ln1 -> attn -> [drop1] -> add1 (+ block input) -> ln2 -> fc1 (hidden)
//   -> gelu -> fc2 (back to the width) -> [drop2] -> add2 (+ add1).
// parallel: GPT-J's and GPT-NeoX's parallel residual (Black et al. 2022,
// section 2.1; transformers' GPTNeoXLayer with use_parallel_residual), the
// MLP reading the block input beside the attention, one add of the three:
//   ln1 -> attn -> [drop1]; ln2 (block input) -> fc1 -> gelu -> fc2 ->
//   [drop2]; add (block input + attn + MLP).
// rotary, rotary_dims, rotary_base: its attention's rotary positions.
// window (or grid), position_bias, cosine: its attention's windows (Swin;
// MaxViT's block and grid attention), and shift
// the windows of every second block (repeats 2, 4, ...), as Swin alternates
// W-MSA and SW-MSA (Liu et al. 2021, section 3.2 and eq. 3). norm: post puts
// each layernorm after its branch, inside the residual (Swin V2's res-post-
// norm, Liu et al. 2022, section 3.1):
//   attn -> [drop1] -> ln1 -> add1 (+ block input) -> fc1 -> gelu -> fc2
//   -> [drop2] -> ln2 -> add2 (+ add1).
void expandTransformer(const ConfigNode& n, int index, std::vector<RawLayer>& out) {
  n.allowOnly({"name",        "kind",          "input",
               "heads",       "hidden",        "dropout",
               "causal",      "fused",         "attention_dropout",
               "parallel",    "rotary",        "rotary_dims",
               "rotary_base", "window",        "grid",
               "shift",       "position_bias", "cosine",
               "norm",        "repeat"});
  const auto name = n.require("name").asString();
  const int heads = n.require("heads").asPositiveInt();
  const int hidden = n.require("hidden").asPositiveInt();
  const bool causal = n.boolOr("causal", true);
  const bool parallel = n.boolOr("parallel", false);
  const int repeat = n.positiveIntOr("repeat", 1);
  double rate = 0;
  if (auto r = n.get("dropout")) {
    rate = r->asDouble();
    if (rate < 0 || rate >= 1)
      r->fail(fmt::format("must be in [0, 1), got {}", rate));
  }
  if (int64_t{repeat} * 10 + static_cast<int64_t>(out.size()) > kMaxNetworkLayers)
    n.require("repeat").fail(fmt::format(
        "{} blocks would make more than {} layers; the largest real networks have a few thousand",
        repeat, kMaxNetworkLayers));
  std::string prev = n.has("input") ? n.require("input").asString() : "";
  auto add = [&](const std::string& layerName, LayerKind kind, std::vector<std::string> inputs,
                 LayerSpec spec, bool starts = false) {
    out.push_back(blockLayer(n, index, layerName, kind, std::move(inputs), spec, starts));
  };
  LayerSpec attention;
  attention.heads = heads;
  attention.causal = causal;
  readAttentionCore(n, attention);
  attention.rotary = n.boolOr("rotary", false);
  for (const char* key : {"rotary_dims", "rotary_base"})
    if (auto v = n.get(key); v && !attention.rotary)
      v->fail(std::string(key) + " applies only with rotary: true");
  attention.rotaryDims = n.positiveIntOr("rotary_dims", 0);  // even, <= dh: deriveAttention
  if (auto base = n.get("rotary_base"))
    attention.rotaryBase = readRotaryBase(*base);
  readWindows(n, attention);
  bool postNorm = false;
  if (auto norm = n.get("norm")) {
    const auto v = norm->asString();
    if (v != "pre" && v != "post")
      norm->fail("unknown norm '" + v +
                 "' (expected pre: GPT-2's layernorm before each branch, or post: Swin V2's "
                 "after it)");
    postNorm = v == "post";
    if (postNorm && parallel)
      norm->fail(
          "norm: post puts a layernorm after each of two branches in turn; a parallel "
          "block has one residual add of both (give one)");
  }
  LayerSpec shifted = attention;
  attention.shift = 0;  // the odd repeats; shifted: the even ones
  LayerSpec dropout;
  dropout.dropoutRate = rate;
  auto fc = [](int outputs) {
    LayerSpec spec;
    spec.outputs = outputs;
    spec.flatten = false;  // the same weights at every position
    return spec;
  };
  for (int r = 1; r <= repeat; ++r) {
    const std::string b = repeat == 1 ? name : fmt::format("{}.{}", name, r);
    std::vector<std::string> blockIn =
        prev.empty() ? std::vector<std::string>{} : std::vector<std::string>{prev};
    const LayerSpec& attn = r % 2 == 0 ? shifted : attention;
    if (postNorm) {
      add(b + ".attn", LayerKind::kAttention, blockIn, attn, true);
      if (rate > 0)
        add(b + ".drop1", LayerKind::kDropout, {}, dropout);
      add(b + ".ln1", LayerKind::kLayerNorm, {}, {});
      add(b + ".add1", LayerKind::kAdd, {"@block-input", b + ".ln1"}, {});
      add(b + ".fc1", LayerKind::kFc, {}, fc(hidden));
      add(b + ".gelu", LayerKind::kGelu, {}, {});
      add(b + ".fc2", LayerKind::kFc, {}, fc(-1));  // width: set when the input is known
      if (rate > 0)
        add(b + ".drop2", LayerKind::kDropout, {}, dropout);
      add(b + ".ln2", LayerKind::kLayerNorm, {}, {});
      add(b + ".add2", LayerKind::kAdd, {b + ".add1", b + ".ln2"}, {});
      prev = b + ".add2";
      continue;
    }
    add(b + ".ln1", LayerKind::kLayerNorm, blockIn, {}, true);
    add(b + ".attn", LayerKind::kAttention, {}, attn);
    if (rate > 0)
      add(b + ".drop1", LayerKind::kDropout, {}, dropout);
    if (parallel) {
      add(b + ".ln2", LayerKind::kLayerNorm, {"@block-input"}, {});
      add(b + ".fc1", LayerKind::kFc, {}, fc(hidden));
      add(b + ".gelu", LayerKind::kGelu, {}, {});
      add(b + ".fc2", LayerKind::kFc, {}, fc(-1));  // width: set when the input is known
      if (rate > 0)
        add(b + ".drop2", LayerKind::kDropout, {}, dropout);
      add(b + ".add", LayerKind::kAdd,
          {"@block-input", rate > 0 ? b + ".drop1" : b + ".attn",
           rate > 0 ? b + ".drop2" : b + ".fc2"},
          {});
      prev = b + ".add";
      continue;
    }
    add(b + ".add1", LayerKind::kAdd, {"@block-input", rate > 0 ? b + ".drop1" : b + ".attn"}, {});
    add(b + ".ln2", LayerKind::kLayerNorm, {}, {});
    add(b + ".fc1", LayerKind::kFc, {}, fc(hidden));
    add(b + ".gelu", LayerKind::kGelu, {}, {});
    add(b + ".fc2", LayerKind::kFc, {}, fc(-1));  // width: set when the input is known
    if (rate > 0)
      add(b + ".drop2", LayerKind::kDropout, {}, dropout);
    add(b + ".add2", LayerKind::kAdd, {b + ".add1", rate > 0 ? b + ".drop2" : b + ".fc2"}, {});
    prev = b + ".add2";
  }
}

// Expands `llama` (a Llama block: Touvron et al., "Llama 2: Open Foundation
// and Fine-Tuned Chat Models", 2023, section 2.2, and Hugging Face
// transformers' LlamaDecoderLayer) into its layers:
//   attn_norm (rmsnorm) -> attn (grouped-query, rotary, no bias) -> add1
//   (+ block input) -> mlp_norm (rmsnorm) -> gate_up (fc, 2 hidden, no bias:
//   the gate's f rows, then the up projection's) -> swiglu -> down (fc back
//   to the width, no bias) -> add2 (+ add1).
void expandLlama(const ConfigNode& n, int index, std::vector<RawLayer>& out) {
  n.allowOnly({"name", "kind", "input", "heads", "kv_heads", "hidden", "eps", "rotary_base",
               "qkv_bias", "fused", "attention_dropout", "repeat"});
  const auto name = n.require("name").asString();
  LayerSpec attention;
  attention.heads = n.require("heads").asPositiveInt();
  attention.kvHeads = n.positiveIntOr("kv_heads", attention.heads);
  attention.causal = true;
  attention.bias = false;
  attention.qkvBias = n.boolOr("qkv_bias", false);  // Qwen2
  attention.rotary = true;
  readAttentionCore(n, attention);
  if (auto base = n.get("rotary_base"))
    attention.rotaryBase = readRotaryBase(*base);
  const int hidden = n.require("hidden").asPositiveInt();
  if (hidden > std::numeric_limits<int>::max() / 2)
    n.require("hidden").fail(fmt::format("2 x {} gate and up rows are over {}", hidden,
                                         std::numeric_limits<int>::max()));
  LayerSpec norm;
  if (auto eps = n.get("eps"))
    norm.eps = readEps(*eps);
  const int repeat = n.positiveIntOr("repeat", 1);
  if (int64_t{repeat} * 8 + static_cast<int64_t>(out.size()) > kMaxNetworkLayers)
    n.require("repeat").fail(fmt::format(
        "{} blocks would make more than {} layers; the largest real networks have a few thousand",
        repeat, kMaxNetworkLayers));
  std::string prev = n.has("input") ? n.require("input").asString() : "";
  auto add = [&](const std::string& layerName, LayerKind kind, std::vector<std::string> inputs,
                 LayerSpec spec, bool starts = false) {
    out.push_back(blockLayer(n, index, layerName, kind, std::move(inputs), spec, starts));
  };
  auto fc = [](int outputs) {
    LayerSpec spec;
    spec.outputs = outputs;
    spec.flatten = false;  // the same weights at every position
    spec.bias = false;
    return spec;
  };
  for (int r = 1; r <= repeat; ++r) {
    const std::string b = repeat == 1 ? name : fmt::format("{}.{}", name, r);
    std::vector<std::string> blockIn =
        prev.empty() ? std::vector<std::string>{} : std::vector<std::string>{prev};
    add(b + ".attn_norm", LayerKind::kRmsNorm, blockIn, norm, true);
    add(b + ".attn", LayerKind::kAttention, {}, attention);
    add(b + ".add1", LayerKind::kAdd, {"@block-input", b + ".attn"}, {});
    add(b + ".mlp_norm", LayerKind::kRmsNorm, {}, norm);
    add(b + ".gate_up", LayerKind::kFc, {}, fc(2 * hidden));
    add(b + ".swiglu", LayerKind::kSwiglu, {}, {});
    add(b + ".down", LayerKind::kFc, {}, fc(-1));  // width: set when the input is known
    add(b + ".add2", LayerKind::kAdd, {b + ".add1", b + ".down"}, {});
    prev = b + ".add2";
  }
}

}  // namespace

std::string modelParallelObstacle(const Network& net, int from) {
  const auto& first = net.layers[static_cast<size_t>(from)];
  if (first.kind != LayerKind::kFc)
    return fmt::format("the model-parallel part starts at an fc layer; '{}' is {}", first.name,
                       toString(first.kind));
  if (first.spec.tiedTo >= 0)
    return fmt::format("'{}' shares its weights with the data-parallel embedding '{}'", first.name,
                       net.layers[static_cast<size_t>(first.spec.tiedTo)].name);
  for (size_t i = static_cast<size_t>(from) + 1; i < net.layers.size(); ++i) {
    const auto& l = net.layers[i];
    if (l.inputs.size() != 1 || l.inputs[0] != static_cast<int>(i) - 1)
      return fmt::format(
          "layers after '{}' must form a chain to run model-parallel; '{}' does not read the "
          "layer before it",
          first.name, l.name);
    if (l.spec.tiedTo >= 0)
      return fmt::format("'{}' shares its weights with the data-parallel embedding '{}'", l.name,
                         net.layers[static_cast<size_t>(l.spec.tiedTo)].name);
  }
  return "";
}

void findModelParallelPart(Network& net) {
  net.modelParallelFrom = -1;
  // The reason the last fc cannot start the part: the nearest miss.
  std::string lastWhy;
  for (size_t i = 0; i < net.layers.size(); ++i) {
    if (net.layers[i].kind != LayerKind::kFc)
      continue;
    const std::string why = modelParallelObstacle(net, static_cast<int>(i));
    if (why.empty()) {
      net.modelParallelFrom = static_cast<int>(i);
      net.noModelParallelWhy.clear();
      return;
    }
    lastWhy = why;
  }
  net.noModelParallelWhy = lastWhy.empty() ? "it has no fc layer" : lastWhy;
}

#ifndef STRATA_HAVE_ONNX
Network loadOnnxNetwork(const std::string& path) {
  throw ConfigError(path, 0, "",
                    "strata was built without ONNX support (install libonnx-dev and rebuild)");
}
#endif

Network loadNetwork(const std::string& path) {
  if (path.ends_with(".onnx"))
    return loadOnnxNetwork(path);
  if (path.ends_with(".json"))
    return loadHfConfigNetwork(path);
  return networkFromConfig(ConfigNode::loadFile(path), path,
                           std::filesystem::path(path).stem().string());
}

Network networkFromConfig(const ConfigNode& root, const std::string& path,
                          const std::string& expectedName) {
  root.allowOnly({"name", "description", "input", "layers", "model_parallel_from"});
  Network net;
  net.sourceFile = path;
  const auto nameNode = root.require("name");
  net.name = nameNode.asString();
  const auto& stem = expectedName;
  if (net.name != stem)
    nameNode.fail("name '" + net.name + "' must equal the file name '" + stem + "'");
  net.description = root.stringOr("description", "");
  const auto in = root.require("input");
  in.allowOnly({"channels", "height", "width"});
  net.input = Shape{in.require("channels").asPositiveInt(), in.require("height").asPositiveInt(),
                    in.require("width").asPositiveInt()};
  if (int64_t e = 0; !checkedMul(net.input.c, net.input.h, e, kMaxExactCount) ||
                     !checkedMul(e, net.input.w, e, kMaxExactCount))
    in.fail(
        fmt::format("{} x {} x {} elements per example is over 2^53 = {:.3g} (the largest "
                    "count strata computes with exactly)",
                    net.input.c, net.input.h, net.input.w, double(kMaxExactCount)));

  const auto layersNode = root.require("layers");
  const auto items = layersNode.items();
  if (items.empty())
    layersNode.fail("a network needs at least one layer");
  std::vector<RawLayer> raws;
  std::vector<ConfigNode> nodeOf;  // the config node each raw layer came from
  for (size_t i = 0; i < items.size(); ++i) {
    const auto& n = items[i];
    if (!n.isMap())
      n.fail("a layer must be a map of keys");
    const auto kindNode = n.require("kind");
    const size_t before = raws.size();
    if (kindNode.asString() == "bottleneck") {
      expandBottleneck(n, static_cast<int>(i), raws);
    } else if (kindNode.asString() == "transformer") {
      expandTransformer(n, static_cast<int>(i), raws);
    } else if (kindNode.asString() == "llama") {
      expandLlama(n, static_cast<int>(i), raws);
    } else {
      raws.push_back(readLayer(n, parseKind(kindNode), static_cast<int>(i)));
    }
    if (raws.size() > static_cast<size_t>(kMaxNetworkLayers))
      n.fail(
          fmt::format("the network has more than {} layers (after expanding bottleneck "
                      "blocks); the largest real networks have a few thousand",
                      kMaxNetworkLayers));
    for (size_t k = before; k < raws.size(); ++k)
      nodeOf.push_back(n);
  }

  std::unordered_map<std::string, int> indexOf;
  std::vector<Shape> shapes;
  std::string blockInput;  // the name a bottleneck's "@block-input" refers to
  int block = -1, blocks = 0;
  int64_t totalParams = 0;
  for (size_t i = 0; i < raws.size(); ++i) {
    auto& raw = raws[i];
    const auto& node = nodeOf[i];
    const std::string key = fmt::format("layers[{}]", raw.index);
    if (const auto first = indexOf.find(raw.layer.name); first != indexOf.end())
      throw ConfigError(path, node.line(), key + ".name",
                        fmt::format("duplicate layer name '{}' (first at line {})", raw.layer.name,
                                    nodeOf[static_cast<size_t>(first->second)].line()));
    const bool firstOfBlock = i == 0 || nodeOf[i - 1].line() != node.line() || raw.startsBlock;
    if (firstOfBlock)
      blockInput = i == 0 ? "input" : net.layers[i - 1].name;
    // Repeated blocks are numbered in order; a layer of its own is in none.
    if (raw.startsBlock)
      block = blocks++;
    else if (i == 0 || nodeOf[i - 1].line() != node.line())
      block = -1;
    raw.layer.block = block;
    if (raw.inputNames.empty())
      raw.inputNames = {i == 0 ? "input" : net.layers[i - 1].name};
    std::vector<Shape> inShapes;
    for (auto name : raw.inputNames) {
      if (name == "@block-input")
        name = blockInput;
      if (name == "input") {
        raw.layer.inputs.push_back(-1);
        inShapes.push_back(net.input);
        continue;
      }
      auto it = indexOf.find(name);
      if (it == indexOf.end())
        throw ConfigError(path, node.line(),
                          key + (raw.inputNames.size() > 1 ? ".inputs" : ".input"),
                          "unknown input layer '" + name + "' (must be defined earlier)");
      raw.layer.inputs.push_back(it->second);
      inShapes.push_back(shapes[static_cast<size_t>(it->second)]);
    }
    // A transformer (llama) block's fc2 (down) returns to the width of the
    // block's input.
    if (raw.layer.kind == LayerKind::kFc && raw.layer.spec.outputs < 0) {
      const auto it = blockInput == "input" ? indexOf.end() : indexOf.find(blockInput);
      raw.layer.spec.outputs =
          it == indexOf.end() ? net.input.c : shapes[static_cast<size_t>(it->second)].c;
    }
    if (!raw.tiedName.empty()) {
      auto it = indexOf.find(raw.tiedName);
      const std::string tiedKey = key + ".tied";
      if (it == indexOf.end() ||
          net.layers[static_cast<size_t>(it->second)].kind != LayerKind::kEmbedding)
        throw ConfigError(path, node.line(), tiedKey,
                          "'" + raw.tiedName + "' is not an embedding layer defined earlier");
      const Layer& e = net.layers[static_cast<size_t>(it->second)];
      if (raw.layer.spec.outputs != e.spec.vocab || inShapes.front().c != e.spec.outputs)
        throw ConfigError(
            path, node.line(), tiedKey,
            fmt::format("a fc of {} inputs and {} outputs cannot share the table of '{}' ({} "
                        "tokens of {} features)",
                        inShapes.front().c, raw.layer.spec.outputs, e.name, e.spec.vocab,
                        e.spec.outputs));
      raw.layer.spec.tiedTo = it->second;
    }
    deriveLayer(raw.layer, inShapes, path, raw.index);
    // Network totals are sums of layers: checked like the layers' own counts.
    if (!checkedAdd(totalParams, raw.layer.params, totalParams, kMaxExactCount))
      throw ConfigError(path, node.line(), key,
                        fmt::format("the network's parameters overflow at layer '{}': over 2^53 "
                                    "= {:.3g} (the largest count strata computes with exactly)",
                                    raw.layer.name, double(kMaxExactCount)));
    if (raw.layer.kind == LayerKind::kSoftmax && i + 1 != raws.size())
      throw ConfigError(path, node.line(), key + ".kind", "softmax must be the last layer");
    indexOf[raw.layer.name] = static_cast<int>(i);
    shapes.push_back(raw.layer.outShape);
    net.layers.push_back(std::move(raw.layer));
  }

  if (auto mp = root.get("model_parallel_from")) {
    net.modelParallelFrom = net.find(mp->asString());
    if (net.modelParallelFrom < 0)
      mp->fail("no layer named '" + mp->asString() + "'");
    if (const std::string why = modelParallelObstacle(net, net.modelParallelFrom); !why.empty())
      mp->fail(why);
  } else {
    findModelParallelPart(net);
  }
  return net;
}

}  // namespace strata
