// The compute backend: the kernels a Model runs, behind one interface.
//
// Model and strategy code call layers only through Backend, so a CUDA backend
// (cuBLAS, cuDNN) can be added beside CpuBackend without touching them. The
// interface is shaped like cuDNN's: one call per layer and phase on views of
// a batch, weights as raw arrays, and a `beta` on every gradient a consumer
// writes into its producer (0: overwrite, 1: add; a value read by several
// layers sums their gradients).
//
// Conventions for every kernel:
//  - x, y, dx, dy are NCHW views of the same n examples; the batch is whatever
//    n the views carry, so callers slice batches by passing sub-views.
//  - Weight gradients (dw, dbias, dgamma, dbeta) are accumulated (+=) so that
//    calls over several example ranges or rounds sum; the caller zeroes them.
//  - Weights are row-major arrays; a model-parallel fc passes only its rows.
//  - A Backend keeps scratch space and is not thread-safe: one per worker.
//
// Memory: every view and array a kernel takes comes from the backend's
// memory() (host memory for the CPU, device memory for the CUDA backend: see
// memory.h). The host dereferences those pointers only when the memory says
// hostAccessible(); otherwise it copies through the memory's upload and
// download, which are ordered with the kernels. Kernels may run
// asynchronously: synchronize() waits for them (a communicator copying on
// its own stream starts after it).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "strata/exec/nn/kernel_recorder.h"
#include "strata/exec/nn/memory.h"
#include "strata/exec/nn/synthetic_batch.h"
#include "strata/exec/nn/tensor.h"
#include "strata/model/network.h"

