// The layer-kind table (layer_kinds.h) and each kind's derive rule: shape,
// parameters, FLOPs and the elements each phase reads and writes, per example
// (docs/cost-model.md).
#include "strata/model/layer_kinds.h"

#include <fmt/format.h>

#include <algorithm>
#include <limits>

#include "strata/model/checked.h"
#include "strata/model/error.h"

namespace strata {

namespace {

// floor((in + 2 pad - kernel) / stride) + 1, or an error when it does not fit.
// In 64 bits: an input and a pad of up to 1e9 each do not fit an int. ceil:
// rounded up as PyTorch's ceil_mode, dropping a last window that would start
// beyond the input and its left padding.
int windowOutput(int in, int kernel, int stride, int pad, const std::string& what,
                 const std::string& file, const Layer& layer, const std::string& key,
                 bool ceil = false) {
  const int64_t padded = int64_t{in} + 2 * int64_t{pad};
  if (kernel > padded)
    throw ConfigError(file, layer.configLine, key,
                      fmt::format("{} {} is larger than the padded input {} (input {}, pad {})",
                                  what, kernel, padded, in, pad));
  int64_t out = (padded - kernel + (ceil ? stride - 1 : 0)) / stride + 1;
  if (ceil && (out - 1) * stride >= int64_t{in} + pad)
    --out;
  if (out > std::numeric_limits<int>::max())
    throw ConfigError(file, layer.configLine, key,
                      fmt::format("output size {} (input {}, pad {}) is larger than {}", out, in,
                                  pad, std::numeric_limits<int>::max()));
  return static_cast<int>(out);
}

// The product of `factors`, checked: a ConfigError naming the layer when it
// exceeds 2^53, the largest count the cost model computes with exactly.
int64_t countOf(std::initializer_list<int64_t> factors, const char* what, const std::string& file,
                const Layer& layer, const std::string& key) {
  int64_t r = 1;
  for (auto f : factors) {
    if (!checkedMul(r, f, r, kMaxExactCount)) {
      std::string product;
      double value = 1;
      for (auto g : factors) {
        product += (product.empty() ? "" : " x ") + std::to_string(g);
        value *= double(g);
      }
      throw ConfigError(file, layer.configLine, key,
                        fmt::format("{} of layer '{}' overflow: {} = {:.3g}, over 2^53 = {:.3g} "
                                    "(the largest count strata computes with exactly)",
                                    what, layer.name, product, value, double(kMaxExactCount)));
    }
  }
  return r;
}

int rnnGates(RnnCell cell) {
  switch (cell) {
    case RnnCell::kVanilla:
      return 1;
    case RnnCell::kGru:
      return 3;
    case RnnCell::kLstm:
      return 4;
  }
  return 1;
}

void deriveConv(LayerDerivation& d) {
  Layer& layer = d.layer;
  const Shape in = d.in;
  const auto& s = d.s;
  const std::string& file = d.file;
  const std::string& key = d.key;
  Shape& out = d.out;
  int64_t& macs = d.macs;
  if (in.c % s.groups != 0 || s.filters % s.groups != 0)
    throw ConfigError(file, layer.configLine, key + ".groups",
                      fmt::format("groups {} must divide both input channels {} and filters {}",
                                  s.groups, in.c, s.filters));
  out.c = s.filters;
  // A dilated kernel of k taps spans dilation (k - 1) + 1 inputs.
  const auto span = [&](int k) {
    return static_cast<int>(
        std::min<int64_t>(int64_t{s.dilation} * (k - 1) + 1, std::numeric_limits<int>::max()));
  };
  out.h = windowOutput(in.h, span(s.kernelH), s.stride, s.pad,
                       s.dilation > 1 ? "dilated kernel height" : "kernel height", file, layer,
                       key + ".kernel");
  out.w = windowOutput(in.w, span(s.kernelW), s.stride, s.padWidth(),
                       s.dilation > 1 ? "dilated kernel width" : "kernel width", file, layer,
                       key + ".kernel");
  d.count({out.c, out.h, out.w}, "output elements");
  const int64_t weights = d.count({s.filters, in.c / s.groups, s.kernelH, s.kernelW}, "parameters");
  layer.params = d.count({weights + (s.bias ? s.filters : 0)}, "parameters");
  macs =
      d.count({out.c, out.h, out.w, in.c / s.groups, s.kernelH, s.kernelW}, "multiply-accumulates");
}

void derivePool(LayerDerivation& d) {
  Layer& layer = d.layer;
  const Shape in = d.in;
  const auto& s = d.s;
  const std::string& file = d.file;
  const std::string& key = d.key;
  Shape& out = d.out;
  int kh = s.kernelH, kw = s.kernelW, stride = s.stride;
  if (s.global) {
    kh = in.h;
    kw = in.w;
    stride = 1;
  }
  const bool ceil = s.ceilMode && !s.global;
  if (ceil && s.poolMode != PoolMode::kMax)
    throw ConfigError(file, layer.configLine, key + ".ceil_mode",
                      "ceil_mode is for max pooling: the divisor of an average over a window cut "
                      "by the input's edge differs between frameworks");
  out.h = windowOutput(in.h, kh, stride, s.global ? 0 : s.pad, "pool window", file, layer,
                       key + ".kernel", ceil);
  out.w = windowOutput(in.w, kw, stride, s.global ? 0 : s.pad, "pool window", file, layer,
                       key + ".kernel", ceil);
  layer.fwdFlops = static_cast<double>(d.count({out.c, out.h, out.w, kh, kw}, "FLOPs"));
  layer.bwdDataFlops = layer.fwdFlops;
}

void deriveFc(LayerDerivation& d) {
  Layer& layer = d.layer;
  const Shape in = d.in;
  const auto& s = d.s;
  Shape& out = d.out;
  int64_t& macs = d.macs;
  const int64_t bias = s.bias ? s.outputs : 0;
  if (s.flatten) {
    out = Shape{s.outputs, 1, 1};
    const int64_t weights = d.count({in.c, in.h, in.w, s.outputs}, "parameters");
    layer.params = d.count({weights + bias}, "parameters");
    macs = weights;
  } else {
    out = Shape{s.outputs, in.h, in.w};
    d.count({out.c, out.h, out.w}, "output elements");
    // Tied: the weights are the embedding's (counted there).
    layer.params = s.tiedTo >= 0
                       ? bias
                       : d.count({d.count({in.c, s.outputs}, "parameters") + bias}, "parameters");
    macs = d.count({in.c, s.outputs, in.h, in.w}, "multiply-accumulates");
  }
}

void deriveRnn(LayerDerivation& d) {
  Layer& layer = d.layer;
  const Shape in = d.in;
  const auto& s = d.s;
  Shape& out = d.out;
  int64_t& macs = d.macs;
  const int gates = rnnGates(s.cell);
  out = Shape{s.hidden, in.h, in.w};
  d.count({out.c, out.h, out.w}, "output elements");
  const int64_t width = int64_t{in.c} + s.hidden;  // input and recurrent state
  const int64_t perGate =
      d.count({d.count({s.hidden, width}, "parameters") + (s.bias ? s.hidden : 0)}, "parameters");
  layer.params = d.count({gates, perGate}, "parameters");
  macs = d.count({in.h, in.w, gates, s.hidden, width}, "multiply-accumulates");
}

// relu and dropout: one FLOP per element each way.
void deriveElementwise(LayerDerivation& d) {
  Layer& layer = d.layer;
  const double nIn = d.nIn;
  layer.fwdFlops = nIn;
  layer.bwdDataFlops = nIn;
}

void deriveLrn(LayerDerivation& d) {
  Layer& layer = d.layer;
  const auto& s = d.s;
  const double nIn = d.nIn;
  // Sum of squares over a window of `size` channels (2 size), then scale
  // and power (3) per element; backward costs about twice the forward.
  layer.fwdFlops = nIn * (2.0 * s.lrnSize + 3);
  layer.bwdDataFlops = 2 * layer.fwdFlops;
}

void deriveBatchNorm(LayerDerivation& d) {
  Layer& layer = d.layer;
  const Shape in = d.in;
  const double nIn = d.nIn;
  layer.params = 2 * int64_t{in.c};  // scale and shift per channel
  layer.fwdFlops = 4 * nIn;          // mean, variance, normalise, scale-shift
  layer.bwdDataFlops = 6 * nIn;
  layer.bwdWeightsFlops = 2 * nIn;
}

void deriveAdd(LayerDerivation& d) {
  Layer& layer = d.layer;
  const auto& inputShapes = d.inputShapes;
  const Shape in = d.in;
  const std::string& file = d.file;
  const std::string& key = d.key;
  const double nIn = d.nIn;
  for (size_t i = 1; i < inputShapes.size(); ++i)
    if (!(inputShapes[i] == in))
      throw ConfigError(file, layer.configLine, key + ".inputs",
                        fmt::format("add of different shapes {}x{}x{} and {}x{}x{}", in.c, in.h,
                                    in.w, inputShapes[i].c, inputShapes[i].h, inputShapes[i].w));
  layer.fwdFlops = nIn * double(inputShapes.size() - 1);
}

void deriveSoftmax(LayerDerivation& d) {
  Layer& layer = d.layer;
  const double nIn = d.nIn;
  layer.fwdFlops = 4 * nIn;  // exp, sum, divide, log-loss
  layer.bwdDataFlops = nIn;
}

void deriveEmbedding(LayerDerivation& d) {
  Layer& layer = d.layer;
  const Shape in = d.in;
  const auto& s = d.s;
  const std::string& file = d.file;
  const std::string& key = d.key;
  Shape& out = d.out;
  // One token id per position in: the network input, 1 x T x W.
  if (layer.inputs.size() != 1 || layer.inputs[0] != -1 || in.c != 1)
    throw ConfigError(file, layer.configLine, key + ".input",
                      fmt::format("an embedding reads the network input of token ids "
                                  "(channels: 1, one id per position), got {}x{}x{}",
                                  in.c, in.h, in.w));
  const int64_t positionsUsed = int64_t{in.h} * in.w;
  if (s.positions > 0 && positionsUsed > s.positions)
    throw ConfigError(file, layer.configLine, key + ".positions",
                      fmt::format("{} positions per example, over the {} the position table holds",
                                  positionsUsed, s.positions));
  out = Shape{s.outputs, in.h, in.w};
  const double nOut = static_cast<double>(d.count({out.c, out.h, out.w}, "output elements"));
  layer.params = d.count({d.count({s.vocab, s.outputs}, "parameters") +
                          d.count({s.positions, s.outputs}, "parameters")},
                         "parameters");
  // A gather moves no arithmetic; adding the position vector is one
  // FLOP per output, and so is each scatter-add of the backward pass.
  layer.fwdFlops = s.positions > 0 ? nOut : 0;
  layer.bwdWeightsFlops = nOut * (s.positions > 0 ? 2 : 1);
  d.finish();
  layer.bwdDataElems = 0;  // token ids take no gradient
  layer.bwdWeightsElems = 2 * nOut;
  d.done = true;
}

// The window keys of an attention (LayerSpec::window, grid): windows tile an
// H x W grid; a shift moves them by less than a window; a grid's strided
// positions tile it exactly; a relative position bias is an offset within a
// window or a grid.
void checkWindows(const LayerDerivation& d) {
  const auto& s = d.s;
  const Layer& layer = d.layer;
  auto fail = [&](const char* key, const std::string& message) {
    throw ConfigError(d.file, layer.configLine, d.key + "." + key, message);
  };
  if (s.window < 0)
    fail("window", fmt::format("the side of a window is a positive number of positions (0: no "
                               "windows), got {}",
                               s.window));
  if (s.grid < 0)
    fail("grid", fmt::format("the side of a grid is a positive number of positions (0: no "
                             "grid), got {}",
                             s.grid));
  if (s.window > 0 && s.grid > 0)
    fail("grid",
         "window and grid are two ways to cut the positions (MaxViT's block and grid "
         "attention are two layers): give one");
  if (s.grid > 0) {
    if (s.shift != 0)
      fail("shift", "shift moves windows: it applies only with window, not grid");
    if (d.in.w <= 1)
      fail("grid", fmt::format("a grid is strided positions of an H x W grid (MaxViT); the "
                               "input is {}x{}x{}, a sequence",
                               d.in.c, d.in.h, d.in.w));
    if (s.grid > 4096)
      fail("grid", fmt::format("grid {} is larger than any image's grid (at most 4096)", s.grid));
    if (d.in.h % s.grid != 0 || d.in.w % s.grid != 0)
      fail("grid", fmt::format("a grid of {} strided positions a side must tile the {}x{} "
                               "positions (MaxViT requires H and W to be multiples of it)",
                               s.grid, d.in.h, d.in.w));
    if (s.causal)
      fail("causal", "grid attention is bidirectional (MaxViT): causal must be false");
    return;
  }
  if (s.window == 0) {
    if (s.shift != 0)
      fail("shift", "shift moves windows: it applies only with window");
    if (s.positionBias != PositionBias::kNone)
      fail("position_bias",
           "a relative position bias is an offset within a window or a grid: it applies "
           "only with window or grid");
    return;
  }
  if (d.in.w <= 1)
    fail("window", fmt::format("windows are squares of an H x W grid of positions (Swin); the "
                               "input is {}x{}x{}, a sequence (a sliding window over a sequence, "
                               "as Mistral's, is not this)",
                               d.in.c, d.in.h, d.in.w));
  if (s.window > 4096)
    fail("window",
         fmt::format("window {} is larger than any image's grid (at most 4096)", s.window));
  if (s.causal)
    fail("causal", "attention in windows is bidirectional (Swin): causal must be false");
  if (s.shift < 0 || s.shift >= s.window)
    fail("shift", fmt::format("the windows move by 0 to {} positions (less than a window of {}), "
                              "got {}",
                              s.window - 1, s.window, s.shift));
}

void deriveAttention(LayerDerivation& d) {
  Layer& layer = d.layer;
  const Shape in = d.in;
  const auto& s = d.s;
  const std::string& file = d.file;
  const std::string& key = d.key;
  Shape& out = d.out;
  if (s.heads <= 0 || in.c % s.heads != 0)
    throw ConfigError(file, layer.configLine, key + ".heads",
                      fmt::format("heads {} must divide the {} channels", s.heads, in.c));
  const int kvHeads = layer.kvHeads();
  if (kvHeads <= 0 || s.heads % kvHeads != 0)
    throw ConfigError(file, layer.configLine, key + ".kv_heads",
                      fmt::format("kv_heads {} must divide heads {} (each key/value head serves "
                                  "heads / kv_heads query heads)",
                                  kvHeads, s.heads));
  const int64_t dh = in.c / s.heads;
  if (s.rotary && s.rotaryDims == 0 && dh % 2 != 0)
    throw ConfigError(file, layer.configLine, key + ".rotary",
                      fmt::format("rotary positions turn pairs of features: the {} features per "
                                  "head ({} channels / {} heads) must be even",
                                  dh, in.c, s.heads));
  if (s.rotaryDims != 0 && !s.rotary)
    throw ConfigError(file, layer.configLine, key + ".rotary_dims",
                      "rotary_dims applies only with rotary: true");
  if (s.rotaryDims < 0 || s.rotaryDims % 2 != 0 || s.rotaryDims > dh)
    throw ConfigError(file, layer.configLine, key + ".rotary_dims",
                      fmt::format("rotary positions turn pairs of a head's features: {} must be "
                                  "even and in [2, {}] (the features per head)",
                                  s.rotaryDims, dh));
  checkWindows(d);
  // Per example, with T = h w positions of d = c features and kv = d
  // kv_heads / heads features of K and of V: the Q and output projections
  // 2 T d^2, the K and V projections 2 T d kv, scores Q K^T T^2 d and
  // context P V T^2 d multiply-accumulates (Narayanan et al., "Efficient
  // Large-Scale Language Model Training on GPU Clusters Using Megatron-LM",
  // SC 2021, section 5.1: 8 b s h^2 + 4 b s^2 h FLOPs with kv = d; grouped
  // keys and values, Ainslie et al. 2023, shrink only the K and V
  // projections: each query head still scores all T keys of its group's K).
  // In windows of M x M (Swin, Liu et al. 2021, eq. 2: 4 h w C^2 + 2 M^2 h
  // w C), the projections run over the P positions of the grid padded to
  // whole windows and each query scores the M^2 keys of its window: the
  // scores and the context P M^2 d each.
  const int64_t t = d.count({in.h, in.w}, "positions");
  const int64_t tp = d.count({layer.attentionPositions()}, "padded positions");
  const int64_t span = layer.attentionSpan();
  const int64_t kv = dh * kvHeads;
  const int64_t rows = d.count({in.c + 2 * kv}, "parameters");  // Q, K, V rows
  const int64_t projection = d.count({tp, in.c, rows + in.c}, "multiply-accumulates");
  const int64_t mixing = d.count({2, tp, span, in.c}, "multiply-accumulates");
  const int64_t scores = d.count({s.heads, tp, span}, "attention scores");
  // Biases: Q, K, V's rows and the output's d; the Q, K and V rows alone
  // with qkv_bias (Qwen2).
  const int64_t biases = s.bias ? rows + in.c : s.qkvBias ? rows : 0;
  // The relative position bias: Swin's table of (2M - 1)^2 offsets x heads;
  // Swin V2's MLP of the offsets, Linear(2, 512) with its bias and
  // Linear(512, heads) without (torchvision's cpb_mlp); cosine attention's
  // learned logit scale, one per head.
  const int64_t offsets = int64_t{2 * layer.partitionSide() - 1} * (2 * layer.partitionSide() - 1);
  const int64_t positionParams = s.positionBias == PositionBias::kTable ? offsets * s.heads
                                 : s.positionBias == PositionBias::kMlp
                                     ? 2 * 512 + 512 + 512 * int64_t{s.heads}
                                     : 0;
  layer.params = d.count({d.count({rows + in.c, in.c}, "parameters") + biases + positionParams +
                          (s.cosine ? s.heads : 0)},
                         "parameters");
  // Rotary positions turn each (i, i + r/2) pair of the first r features of
  // each head of Q and K (r = dh, or rotary_dims) at each position by its
  // angle: 2 multiplies and an add per element, each way (the angles' sines
  // and cosines are a table over T, not counted).
  const double rotated =
      s.rotary ? double(tp) * double(in.c + kv) * double(layer.rotaryFeatures()) / double(dh) : 0.0;
  // Scaled cosine attention normalises each head's Q and K (a square, a sum
  // and a scale per element) and scales each score; a position bias or a
  // shift's mask is one add per score. Backward: twice the normalisation
  // and one pass of dS summed into the position bias (the mask is constant).
  const double normalised = s.cosine ? double(tp) * double(in.c + kv) : 0.0;
  const bool shifted = layer.shiftH() > 0 || layer.shiftW() > 0;
  const double biased = s.positionBias != PositionBias::kNone ? double(scores) : 0.0;
  const double scoreAdds =
      double(scores) * ((s.cosine ? 1 : 0) + (biased > 0 ? 1 : 0) + (shifted ? 1 : 0));
  // Backward is twice forward: both operands of the scores and of the
  // context GEMMs take a gradient, and so do the projections' inputs and
  // weights. The executor runs bwd_weights first and it carries the
  // gradient through the heads that both phases need (dQKV): the weight
  // gradients T d (rows + d), dC = Wo^T dy T d^2, the heads 4 T^2 d and the
  // rotation turned back; bwd_data is dx = Wqkv^T dQKV, T d rows
  // (model/cost/src/lowering.cpp, lowerCpu).
  layer.fwdFlops = 2 * double(projection + mixing) + 3 * rotated + 3 * normalised + scoreAdds;
  layer.bwdDataFlops = 2 * double(tp) * in.c * double(rows);
  layer.bwdWeightsFlops = 2 * double(projection + 2 * mixing) + 2 * double(tp) * in.c * in.c +
                          3 * rotated + 6 * normalised + biased;
  layer.fwdCoreFlops = 2 * double(mixing);
  layer.bwdWeightsCoreFlops = 4 * double(mixing);
  // Memory: x, Q K V, the context and the output per position (6 T d with
  // kv = d), Q and K read and written again by the rotation. An unfused
  // core's QK^T GEMM writes the scores (H T^2, beside the GEMMs' own
  // operands); then softmax reads them and writes the probabilities, and
  // attention dropout reads those and writes the dropped ones and a 1-byte
  // mask per score: kernels of their own between the two GEMMs, so their
  // traffic is kept apart (fwdScoreElems: it adds to the layer's time).
  // Backward (bwd_weights, which carries the heads): dropout reads dP' and
  // the mask and writes dP; softmax reads P and dP and writes dS. A fused
  // core (FlashAttention) keeps the scores on chip: none of it. Each add to
  // the scores (bias, mask, cosine's scale) reads and writes them once
  // more, and the bias's gradient reads dS.
  const double td = double(t) * in.c;
  const double tpd = double(tp) * in.c;
  const double tq = double(tp) * double(rows);
  const bool unfused = !s.fusedCore;
  const double dropped = s.attentionDropout > 0 ? 1.0 : 0.0;
  layer.fwdElems =
      2 * td + tpd + tq + 2 * rotated + 2 * normalised + (unfused ? double(scores) : 0.0);
  layer.bwdDataElems = tq + 2 * td;  // read dQKV, write dx (with its zero fill)
  layer.bwdWeightsElems = 2 * layer.fwdElems;
  if (unfused) {
    layer.fwdScoreElems = (2 + 2 * dropped) * double(scores) + 2 * scoreAdds;
    layer.bwdWeightsScoreElems = (3 + 2 * dropped) * double(scores) + biased;
    layer.scoreMaskBytes = dropped * double(scores);
  }
  // Windows are copies: x into its windows (padded, rolled by the shift)
  // and the output back (rolled back, cropped), each way, as torchvision's
  // shifted_window_attention does: read T d and write P d, and back; a roll
  // reads and writes T d. Backward moves dy into windows (bwd_weights) and
  // dx out of them (bwd_data) the same way. A grid's strided positions are
  // gathered the same way (MaxViT's partition, T d each way; P = T).
  if (layer.partitionSide() > 0) {
    const double oneWay = td + tpd + (shifted ? 2 * td : 0.0);
    layer.fwdElems += 2 * oneWay;
    layer.bwdWeightsElems += oneWay;
    layer.bwdDataElems += oneWay;
  }
  // Kept for backward: Q K V and the context, and the probabilities (and
  // the dropped ones; their mask: activationsKept) of an unfused core; a
  // fused one keeps each query's log-sum-exp of its scores (H T) instead
  // and computes the scores again in backward.
  layer.savedScoreElems = unfused ? (1 + dropped) * double(scores) : 0.0;
  layer.savedElems =
      tq + tpd + (unfused ? layer.savedScoreElems : double(d.count({s.heads, tp}, "scores")));
  layer.outShape = out;
  d.done = true;
}

void deriveLayerNorm(LayerDerivation& d) {
  Layer& layer = d.layer;
  const Shape in = d.in;
  const double nIn = d.nIn;
  layer.params = 2 * int64_t{in.c};  // gain and bias per feature
  layer.fwdFlops = 4 * nIn;          // as batchnorm, over the features of each position
  layer.bwdDataFlops = 6 * nIn;
  layer.bwdWeightsFlops = 2 * nIn;
}

void deriveGelu(LayerDerivation& d) {
  Layer& layer = d.layer;
  const double nIn = d.nIn;
  // 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))): 8 operations, and
  // about 12 for its derivative.
  layer.fwdFlops = 8 * nIn;
  layer.bwdDataFlops = 12 * nIn;
}

// RMSNorm (Zhang & Sennrich, "Root Mean Square Layer Normalization", NeurIPS
// 2019, eq. 4; Llama): y = x / sqrt(mean over the channels of x^2 + eps) * g,
// a gain g per channel and no bias.
void deriveRmsNorm(LayerDerivation& d) {
  Layer& layer = d.layer;
  const Shape in = d.in;
  const double nIn = d.nIn;
  layer.params = int64_t{in.c};  // gain per channel
  // Square and sum (2), then scale by 1/rms and by the gain (2) per element;
  // bwd_data per element: xhat = x/rms, g dy, their product summed (4),
  // then (g dy - xhat mean(g dy xhat)) / rms (3); bwd_weights dg += dy xhat (3).
  layer.fwdFlops = 4 * nIn;
  layer.bwdDataFlops = 7 * nIn;
  layer.bwdWeightsFlops = 3 * nIn;
}

// SwiGLU's gate (Shazeer, "GLU Variants Improve Transformer", 2020, eq. 5;
// Llama's MLP): input channels [0, f) are a, [f, 2f) are b, and the output
// silu(a) * b has f channels, silu(a) = a sigmoid(a).
void deriveSwiglu(LayerDerivation& d) {
  Layer& layer = d.layer;
  const Shape in = d.in;
  if (in.c % 2 != 0)
    throw ConfigError(d.file, layer.configLine, d.key + ".input",
                      fmt::format("swiglu gates one half of its input's channels with the other: "
                                  "{} channels is odd",
                                  in.c));
  d.out = Shape{in.c / 2, in.h, in.w};
  const double nOut = static_cast<double>(d.out.elements());
  // sigmoid (exp, add, divide), times a, times b: 5 per output; backward
  // recomputes sigmoid (3), silu' = s (1 + a (1 - s)) (4) and the two
  // gradients dy b silu'(a), dy silu(a) (4).
  layer.fwdFlops = 5 * nOut;
  layer.bwdDataFlops = 11 * nOut;
}

// Concatenation along the channels: every input of the first's height and
// width; no arithmetic, a copy of each input into its slice of the output
// forward and back out of it backward.
void deriveConcat(LayerDerivation& d) {
  Layer& layer = d.layer;
  const Shape in = d.in;
  int64_t channels = 0;
  for (size_t i = 0; i < d.inputShapes.size(); ++i) {
    const Shape& x = d.inputShapes[i];
    if (x.h != in.h || x.w != in.w)
      throw ConfigError(d.file, layer.configLine, d.key + ".inputs",
                        fmt::format("concat joins inputs along the channels: input {} is "
                                    "{}x{}x{}, input 0 {}x{}x{} (height and width must agree)",
                                    i, x.c, x.h, x.w, in.c, in.h, in.w));
    channels += x.c;
  }
  if (channels > std::numeric_limits<int>::max())
    throw ConfigError(
        d.file, layer.configLine, d.key + ".inputs",
        fmt::format("{} channels in all, over {}", channels, std::numeric_limits<int>::max()));
  d.out = Shape{static_cast<int>(channels), in.h, in.w};
  const double nOut = static_cast<double>(d.count({d.out.c, d.out.h, d.out.w}, "output elements"));
  layer.outShape = d.out;
  layer.fwdElems = 2 * nOut;      // read each input, write its slice
  layer.bwdDataElems = 2 * nOut;  // read each slice of dy, write dx
  d.done = true;
}

// The pointwise activations of vision networks, FLOPs per element forward
// and backward (docs/cost-model.md): sigmoid 4 (negate, exp, add, divide) and
// 3 back (dy s (1 - s) from the output); silu 5 (sigmoid and the product) and
// 9 back (sigmoid again, s (1 + x (1 - s)), times dy); relu6 2 (max, min) and
// 1 back (a mask of the output); hardsigmoid 4 (add, max, min, scale) and 2
// back; hardswish 5 and 4 back (dy (2 x + 3) / 6 inside [-3, 3]); tanh 5
// (1 - 2 / (exp(2 x) + 1): a scale, exp, add, divide, subtract) and 3 back
// (dy (1 - y^2) from the output). Plain
// functions, not a template: the table's static_assert reads their addresses.
void pointwise(LayerDerivation& d, double fwd, double bwd) {
  d.layer.fwdFlops = fwd * d.nIn;
  d.layer.bwdDataFlops = bwd * d.nIn;
}
void deriveSigmoid(LayerDerivation& d) {
  pointwise(d, 4, 3);
}
void deriveSilu(LayerDerivation& d) {
  pointwise(d, 5, 9);
}
void deriveRelu6(LayerDerivation& d) {
  pointwise(d, 2, 1);
}
void deriveHardSigmoid(LayerDerivation& d) {
  pointwise(d, 4, 2);
}
void deriveHardSwish(LayerDerivation& d) {
  pointwise(d, 5, 4);
}
void deriveTanh(LayerDerivation& d) {
  pointwise(d, 5, 3);
}

// x * g: g is x's shape, or one value per channel of x (C x 1 x 1, the gate
// of squeeze-excitation, Hu et al. 2018) broadcast over its positions.
// Backward: dx = dy g (one FLOP per element) and dg = dy x, summed over the
// positions for a per-channel gate (two).
void deriveMul(LayerDerivation& d) {
  Layer& layer = d.layer;
  const Shape in = d.in;
  if (d.inputShapes.size() != 2)
    throw ConfigError(
        d.file, layer.configLine, d.key + ".inputs",
        fmt::format("mul multiplies two inputs, x and its gate g; got {}", d.inputShapes.size()));
  const Shape g = d.inputShapes[1];
  if (!(g == in) && !(g.c == in.c && g.h == 1 && g.w == 1))
    throw ConfigError(d.file, layer.configLine, d.key + ".inputs",
                      fmt::format("mul of {}x{}x{} by {}x{}x{}: the second input must be the "
                                  "first's shape or one value per channel ({}x1x1)",
                                  in.c, in.h, in.w, g.c, g.h, g.w, in.c));
  layer.fwdFlops = d.nIn;
  layer.bwdDataFlops = 3 * d.nIn;
}

// Channels [offset, offset + channels) of the input (ShuffleNetV2's split
// of its input in two, Ma et al. 2018): a copy forward; backward, dy into
// those channels of dx, the others zero unless another reader adds into dx.
void deriveSlice(LayerDerivation& d) {
  Layer& layer = d.layer;
  const Shape in = d.in;
  const LayerSpec& s = d.s;
  if (s.offset < 0)
    throw ConfigError(d.file, layer.configLine, d.key + ".offset",
                      fmt::format("the first channel taken must be at least 0, got {}", s.offset));
  if (s.channels <= 0)
    throw ConfigError(d.file, layer.configLine, d.key + ".channels",
                      fmt::format("a slice takes at least one channel, got {}", s.channels));
  if (int64_t{s.offset} + s.channels > in.c)
    throw ConfigError(
        d.file, layer.configLine, d.key + ".channels",
        fmt::format("channels {} to {} of an input of {} channels ({}x{}x{})", s.offset,
                    int64_t{s.offset} + s.channels - 1, in.c, in.c, in.h, in.w));
  d.out = Shape{s.channels, in.h, in.w};
  const double nOut = static_cast<double>(d.count({d.out.c, d.out.h, d.out.w}, "output elements"));
  layer.outShape = d.out;
  layer.fwdElems = 2 * nOut;      // read the channels, write them
  layer.bwdDataElems = 2 * nOut;  // read dy, write its channels of dx
  d.done = true;
}

// Channel shuffle (ShuffleNet, Zhang et al. 2018): the input's channels in
// `groups` groups of C / groups, channel j of group i moved to j * groups
// + i; a permuted copy both ways (backward: the shuffle of C / groups groups,
// its inverse).
void deriveShuffle(LayerDerivation& d) {
  Layer& layer = d.layer;
  const Shape in = d.in;
  const int g = d.s.groups;
  if (g < 1 || in.c % g != 0)
    throw ConfigError(d.file, layer.configLine, d.key + ".groups",
                      fmt::format("a shuffle splits the channels into groups of equal size: {} "
                                  "groups of {} channels",
                                  g, in.c));
  const double n = static_cast<double>(d.count({in.c, in.h, in.w}, "output elements"));
  layer.outShape = in;
  d.out = in;
  layer.fwdElems = 2 * n;
  layer.bwdDataElems = 2 * n;
  d.done = true;
}

// Layer scale (CaiT, Touvron et al. 2021; ConvNeXt, Liu et al. 2022): x
// times a learned value per channel, gamma (C parameters, no bias): one
// FLOP per element forward and backward (dx = gamma dy), two for its
// gradient (dgamma = sums of dy x); each phase reads a tensor and writes one
// (bwd_weights reads x and dy).
void deriveScale(LayerDerivation& d) {
  Layer& layer = d.layer;
  layer.outShape = d.in;
  d.out = d.in;
  layer.params = d.in.c;
  layer.fwdFlops = d.nIn;
  layer.bwdDataFlops = d.nIn;
  layer.bwdWeightsFlops = 2 * d.nIn;
  layer.fwdElems = 2 * d.nIn;
  layer.bwdDataElems = 2 * d.nIn;
  layer.bwdWeightsElems = 2 * d.nIn;
  d.done = true;
}

// ViT's class token (Dosovitskiy et al. 2021, eq. 1; Devlin et al. 2019's
// [CLS]): `tokens` learned vectors of C features put before the input's H W
// positions, read as a sequence: C x H x W in, C x (tokens + H W) x 1 out.
// No arithmetic: forward copies the tokens and the input into the output,
// backward copies dy's last H W positions into dx and sums its first
// `tokens` over the batch into their gradient (one FLOP an element).
void deriveClassToken(LayerDerivation& d) {
  Layer& layer = d.layer;
  const Shape in = d.in;
  if (d.s.tokens < 1)
    throw ConfigError(d.file, layer.configLine, d.key + ".tokens",
                      fmt::format("a class_token layer puts at least one token before the "
                                  "positions, got {}",
                                  d.s.tokens));
  const int64_t positions = d.count({in.h, in.w}, "positions") + d.s.tokens;
  if (positions > std::numeric_limits<int>::max())
    throw ConfigError(
        d.file, layer.configLine, d.key + ".tokens",
        fmt::format("{} positions, over {}", positions, std::numeric_limits<int>::max()));
  d.out = Shape{in.c, static_cast<int>(positions), 1};
  const double nOut = static_cast<double>(d.count({d.out.c, d.out.h}, "output elements"));
  const double tokenElems = static_cast<double>(d.count({in.c, d.s.tokens}, "parameters"));
  layer.outShape = d.out;
  layer.params = static_cast<int64_t>(tokenElems);
  layer.bwdWeightsFlops = tokenElems;
  layer.fwdElems = d.nIn + nOut;           // read x (and the tokens), write y
  layer.bwdDataElems = 2 * d.nIn;          // read dy's positions, write dx
  layer.bwdWeightsElems = 2 * tokenElems;  // read dy's tokens, add them up
  d.done = true;
}

// A learned position table added to the input (ViT's pos_embedding, GPT-2's
// wpe as a table of its own): parameters of the input's shape, one FLOP an
// element forward (x + P) and one for its gradient (dP = sum over the batch
// of dy); backward data passes dy on (a copy).
void derivePosEmbedding(LayerDerivation& d) {
  Layer& layer = d.layer;
  layer.outShape = d.in;
  d.out = d.in;
  layer.params = static_cast<int64_t>(d.nIn);
  layer.fwdFlops = d.nIn;
  layer.bwdWeightsFlops = d.nIn;
  layer.fwdElems = 2 * d.nIn;
  layer.bwdDataElems = 2 * d.nIn;
  layer.bwdWeightsElems = 2 * d.nIn;
  d.done = true;
}

// One position of a sequence (C x T x 1, or the H W positions of C x H x W)
// as a vector C x 1 x 1: ViT's x[:, 0], the class token read by the head. A
// copy of C elements forward; backward, dy into that position of dx, the
// others zero unless another reader adds into dx.
void deriveToken(LayerDerivation& d) {
  Layer& layer = d.layer;
  const Shape in = d.in;
  const int64_t positions = d.count({in.h, in.w}, "positions");
  if (d.s.index < 0 || d.s.index >= positions)
    throw ConfigError(d.file, layer.configLine, d.key + ".index",
                      fmt::format("position {} of an input of {} positions ({}x{}x{}): the index "
                                  "must be in [0, {}]",
                                  d.s.index, positions, in.c, in.h, in.w, positions - 1));
  d.out = Shape{in.c, 1, 1};
  layer.outShape = d.out;
  layer.fwdElems = 2.0 * in.c;
  layer.bwdDataElems = 2.0 * in.c;
  d.done = true;
}

// Each b x b block of positions as one position of b^2 C channels, the
// grid padded below and right with zeros to whole blocks (Swin's patch
// merging, Liu et al. 2021, section 3.1, as torchvision's PatchMerging pads
// an odd H or W and concatenates x[0::2, 0::2], x[1::2, 0::2], x[0::2, 1::2]
// and x[1::2, 1::2]: output channel (j b + i) C + c is channel c at row
// offset i, column offset j). A copy: no FLOPs.
void deriveSpaceToDepth(LayerDerivation& d) {
  Layer& layer = d.layer;
  const Shape in = d.in;
  const int b = d.s.blockSize;
  if (b < 1 || b > 64)
    throw ConfigError(d.file, layer.configLine, d.key + ".block_size",
                      fmt::format("blocks of 1 to 64 positions a side, got {}", b));
  if (in.h < 2 && in.w < 2 && b > 1)
    throw ConfigError(d.file, layer.configLine, d.key + ".input",
                      fmt::format("the input {}x{}x{} has one position: there is no grid to merge "
                                  "into blocks",
                                  in.c, in.h, in.w));
  const int64_t channels = d.count({in.c, b, b}, "output channels");
  if (channels > std::numeric_limits<int>::max())
    throw ConfigError(
        d.file, layer.configLine, d.key + ".block_size",
        fmt::format("{} channels, over {}", channels, std::numeric_limits<int>::max()));
  d.out = Shape{static_cast<int>(channels), (in.h + b - 1) / b, (in.w + b - 1) / b};
  const double nOut = static_cast<double>(d.count({d.out.c, d.out.h, d.out.w}, "output elements"));
  layer.outShape = d.out;
  layer.fwdElems = d.nIn + nOut;      // read x, write the blocks
  layer.bwdDataElems = nOut + d.nIn;  // read dy, write dx
  d.done = true;
}

// The YAML keys of each kind besides `name` and `kind`.
constexpr std::string_view kConvKeys[] = {"input",    "filters", "kernel", "kernel_h",
                                          "kernel_w", "stride",  "pad",    "pad_w",
                                          "dilation", "groups",  "bias"};
constexpr std::string_view kPoolKeys[] = {"input",  "mode", "kernel", "kernel_h", "kernel_w",
                                          "stride", "pad",  "global", "ceil_mode"};
constexpr std::string_view kFcKeys[] = {"input", "outputs", "bias", "flatten", "tied"};
constexpr std::string_view kRnnKeys[] = {"input", "hidden", "cell", "bias"};
constexpr std::string_view kLrnKeys[] = {"input", "size"};
constexpr std::string_view kDropoutKeys[] = {"input", "rate"};
constexpr std::string_view kAddKeys[] = {"inputs"};  // add, concat and mul
constexpr std::string_view kEmbeddingKeys[] = {"input", "vocab", "outputs", "positions"};
constexpr std::string_view kAttentionKeys[] = {
    "input",  "heads",         "causal",      "bias",  "qkv_bias",          "kv_heads",
    "rotary", "rotary_base",   "rotary_dims", "fused", "attention_dropout", "window",
    "shift",  "position_bias", "cosine",      "grid"};
constexpr std::string_view kRmsNormKeys[] = {"input", "eps"};
constexpr std::string_view kSliceKeys[] = {"input", "offset", "channels"};
constexpr std::string_view kShuffleKeys[] = {"input", "groups"};
constexpr std::string_view kInputKey[] = {"input"};
constexpr std::string_view kClassTokenKeys[] = {"input", "tokens"};
constexpr std::string_view kTokenKeys[] = {"input", "index"};
constexpr std::string_view kSpaceToDepthKeys[] = {"input", "block_size"};

// One row per kind, in LayerKind order.
constexpr auto kRows = std::to_array<LayerKindRow>({
    {LayerKind::kConv, "conv", kConvKeys, deriveConv, BackwardReads::kInput},
    {LayerKind::kPool, "pool", kPoolKeys, derivePool, BackwardReads::kInput},
    {LayerKind::kFc, "fc", kFcKeys, deriveFc, BackwardReads::kInput},
    {LayerKind::kRnn, "rnn", kRnnKeys, deriveRnn, BackwardReads::kInput},
    {LayerKind::kRelu, "relu", kInputKey, deriveElementwise, BackwardReads::kOutput},
    {LayerKind::kLrn, "lrn", kLrnKeys, deriveLrn, BackwardReads::kInputAndOutput},
    {LayerKind::kDropout, "dropout", kDropoutKeys, deriveElementwise, BackwardReads::kMask},
    {LayerKind::kBatchNorm, "batchnorm", kInputKey, deriveBatchNorm, BackwardReads::kInput},
    {LayerKind::kAdd, "add", kAddKeys, deriveAdd, BackwardReads::kNothing},
    {LayerKind::kSoftmax, "softmax", kInputKey, deriveSoftmax, BackwardReads::kOutput},
    {LayerKind::kEmbedding, "embedding", kEmbeddingKeys, deriveEmbedding, BackwardReads::kInput},
    {LayerKind::kAttention, "attention", kAttentionKeys, deriveAttention, BackwardReads::kInput},
    {LayerKind::kLayerNorm, "layernorm", kInputKey, deriveLayerNorm, BackwardReads::kInput},
    {LayerKind::kGelu, "gelu", kInputKey, deriveGelu, BackwardReads::kInput},
    {LayerKind::kRmsNorm, "rmsnorm", kRmsNormKeys, deriveRmsNorm, BackwardReads::kInput},
    {LayerKind::kSwiglu, "swiglu", kInputKey, deriveSwiglu, BackwardReads::kInput},
    {LayerKind::kConcat, "concat", kAddKeys, deriveConcat, BackwardReads::kNothing},
    {LayerKind::kSigmoid, "sigmoid", kInputKey, deriveSigmoid, BackwardReads::kOutput},
    {LayerKind::kSilu, "silu", kInputKey, deriveSilu, BackwardReads::kInput},
    {LayerKind::kRelu6, "relu6", kInputKey, deriveRelu6, BackwardReads::kOutput},
    {LayerKind::kHardSigmoid, "hardsigmoid", kInputKey, deriveHardSigmoid, BackwardReads::kInput},
    {LayerKind::kHardSwish, "hardswish", kInputKey, deriveHardSwish, BackwardReads::kInput},
    {LayerKind::kMul, "mul", kAddKeys, deriveMul, BackwardReads::kInput},
    {LayerKind::kSlice, "slice", kSliceKeys, deriveSlice, BackwardReads::kNothing},
    {LayerKind::kShuffle, "shuffle", kShuffleKeys, deriveShuffle, BackwardReads::kNothing},
    {LayerKind::kScale, "scale", kInputKey, deriveScale, BackwardReads::kInput},
    {LayerKind::kClassToken, "class_token", kClassTokenKeys, deriveClassToken,
     BackwardReads::kNothing},
    {LayerKind::kPosEmbedding, "pos_embedding", kInputKey, derivePosEmbedding,
     BackwardReads::kNothing},
    {LayerKind::kToken, "token", kTokenKeys, deriveToken, BackwardReads::kNothing},
    {LayerKind::kSpaceToDepth, "space_to_depth", kSpaceToDepthKeys, deriveSpaceToDepth,
     BackwardReads::kNothing},
    {LayerKind::kTanh, "tanh", kInputKey, deriveTanh, BackwardReads::kOutput},
});

constexpr bool rowsInKindOrder() {
  for (size_t k = 0; k < kRows.size(); ++k)
    if (kRows[k].kind != static_cast<LayerKind>(k) || kRows[k].name.empty() || !kRows[k].derive)
      return false;
  return true;
}
static_assert(kRows.size() == kLayerKindCount, "one row per LayerKind (kLayerKindCount)");
static_assert(rowsInKindOrder(), "row k is LayerKind k, with a name and a derive rule");

}  // namespace

bool isVisionActivation(LayerKind kind) {
  return kind == LayerKind::kSigmoid || kind == LayerKind::kSilu || kind == LayerKind::kRelu6 ||
         kind == LayerKind::kHardSigmoid || kind == LayerKind::kHardSwish ||
         kind == LayerKind::kTanh;
}

bool isVisionKind(LayerKind kind) {
  return isVisionActivation(kind) || kind == LayerKind::kConcat || kind == LayerKind::kMul ||
         kind == LayerKind::kSlice || kind == LayerKind::kShuffle || kind == LayerKind::kScale ||
         kind == LayerKind::kClassToken || kind == LayerKind::kPosEmbedding ||
         kind == LayerKind::kToken || kind == LayerKind::kSpaceToDepth;
}

std::span<const LayerKindRow> layerKindTable() {
  return kRows;
}

const LayerKindRow& layerKindRow(LayerKind kind) {
  return kRows.at(static_cast<size_t>(kind));
}

std::optional<LayerKind> parseLayerKind(std::string_view name) {
  for (const auto& row : kRows)
    if (row.name == name)
      return row.kind;
  return std::nullopt;
}

ActivationsKept activationsKept(const Network& network) {
  const size_t n = network.layers.size();
  auto readsInput = [](const Layer& l) {
    const auto r = layerKindRow(l.kind).reads;
    return r == BackwardReads::kInput || r == BackwardReads::kInputAndOutput;
  };
  // Whether some consumer's backward reads layer i's output (index n: the
  // network input's).
  std::vector<char> readByConsumer(n + 1, 0);
  for (const auto& l : network.layers)
    if (readsInput(l))
      for (int p : l.inputs)
        readByConsumer[p < 0 ? n : static_cast<size_t>(p)] = 1;
  ActivationsKept kept;
  kept.input = readByConsumer[n] ? double(network.input.elements()) : 0.0;
  kept.elems.assign(n, 0.0);
  kept.maskBytes.assign(n, 0.0);
  for (size_t i = 0; i < n; ++i) {
    const Layer& l = network.layers[i];
    const auto r = layerKindRow(l.kind).reads;
    const bool own = r == BackwardReads::kOutput || r == BackwardReads::kInputAndOutput;
    const double out = double(l.outShape.elements());
    kept.elems[i] = (own || readByConsumer[i] ? out : 0.0) + l.savedElems;
    if (r == BackwardReads::kMask && l.spec.dropoutRate > 0)
      kept.maskBytes[i] = out;
    if (l.kind == LayerKind::kAttention)
      kept.maskBytes[i] = l.scoreMaskBytes;  // attention dropout's, one byte a score
  }
  return kept;
}

int64_t LayerDerivation::count(std::initializer_list<int64_t> factors, const char* what) const {
  return countOf(factors, what, file, layer, key);
}

void LayerDerivation::finish() {
  if (macs > 0) {
    // 2 FLOPs per multiply-accumulate; the three passes of a GEMM-shaped layer
    // are GEMMs of the same size (bias terms are not counted).
    layer.fwdFlops = 2 * double(macs);
    layer.bwdDataFlops = 2 * double(macs);
    layer.bwdWeightsFlops = 2 * double(macs);
  }
  layer.outShape = out;
  const double nOut = static_cast<double>(out.elements());
  double nInAll = 0;
  for (const auto& shape : inputShapes)
    nInAll += static_cast<double>(shape.elements());
  layer.fwdElems = nInAll + nOut;            // read inputs, write output
  layer.bwdDataElems = nOut + nInAll + nIn;  // read dy and saved x, write dx
  layer.bwdWeightsElems = layer.computesWeightGradient() ? nIn + nOut : 0;  // read x and dy
}

void deriveLayer(Layer& layer, const std::vector<Shape>& inputShapes, const std::string& file,
                 int index) {
  const std::string key = fmt::format("layers[{}]", index);
  const Shape in = inputShapes.at(0);
  layer.inShape = in;
  LayerDerivation d{layer, inputShapes, in, layer.spec, file, key, 0, in, 0, false};
  // The loader checks the network input; earlier layers checked their outputs.
  d.nIn = static_cast<double>(d.count({in.c, in.h, in.w}, "input elements"));
  layerKindRow(layer.kind).derive(d);
  if (!d.done)
    d.finish();
}

}  // namespace strata