namespace strata::nn {

// Geometry of a convolution x (n, inC, inH, inW) -> y (n, filters, outH, outW)
// with weights (filters, inC / groups, kernelH, kernelW) and bias (filters).
// pad rows of zeros above and below, padW columns left and right (-1: pad);
// the kernel's taps `dilation` inputs apart in both dimensions.
struct ConvDesc {
  int inC = 0, inH = 0, inW = 0;
  int filters = 0;
  int kernelH = 0, kernelW = 0;
  int stride = 1, pad = 0, groups = 1;
  int outH = 0, outW = 0;
  int padW = -1;
  int dilation = 1;
  int widthPad() const { return padW < 0 ? pad : padW; }
};

// The pointwise activations of vision networks (Backend::activationForward),
// as PyTorch's torch.nn modules of the same names compute them and their
// gradients.
enum class Activation {
  kSigmoid,      // 1 / (1 + exp(-x))
  kSilu,         // x sigmoid(x)
  kRelu6,        // min(max(x, 0), 6)
  kHardSigmoid,  // relu6(x + 3) / 6
  kHardSwish,    // x relu6(x + 3) / 6
  kTanh,         // tanh(x)
};
// "sigmoid", "silu", "relu6", "hardsigmoid", "hardswish", "tanh": the layer kinds'
// names.
std::string_view toString(Activation fn);

// Geometry of a pooling window; padding never contributes (max ignores it,
// avg divides by the number of input elements inside the window).
struct PoolDesc {
  PoolMode mode = PoolMode::kMax;
  int c = 0, inH = 0, inW = 0;
  int kernelH = 0, kernelW = 0;
  int stride = 1, pad = 0;
  int outH = 0, outW = 0;
};

// A fully-connected layer. flatten: x is (n, inFeatures) with inFeatures =
// c*h*w and y is (n, outputs, 1, 1); weights (outputs, inFeatures). Without
// flatten: the same weights (outputs, inFeatures = c) apply at each of the h*w
// positions, y is (n, outputs, h, w). `outputs` counts the rows this worker
// holds (a model-parallel slice or the whole layer).
struct FcDesc {
  bool flatten = true;
  int inFeatures = 0;
  int outputs = 0;
};

// Cross-channel response normalisation (Krizhevsky et al. 2012, section 3.3):
//   y_i = x_i / s_i^beta,  s_i = k + alpha * sum_{j in window(i)} x_j^2,
// window(i) = channels [i - (size-1)/2, i + size/2] clipped to [0, c) (for
// odd size: i +- size/2). alpha is not divided by size, as in the paper's
// formula (Caffe and PyTorch divide it by size). Defaults: the paper's k = 2,
// alpha = 1e-4, beta = 0.75.
struct LrnDesc {
  int size = 5;
  float k = 2.0f;
  float alpha = 1e-4f;
  float beta = 0.75f;
};

// Inverted dropout with a counter-based mask: element (row, channel, pos) of
// the full layer is kept when uniform(seed, step, layer, firstRow + row,
// (channelOffset + channel) * h*w + pos) >= rate, and kept elements are scaled
// by 1 / (1 - rate). The mask is a pure function of those coordinates, so
// backward recomputes it instead of storing it, and a model-parallel slice
// (channelOffset > 0) drops exactly the elements the whole layer would.
struct DropoutDesc {
  float rate = 0.5f;
  uint64_t seed = 0;
  uint64_t step = 0;
  int layer = 0;
  int firstRow = 0;       // row of the view's first example within the layer's batch
  int channelOffset = 0;  // first channel of the slice within the whole layer
  int totalChannels = 0;  // channels of the whole layer
  // Sequence parallelism: the view holds positions [firstPosition,
  // firstPosition + h*w) of each channel's totalPositions (0: the view's
  // plane is the whole layer's).
  int firstPosition = 0;
  int totalPositions = 0;
};

// Softmax statistics per position (example x h x w): the max of the logits
// and the sum of exp(logit - max), over the classes (channels) a worker holds.
// Stored interleaved [max0, sum0, max1, sum1, ...]; see mergeSoftmaxStats.
struct SoftmaxLossSum {
  double loss = 0;      // sum over positions whose label is held of (max + log sum - z_label)
  int64_t correct = 0;  // positions whose label is held and whose label logit is the max
};

// Multi-head self-attention over a sequence x (n, d, T, 1): d = c features,
// T = h*w positions (Vaswani et al. 2017; GPT-2's attention). Per example,
// with the weights Wqkv (3d x d), Wo (d x d) then the biases bqkv (3d), bo (d):
//   QKV = Wqkv x + bqkv  (3d x T: rows [0, d) Q, [d, 2d) K, [2d, 3d) V; head
//                         h's Q_h, K_h, V_h are rows [h dh, (h+1) dh) of each)
//   P_h = softmax(Q_h^T K_h / sqrt(dh)) per row (query), keys after the query
//         masked out when causal;   C_h = V_h P_h^T;   y = Wo C + bo.
// The GEMMs and kernels are those model/cost/src/lowering.cpp's lowerCpu prices.
//
// Grouped-query attention (Ainslie et al. 2023; Llama 2 70B, Llama 3): with
// kvHeads < heads, K and V have kvHeads heads of dh rows each (kv = kvHeads
// dh rows), Wqkv is (d + 2 kv) x d (rows [0, d) Q, [d, d + kv) K, [d + kv,
// d + 2 kv) V, and QKV likewise), and query head h reads key/value head
// h / (heads / kvHeads). Rotary positions (Su et al., "RoFormer", 2021, eq.
// 34; Llama): after the projection, in each head of Q and of K, features i
// and i + dh/2 (i < dh/2) at position p turn by the angle p base^(-2i/dh):
//   q_i' = q_i cos - q_{i+dh/2} sin,  q_{i+dh/2}' = q_{i+dh/2} cos + q_i sin
// (Hugging Face's rotate_half pairing); QKV keeps the turned Q and K.
//
// A tensor-parallel worker's share (Megatron, Shoeybi et al. 2019, section
// 3): `heads` (and kvHeads) of its own, whose Q, K and V rows it holds, so
// the inner width a = heads dh is innerFeatures < d: Wqkv is (a + 2 kv) x d,
// Wo d x a (the columns of its heads), QKV (a + 2 kv) x T, C a x T, and y
// the worker's partial sum of the output projection.
struct AttentionDesc {
  int features = 0;   // d: x's and y's channels
  int positions = 0;  // T
  int heads = 1;
  bool causal = true;
  int kvHeads = 0;  // 0: heads (multi-head attention)
  bool rotary = false;
  float rotaryBase = 10000.0f;
  int innerFeatures = 0;  // a = heads x dh; 0: d (every head)
  // false: y without bo (a tensor-parallel worker but the first: the group's
  // sum adds it once); bo's gradient is written all the same.
  bool outputBias = true;
  // false: the biases are bqkv alone, no bo (qkv_bias, Qwen2): y has none and
  // no gradient of one is written.
  bool hasOutputBias = true;
  int inner() const { return innerFeatures > 0 ? innerFeatures : features; }
  int headFeatures() const { return inner() / heads; }
  int keyValueHeads() const { return kvHeads > 0 ? kvHeads : heads; }
  // The features of each head that rotary positions turn (the first ones;
  // GPT-NeoX's rotary_pct); 0: all of them.
  int rotaryDims = 0;
  int rotaryFeatures() const { return rotaryDims > 0 ? rotaryDims : headFeatures(); }
  // Rows of K (and of V): kvHeads x dh.
  int keyValueFeatures() const { return keyValueHeads() * headFeatures(); }
  // Rows of QKV: a + 2 kv (3 d for multi-head attention).
  int qkvFeatures() const { return inner() + 2 * keyValueFeatures(); }
  // Whether this needs more than multi-head attention (backend.h's
  // runsLlamaLayers).
  bool llama() const { return keyValueHeads() != heads || rotary; }
};

// What an attention layer keeps from forward for its backward passes, and
// the gradient its bwd_weights leaves for its bwd_data (all per example).
struct AttentionSaved {
  TensorView qkv;      // (n, qkvFeatures, T, 1)
  float* probs;        // n x heads x T x T, row (query) major
  TensorView context;  // C (n, a, T, 1)
  TensorView dqkv;     // (n, qkvFeatures, T, 1): written by bwd_weights, read by bwd_data
};

// An embedding: x holds token ids (n, 1, T, 1) as floats (exact integers);
// y (n, features, T, 1) with y[:, t] = table[id_t] (+ pos[t] when the layer
// has a position table). Tables are row-major: vocab x features, then
// positions x features.
//
// A vocabulary-parallel worker (Megatron) holds rows [firstToken, firstToken
// + tokens) of the token table only: a token outside them gives a zero row
// and no gradient, and the workers' outputs sum to the whole layer's. Each
// holds the whole position table; one of them adds it (addPositions), every
// one adds into its gradient.
struct EmbeddingDesc {
  int vocab = 0;
  int features = 0;
  bool positions = false;  // whether a position table follows the token table
  int firstToken = 0;
  int tokens = -1;  // rows of the token table held; -1: vocab (every token)
  bool addPositions = true;
  int rows() const { return tokens < 0 ? vocab : tokens; }
  bool holds(int token) const { return token >= firstToken && token < firstToken + rows(); }
};

// Adam's hyper-parameters and the step it takes (Backend::adam). Defaults:
// PyTorch's torch.optim.Adam (lr 1e-3, betas (0.9, 0.999), eps 1e-8,
// weight_decay 0; https://pytorch.org/docs/stable/generated/torch.optim.Adam.html);
// torch.optim.AdamW differs only in weight_decay 0.01 (kAdamWWeightDecay).
struct AdamParams {
  float learningRate = 1e-3f;
  float beta1 = 0.9f;    // decay of the first moment m, in [0, 1)
  float beta2 = 0.999f;  // decay of the second moment v, in [0, 1)
  float eps = 1e-8f;     // added to sqrt(v-hat), > 0
  float weightDecay = 0;
  // AdamW (Loshchilov and Hutter 2019): w *= 1 - lr weightDecay before the
  // step; else Adam's L2 form, weightDecay w added to the gradient.
  bool decoupled = false;
  // t >= 1: the bias corrections 1 - beta^t of the moments that started at 0.
  int64_t step = 1;
};
// torch.optim.AdamW's default weight_decay
// (https://pytorch.org/docs/stable/generated/torch.optim.AdamW.html).
inline constexpr float kAdamWWeightDecay = 0.01f;

class Backend {
 public:
  virtual ~Backend() = default;
  // "cpu", "cuda", ...
  virtual std::string_view name() const = 0;
  // Where this backend's buffers must live.
  virtual Memory& memory() { return hostMemory(); }
  // Waits until every kernel called so far has finished (and reports an
  // asynchronous failure as an exception); the CPU's kernels finish before
  // they return.
  virtual void synchronize() {}
  // Writes a batch of synthetic examples into x (this backend's memory).
  // The CPU backend writes them on the host. A GPU backend makes them with a
  // kernel where x lives (the host's Box-Muller takes ~0.2 s for an ImageNet
  // batch of 64), from the classes and keys it uploads; token ids
  // (batch.tokens) from their seed, indices and positions alone; given
  // values (batch.values) it uploads as they are.
  virtual void writeSynthetic(const SyntheticBatch& batch, TensorView x) {
    syntheticFill(batch, x);
  }
  // Reports every kernel call made from now on to `recorder` (null: none);
  // see kernel_recorder.h. A record-only recorder makes the calls skip their
  // work. Not owned; it must outlive its use here.
  virtual void setRecorder(KernelRecorder* recorder) { recorder_ = recorder; }
  KernelRecorder* recorder() const { return recorder_; }

  // ---- convolution (im2col + GEMM on CPU) ----
  virtual void convForward(const ConvDesc& d, ConstTensorView x, const float* w, const float* bias,
                           TensorView y) = 0;
  // dx = W^T * dy (col2im), dx = that + beta * dx.
  virtual void convBackwardData(const ConvDesc& d, ConstTensorView dy, const float* w,
                                TensorView dx, float beta) = 0;
  // dw += dy * im2col(x)^T; dbias += sum of dy over examples and positions
  // (dbias may be null when the layer has no bias).
  virtual void convBackwardWeights(const ConvDesc& d, ConstTensorView x, ConstTensorView dy,
                                   float* dw, float* dbias) = 0;

  // ---- pooling ----
  // argmax (max mode only; may be null for avg) receives, per output element,
  // the index within its example's input plane of the chosen input; ties pick
  // the first in row-major window order.
  virtual void poolForward(const PoolDesc& d, ConstTensorView x, TensorView y, int32_t* argmax) = 0;
  virtual void poolBackward(const PoolDesc& d, ConstTensorView dy, const int32_t* argmax,
                            TensorView dx, float beta) = 0;

  // ---- fully connected ----
  virtual void fcForward(const FcDesc& d, ConstTensorView x, const float* w, const float* bias,
                         TensorView y) = 0;
  // dx = dy * W (for a slice: the slice's partial sum), dx = that + beta * dx.
  virtual void fcBackwardData(const FcDesc& d, ConstTensorView dy, const float* w, TensorView dx,
                              float beta) = 0;
  // dw += dy^T * x; dbias += column sums of dy (may be null).
  virtual void fcBackwardWeights(const FcDesc& d, ConstTensorView x, ConstTensorView dy, float* dw,
                                 float* dbias) = 0;

  // ---- elementwise ----
  virtual void reluForward(ConstTensorView x, TensorView y) = 0;
  // dx = (y > 0 ? dy : 0) + beta * dx.
  virtual void reluBackward(ConstTensorView y, ConstTensorView dy, TensorView dx, float beta) = 0;
  virtual void dropoutForward(const DropoutDesc& d, ConstTensorView x, TensorView y) = 0;
  virtual void dropoutBackward(const DropoutDesc& d, ConstTensorView dy, TensorView dx,
                               float beta) = 0;
  // x = value (zeroing gradients before a round; clearing a summed gradient).
  virtual void fill(std::span<float> x, float value) = 0;
  // dst's channels [offset, offset + src.c) = src (same n, h, w): a model-
  // parallel slice into the whole input of the next layer. The CPU copies on
  // the host, a GPU with one 2-D copy on its stream.
  virtual void copyIntoChannels(ConstTensorView src, TensorView dst, int channelOffset) {
    nn::copyIntoChannels(src, dst, channelOffset);
  }
  // y = a + b.
  virtual void add(ConstTensorView a, ConstTensorView b, TensorView y) = 0;
  // dst = src + beta * dst.
  virtual void accumulate(ConstTensorView src, TensorView dst, float beta) = 0;

  // ---- local response normalisation ----
  // scale receives s_i (same dims as x), kept for backward.
  virtual void lrnForward(const LrnDesc& d, ConstTensorView x, TensorView y, TensorView scale) = 0;
  virtual void lrnBackward(const LrnDesc& d, ConstTensorView x, ConstTensorView y,
                           ConstTensorView scale, ConstTensorView dy, TensorView dx,
                           float beta) = 0;

  // ---- batch normalisation, training mode ----
  // Normalises each channel with the mean and (biased) variance over the n*h*w
  // values of the view: y = gamma * (x - mean) / sqrt(var + eps) + shift.
  virtual void batchNormForward(ConstTensorView x, const float* gamma, const float* shift,
                                float eps, TensorView y) = 0;
  // Gradient through the batch statistics of the same view.
  virtual void batchNormBackwardData(ConstTensorView x, ConstTensorView dy, const float* gamma,
                                     float eps, TensorView dx, float beta) = 0;
  // dgamma += sum(dy * xhat); dshift += sum(dy).
  virtual void batchNormBackwardWeights(ConstTensorView x, ConstTensorView dy, float eps,
                                        float* dgamma, float* dshift) = 0;

  // ---- softmax + cross-entropy over channels, per position ----
  // stats: 2 floats per position of the view (see SoftmaxLossSum).
  virtual void softmaxStats(ConstTensorView logits, float* stats) = 0;
  // y = exp(z - max) / sum with the given stats.
  virtual void softmaxProbabilities(ConstTensorView logits, const float* stats, TensorView y) = 0;
  // Loss terms of the positions whose label falls in [classOffset,
  // classOffset + logits.c); labels are whole-layer class indices.
  virtual SoftmaxLossSum softmaxLoss(ConstTensorView logits, const float* stats,
                                     const int32_t* labels, int classOffset) = 0;
  // dz = scale * (softmax(z) - onehot(label)) + beta * dz, for the classes held.
  virtual void softmaxBackward(ConstTensorView logits, const float* stats, const int32_t* labels,
                               int classOffset, float scale, TensorView dlogits, float beta) = 0;

  // ---- transformer layers ----
  // Whether this backend runs the kernels below; Model refuses a network with
  // transformer layers on one that does not, naming the layer. Their default
  // implementations throw a UserError naming the kernel and the backend.
  virtual bool runsTransformerLayers() const { return false; }

  // Layer normalisation (Ba et al. 2016) of each position over its c
  // channels: y = gain * (x - mean) / sqrt(var + eps) + bias, mean and
  // (biased) variance over the c values of the position (stride h*w in NCHW).
  virtual void layerNormForward(ConstTensorView x, const float* gain, const float* bias, float eps,
                                TensorView y);
  virtual void layerNormBackwardData(ConstTensorView x, ConstTensorView dy, const float* gain,
                                     float eps, TensorView dx, float beta);
  // dgain += sum over positions of dy * xhat; dbias += sum of dy.
  virtual void layerNormBackwardWeights(ConstTensorView x, ConstTensorView dy, float eps,
                                        float* dgain, float* dbias);

  // GELU, tanh approximation (Hendrycks & Gimpel 2016, as GPT-2):
  // y = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))).
  virtual void geluForward(ConstTensorView x, TensorView y);
  // dx = dy * gelu'(x) + beta * dx.
  virtual void geluBackward(ConstTensorView x, ConstTensorView dy, TensorView dx, float beta);

  // Whether this backend runs Llama's layers: rmsnorm, swiglu, and attention
  // with grouped keys and values or rotary positions (AttentionDesc::llama).
  // Model refuses a network with them on one that does not, naming the layer.
  virtual bool runsLlamaLayers() const { return false; }
  // Whether this backend runs a tensor-parallel worker's share of layers:
  // attention over some of its heads (AttentionDesc::innerFeatures) and an
  // embedding over some of the vocabulary (EmbeddingDesc::tokens). Model
  // refuses a tensor-parallel layout on one that does not.
  virtual bool runsTensorParallelLayers() const { return false; }

  // RMSNorm (Zhang & Sennrich 2019) of each position over its c channels:
  // y = gain * x / rms, rms = sqrt(mean of x^2 over the c values + eps).
  virtual void rmsNormForward(ConstTensorView x, const float* gain, float eps, TensorView y);
  // dx = (gain dy - xhat mean(gain dy xhat)) / rms + beta dx, xhat = x / rms.
  virtual void rmsNormBackwardData(ConstTensorView x, ConstTensorView dy, const float* gain,
                                   float eps, TensorView dx, float beta);
  // dgain += sum over positions of dy * xhat.
  virtual void rmsNormBackwardWeights(ConstTensorView x, ConstTensorView dy, float eps,
                                      float* dgain);

  // SwiGLU's gate (Shazeer 2020): x (n, 2f, h, w) holds a in channels
  // [0, f) and b in [f, 2f); y (n, f, h, w) = silu(a) * b, silu(a) = a
  // sigmoid(a).
  virtual void swigluForward(ConstTensorView x, TensorView y);
  // da = dy b silu'(a), db = dy silu(a); dx (as x) = that + beta dx.
  virtual void swigluBackward(ConstTensorView x, ConstTensorView dy, TensorView dx, float beta);

  // See AttentionDesc; fills saved.qkv, saved.probs and saved.context.
  virtual void attentionForward(const AttentionDesc& d, ConstTensorView x, const float* w,
                                const float* bias, const AttentionSaved& saved, TensorView y);
  // dWo, dWqkv (dw, laid out as w) and dbias (may be null) += their
  // gradients; writes saved.dqkv for attentionBackwardData.
  virtual void attentionBackwardWeights(const AttentionDesc& d, ConstTensorView x,
                                        ConstTensorView dy, const float* w,
                                        const AttentionSaved& saved, float* dw, float* dbias);
  // dx = Wqkv^T dqkv + beta * dx.
  virtual void attentionBackwardData(const AttentionDesc& d, ConstTensorView dqkv, const float* w,
                                     TensorView dx, float beta);
  // Selective recomputation (Korthikanti et al. 2023, section 5): the
  // attention core again from saved.qkv (Q and K as rotated): the scores,
  // their softmax into saved.probs and the context into saved.context, the
  // bits attentionForward wrote, without the projections. Backends that
  // cannot say so in runsAttentionCore.
  virtual void attentionCoreForward(const AttentionDesc& d, const AttentionSaved& saved);
  virtual bool runsAttentionCore() const { return false; }

  // Gathers the token (and position) vectors; an id outside [0, vocab) is an
  // error naming both values.
  virtual void embeddingForward(const EmbeddingDesc& d, ConstTensorView ids, const float* table,
                                TensorView y);
  // Scatter-adds dy into the rows of the ids (and of the positions): dtable
  // is laid out as the tables.
  virtual void embeddingBackwardWeights(const EmbeddingDesc& d, ConstTensorView ids,
                                        ConstTensorView dy, float* dtable);

  // ---- vision networks' layers ----
  // Whether this backend runs the kernels below (concat, mul, slice,
  // shuffle, scale, the vision transformer's class token, position table and
  // token, and the activations of Activation); Model refuses a network with those layers on
  // one that does not, naming the layer. Their default implementations throw
  // a UserError naming the kernel and the backend.
  virtual bool runsVisionLayers() const { return false; }

  // y = fn(x), element by element (x and y of the same dims).
  virtual void activationForward(Activation fn, ConstTensorView x, TensorView y);
  // dx = dy fn'(x) + beta dx, with PyTorch's derivative at the kinks (relu6:
  // 0 at 0 and 6; hardsigmoid: 0 at -3 and 3; hardswish: (2 x + 3) / 6 on
  // [-3, 3]). y is forward's output: sigmoid, relu6 and tanh read it (their
  // derivative is a function of it), the others x.
  virtual void activationBackward(Activation fn, ConstTensorView x, ConstTensorView y,
                                  ConstTensorView dy, TensorView dx, float beta);

  // dst = src's channels [channelOffset, channelOffset + dst.c) + beta dst
  // (same n, h, w): the gradient of one input of a concatenation, whose
  // forward is copyIntoChannels.
  virtual void copyFromChannels(ConstTensorView src, int channelOffset, TensorView dst, float beta);
  // dst's channels [channelOffset, channelOffset + src.c) = src + beta of
  // them (same n, h, w), dst's other channels untouched: the gradient a
  // slice's backward adds into its input's.
  virtual void addIntoChannels(ConstTensorView src, TensorView dst, int channelOffset, float beta);
  // y = x's channels shuffled + beta y: x's C channels read as `groups`
  // groups of C / groups, channel j of group i written to channel
  // j * groups + i (ShuffleNet's channel shuffle; its inverse is the
  // shuffle of C / groups groups).
  virtual void shuffleChannels(ConstTensorView x, int groups, TensorView y, float beta);
  // Layer scale: y = gamma[c] x + beta y, gamma one value per channel (also
  // backward's dx = gamma dy + beta dx); and its gradient, dgamma[c] += the
  // sum over examples and positions of dy x.
  virtual void scaleChannels(ConstTensorView x, const float* gamma, TensorView y, float beta);
  virtual void scaleBackwardWeights(ConstTensorView x, ConstTensorView dy, float* dgamma);

  // Sequences of positions (vision transformers): a view's positions are the
  // h*w of each channel's plane, in order (a sequence C x T x 1 has T).
  //
  // dst's positions [dstFirst, dstFirst + count) of every example and channel
  // = src's [srcFirst, srcFirst + count) + beta of them, dst's other
  // positions untouched (same n and c; both ranges inside their planes): a
  // class token's input into the positions after the tokens and its
  // gradient back, a token's position out and its gradient back in.
  virtual void copyPositions(ConstTensorView src, int srcFirst, TensorView dst, int dstFirst,
                             int count, float beta);
  // dst's positions [dstFirst, dstFirst + count) of every example = table, a
  // C x count array (channel-major, dst's c channels), the same for every
  // example: a class token's learned tokens before the positions.
  virtual void broadcastPositions(const float* table, int count, TensorView dst, int dstFirst);
  // y = x + table, table one example's elements (C x h x w) added to every
  // example: a learned position table.
  virtual void addTable(ConstTensorView x, const float* table, TensorView y);
  // table[c][j] += the sum over examples of src's position srcFirst + j of
  // channel c, for j in [0, count) (table C x count, channel-major): the
  // gradient of broadcastPositions' and addTable's tables.
  virtual void sumPositions(ConstTensorView src, int srcFirst, int count, float* table);

  // y = x g, where g is x's dims or one value per channel of each example
  // (n, c, 1, 1) broadcast over the positions (a squeeze-excitation gate).
  virtual void mulForward(ConstTensorView x, ConstTensorView g, TensorView y);
  // dx = dy g + betaX dx; dg = dy x (summed over the positions for a
  // per-channel g) + betaG dg, in one kernel. dx and dg may be one buffer
  // (x * x: both betas 1, the Model's summed gradient).
  virtual void mulBackward(ConstTensorView x, ConstTensorView g, ConstTensorView dy, TensorView dx,
                           float betaX, TensorView dg, float betaG);

  // ---- optimiser ----
  // SGD with momentum in the form of Krizhevsky et al. (2012, section 5) and
  // Sutskever et al. (2013):  v = momentum * v - lr * (g + weightDecay * w);
  // w = w + v. Equivalent to PyTorch's form (v' = mu v' + g; w -= lr v') for
  // a constant learning rate, with v = -lr v'.
  virtual void sgdMomentum(std::span<float> w, std::span<float> v, std::span<const float> g,
                           float learningRate, float momentum, float weightDecay) = 0;
  // Adam (Kingma and Ba 2015) or AdamW (Loshchilov and Hutter 2019) at step
  // p.step >= 1 on w with the moments m and v (zero before step 1) and the
  // gradient g, all of one size:  (AdamW: w *= 1 - lr wd; Adam: g += wd w)
  //   m = b1 m + (1 - b1) g;  v = b2 v + (1 - b2) g^2;
  //   w -= lr / (1 - b1^t) * m / (sqrt(v) / sqrt(1 - b2^t) + eps).
  // Every backend computes each element as kernels/elementwise.h's adam().
  virtual void adam(std::span<float> w, std::span<float> m, std::span<float> v,
                    std::span<const float> g, const AdamParams& p) = 0;

 protected:
  // Throws the UserError of a transformer kernel this backend lacks.
  [[noreturn]] void lacks(std::string_view kind) const;
  // The same for a vision network's kernel (runsVisionLayers).
  [[noreturn]] void lacksVision(std::string_view kind) const;

  // Whether to do a kernel call's work: reports the call to the recorder, if
  // any, and says false when that recorder only records. Each sits beside
  // the call it describes, so a recording lists what the code runs.
  bool runs(const KernelCall& call) {
    if (recorder_ == nullptr)
      return true;
    recorder_->record(call);
    return !recorder_->recordOnly();
  }
  bool runs(MemKernel kernel, double units, double window = 0) {
    return recorder_ == nullptr || runs(memoryCall(kernel, units, window));
  }
  bool runsColumns(MemKernel kernel, double units, const ConvDesc& d) {
    return recorder_ == nullptr || runs(columnsCall(kernel, units, d.outW, d.stride));
  }
  bool runsGemm(GemmOp op, int64_t m, int64_t n, int64_t k, bool accumulate = false) {
    return recorder_ == nullptr || runs(gemmCall(op, m, n, k, 1, accumulate));
  }
  // Whether the recorder, if any, only records (scratch need not be sized).
  bool recordOnly() const { return recorder_ != nullptr && recorder_->recordOnly(); }

  KernelRecorder* recorder_ = nullptr;
};

}  // namespace strata::nn
