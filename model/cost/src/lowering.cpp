#include "strata/model/lowering.h"

#include <algorithm>
#include <cmath>

#include "strata/model/error.h"

namespace strata {

namespace {

int readersOf(const Network& net, int producer) {
  int n = 0;
  for (const auto& l : net.layers)
    n += static_cast<int>(std::count(l.inputs.begin(), l.inputs.end(), producer));
  return n;
}

int firstReaderOf(const Network& net, int producer) {
  for (size_t i = 0; i < net.layers.size(); ++i)
    for (int p : net.layers[i].inputs)
      if (p == producer)
        return static_cast<int>(i);
  return -1;
}

}  // namespace

std::vector<KernelCall> lowerCpu(const Network& net, int index, Phase phase, double examples,
                                 int outputs, MemKernel update, int threads) {
  STRATA_ENFORCE(index >= 0 && index < static_cast<int>(net.layers.size()));
  const Layer& l = net.layers[static_cast<size_t>(index)];
  const int64_t n = std::max<int64_t>(1, std::llround(examples));
  const bool sliced = outputs > 0 && l.kind == LayerKind::kFc;
  const int64_t channels = outputs > 0 ? outputs : l.outShape.c;
  const int64_t area = int64_t{l.outShape.h} * l.outShape.w;
  const double outElems = double(n) * double(channels) * double(area);
  const double inElems = double(n) * double(l.inShape.elements());
  std::vector<KernelCall> calls;
  // `accumulate`: C += op(A) op(B), as the backend calls it (else C =);
  // `holds`: what A, B and C hold (scratch unless said).
  using O = GemmOperand;
  struct Holds {
    O a = O::kScratch, b = O::kScratch, c = O::kScratch;
  };
  auto gemm = [&](GemmOp op, int64_t m, int64_t nn, int64_t k, double count,
                  bool accumulate = false, Holds holds = {}) {
    if (count <= 0)
      return;
    KernelCall c;
    c.gemm = true;
    c.op = op;
    c.m = m;
    c.n = nn;
    c.k = k;
    c.count = count;
    c.accumulate = accumulate;
    c.a = holds.a;
    c.b = holds.b;
    c.c = holds.c;
    calls.push_back(c);
  };
  auto mem = [&](MemKernel kernel, double units, double count = 1, double window = 0) {
    if (units <= 0 || count <= 0)
      return;
    KernelCall c;
    c.kernel = kernel;
    c.units = units;
    c.window = window;
    c.count = count;
    calls.push_back(c);
  };
  // im2col or col2im of the convolution, with its row width and stride.
  auto columns = [&](MemKernel kernel, double units, double count) {
    const size_t before = calls.size();
    mem(kernel, units, count);
    if (calls.size() > before) {
      calls.back().rowWidth = l.outShape.w;
      calls.back().stride = l.spec.stride;
    }
  };
  // The gradient into input `which` is summed (beta 1) when several layers
  // read that input; else it is overwritten, after a zero fill for the
  // kernels that accumulate.
  auto summedInto = [&](size_t which) { return !sliced && readersOf(net, l.inputs[which]) > 1; };
  const int cg = l.kind == LayerKind::kConv ? l.inShape.c / std::max(1, l.spec.groups) : 0;
  const int fg = l.kind == LayerKind::kConv ? l.spec.filters / std::max(1, l.spec.groups) : 0;
  const int64_t ck = int64_t{cg} * l.spec.kernelH * l.spec.kernelW;  // column rows
  const bool pointwise = l.spec.kernelH == 1 && l.spec.kernelW == 1 && l.spec.stride == 1 &&
                         l.spec.pad == 0 && l.spec.padWidth() == 0 && l.spec.dilation == 1;
  // Elements per example of input `which` (the network input for -1).
  auto inputElems = [&](size_t which) {
    const int p = l.inputs[which];
    return double(n) * double(p < 0 ? net.input.elements()
                                    : net.layers[static_cast<size_t>(p)].outShape.elements());
  };
  const int64_t fcIn = l.spec.flatten ? l.inShape.elements() : l.inShape.c;
  const int64_t inArea = int64_t{l.inShape.h} * l.inShape.w;
  const int poolH = l.spec.global ? l.inShape.h : l.spec.kernelH;
  const int poolW = l.spec.global ? l.inShape.w : l.spec.kernelW;
  // attention: d features, T positions, dh features per head
  const int64_t d = l.inShape.c;
  const int64_t t = inArea;
  const int64_t dh = l.spec.heads > 0 ? d / l.spec.heads : 0;
  const int64_t rows = l.kind == LayerKind::kAttention ? l.qkvRows() : 0;  // Q, K, V rows
  // In windows (Swin) or grids (MaxViT): the padded grid's positions, the
  // keys each query scores and the windows per example (T, T and 1 without).
  const bool attention = l.kind == LayerKind::kAttention;
  const int64_t tp = attention ? l.attentionPositions() : t;
  const int64_t span = attention ? l.attentionSpan() : t;
  const int64_t windows = attention && span > 0 ? tp / span : 1;
  // Elements of Q and K per example that rotary positions turn (the first
  // rotaryFeatures() of each head's dh).
  const double rotated = attention && l.spec.rotary ? double(d + (rows - d) / 2) * double(tp) *
                                                          double(l.rotaryFeatures()) / double(dh)
                                                    : 0.0;
  // Adds to the scores per example: the position bias, the shift's mask
  // and cosine attention's scale.
  const bool shifted = attention && (l.shiftH() > 0 || l.shiftW() > 0);
  const double scoreAdds = attention ? double(l.spec.heads) * double(tp) * double(span) *
                                           ((l.spec.positionBias != PositionBias::kNone ? 1 : 0) +
                                            (shifted ? 1 : 0) + (l.spec.cosine ? 1 : 0))
                                     : 0.0;
  // One way of the copies of x (or of a gradient) between the grid and its
  // windows: padded (T d read, P d written), rolled by the shift.
  auto windowCopies = [&] {
    if (!attention || l.partitionSide() <= 0)
      return;
    mem(MemKernel::kCopy, double(tp) * double(d), double(n));
    if (shifted)
      mem(MemKernel::kCopy, double(t) * double(d), double(n));
  };

  switch (phase) {
    case Phase::kUpdate: {
      const double share = outputs > 0 ? double(outputs) / double(l.outShape.c) : 1.0;
      mem(update, double(l.params) * share);
      break;
    }
    case Phase::kFwd:
      // The first reader of a value several layers read (the network input
      // too) clears its gradient.
      if (!sliced)
        for (int p : l.inputs)
          if (readersOf(net, p) > 1 && firstReaderOf(net, p) == index)
            mem(MemKernel::kZero,
                double(n) * double(p < 0 ? net.input.elements()
                                         : net.layers[static_cast<size_t>(p)].outShape.elements()));
      switch (l.kind) {
        case LayerKind::kConv: {
          const double count = double(n) * l.spec.groups;
          if (!pointwise)
            columns(MemKernel::kIm2col, double(ck * area), count);
          gemm(GemmOp::kNN, fg, area, ck, count, false,
               {O::kWeights, pointwise ? O::kInput : O::kScratch, O::kOutput});
          if (l.spec.bias)
            mem(MemKernel::kBias, double(fg) * double(area), count);
          break;
        }
        case LayerKind::kPool:
          mem(l.spec.poolMode == PoolMode::kMax ? MemKernel::kPoolMaxFwd : MemKernel::kPoolAvgFwd,
              outElems * poolH * poolW, 1, double(poolH) * poolW);
          break;
        case LayerKind::kFc:
          if (l.spec.flatten) {
            gemm(GemmOp::kNT, n, channels, fcIn, 1, false, {O::kInput, O::kWeights, O::kOutput});
            if (l.spec.bias)
              mem(MemKernel::kBias, double(n) * double(channels));
          } else {
            gemm(GemmOp::kNN, channels, inArea, fcIn, double(n), false,
                 {O::kWeights, O::kInput, O::kOutput});
            if (l.spec.bias)
              mem(MemKernel::kBias, double(channels) * double(inArea), double(n));
          }
          break;
        case LayerKind::kRelu:
          mem(MemKernel::kReluFwd, outElems);
          break;
        case LayerKind::kDropout:
          mem(l.spec.dropoutRate > 0 ? MemKernel::kDropoutFwd : MemKernel::kCopy, outElems);
          break;
        case LayerKind::kLrn:
          mem(MemKernel::kLrnFwd, outElems);
          break;
        case LayerKind::kBatchNorm:
          mem(MemKernel::kBatchNormFwd, outElems);
          break;
        case LayerKind::kAdd:
          mem(MemKernel::kAdd, outElems);
          mem(MemKernel::kAccumulate, outElems, double(l.inputs.size()) - 2);
          break;
        case LayerKind::kSoftmax:
          mem(MemKernel::kSoftmaxFwd, outElems);
          break;
        case LayerKind::kEmbedding:
          mem(MemKernel::kEmbeddingFwd, outElems);
          break;
        case LayerKind::kAttention: {
          // Per example (x: d x T), per head (Q, K, V: dh x T):
          //   QKV = Wqkv x; [Q, K turned by rotary positions]; S = Q^T K;
          //   P = softmax(S / sqrt(dh), causal); C = V P^T; y = Wo C.
          // With grouped keys and values K and V have fewer rows (rows - d
          // together); each query head scores its group's K. In windows
          // (Swin): x copied into them (and rolled), the projections over
          // the padded grid, one S per window and head with the position
          // bias (and the shift's mask) added, the output copied back.
          const double heads = double(n) * l.spec.heads * double(windows);
          windowCopies();
          gemm(GemmOp::kNN, rows, tp, d, double(n), false,
               {O::kWeights, l.partitionSide() > 0 ? O::kScratch : O::kInput});
          if (l.spec.bias || l.spec.qkvBias)
            mem(MemKernel::kBias, double(rows) * double(tp), double(n));
          mem(MemKernel::kRotary, rotated, double(n));
          gemm(GemmOp::kTN, span, span, dh, heads);
          mem(MemKernel::kAdd, scoreAdds * double(n));
          mem(MemKernel::kAttnSoftmaxFwd, heads * double(span) * double(span));
          gemm(GemmOp::kNT, dh, span, span, heads);
          gemm(GemmOp::kNN, d, tp, d, double(n), false,
               {O::kWeights, O::kScratch, l.partitionSide() > 0 ? O::kScratch : O::kOutput});
          if (l.spec.bias)
            mem(MemKernel::kBias, double(d) * double(tp), double(n));
          windowCopies();
          break;
        }
        case LayerKind::kLayerNorm:
          mem(MemKernel::kLayerNormFwd, outElems);
          break;
        case LayerKind::kGelu:
          mem(MemKernel::kGeluFwd, outElems);
          break;
        case LayerKind::kRmsNorm:
          mem(MemKernel::kRmsNormFwd, outElems);
          break;
        case LayerKind::kSwiglu:
          mem(MemKernel::kSwigluFwd, outElems);
          break;
        case LayerKind::kConcat:
          // Each input copied into its channels of the output.
          for (size_t i = 0; i < l.inputs.size(); ++i)
            mem(MemKernel::kCopy, inputElems(i));
          break;
        case LayerKind::kSigmoid:
        case LayerKind::kSilu:
        case LayerKind::kTanh:  // one exp per element, as sigmoid's kernel
          mem(MemKernel::kSigmoidFwd, outElems);
          break;
        case LayerKind::kRelu6:
        case LayerKind::kHardSigmoid:
        case LayerKind::kHardSwish:
          mem(MemKernel::kHardActFwd, outElems);
          break;
        case LayerKind::kMul:
          mem(MemKernel::kMulFwd, outElems);
          break;
        case LayerKind::kSlice:
        case LayerKind::kShuffle:
          // A copy of the channels taken, or of all of them permuted.
          mem(MemKernel::kCopy, outElems);
          break;
        case LayerKind::kScale:
          mem(MemKernel::kScaleFwd, outElems);
          break;
        case LayerKind::kClassToken:
          // The tokens into every example's first positions, the input's
          // positions after them (two copies).
          mem(MemKernel::kCopy, double(n) * double(l.inShape.c) * double(l.spec.tokens));
          mem(MemKernel::kCopy, inElems);
          break;
        case LayerKind::kPosEmbedding:
          mem(MemKernel::kAdd, outElems);  // y = x + P
          break;
        case LayerKind::kToken:
          mem(MemKernel::kCopy, outElems);  // one position of each channel
          break;
        case LayerKind::kSpaceToDepth:
          mem(MemKernel::kCopy, outElems);  // each block's positions into its channels
          break;
        case LayerKind::kRnn:
          break;
      }
      break;
    case Phase::kBwdData: {
      const bool summed = summedInto(0);
      switch (l.kind) {
        case LayerKind::kConv: {
          const double count = double(n) * l.spec.groups;
          if (!summed)
            mem(MemKernel::kZero, inElems);
          gemm(GemmOp::kTN, ck, area, fg, count, pointwise,
               {O::kWeights, O::kOutputGrad, pointwise ? O::kInputGrad : O::kScratch});
          if (!pointwise)
            columns(MemKernel::kCol2im, double(ck * area), count);
          break;
        }
        case LayerKind::kPool:
          if (!summed)
            mem(MemKernel::kZero, inElems);
          if (l.spec.poolMode == PoolMode::kMax)
            mem(MemKernel::kPoolMaxBwd, outElems);
          else
            mem(MemKernel::kPoolAvgBwd, outElems * poolH * poolW, 1, double(poolH) * poolW);
          break;
        case LayerKind::kFc:
          if (!summed)
            mem(MemKernel::kZero, inElems);
          if (l.spec.flatten)
            gemm(GemmOp::kNN, n, fcIn, channels, 1, true,
                 {O::kOutputGrad, O::kWeights, O::kInputGrad});
          else
            gemm(GemmOp::kTN, fcIn, inArea, channels, double(n), true,
                 {O::kWeights, O::kOutputGrad, O::kInputGrad});
          break;
        case LayerKind::kRelu:
          mem(MemKernel::kReluBwd, outElems);
          break;
        case LayerKind::kDropout:
          if (l.spec.dropoutRate > 0) {
            if (!summed)
              mem(MemKernel::kZero, outElems);
            mem(MemKernel::kDropoutBwd, outElems);
          } else {
            mem(summed ? MemKernel::kAccumulate : MemKernel::kCopy, outElems);
          }
          break;
        case LayerKind::kLrn:
          mem(MemKernel::kLrnBwd, outElems);
          break;
        case LayerKind::kBatchNorm:
          mem(MemKernel::kBatchNormBwdData, outElems);
          break;
        case LayerKind::kAdd:
          for (size_t i = 0; i < l.inputs.size(); ++i)
            mem(summedInto(i) ? MemKernel::kAccumulate : MemKernel::kCopy, outElems);
          break;
        case LayerKind::kSoftmax:
          mem(MemKernel::kSoftmaxBwd, outElems);
          break;
        case LayerKind::kEmbedding:
          break;  // token ids take no gradient
        case LayerKind::kAttention:
          // dx = Wqkv^T dQKV, from the dQKV its bwd_weights left.
          if (!summed)
            mem(MemKernel::kZero, inElems);
          gemm(GemmOp::kTN, d, tp, rows, double(n), true,
               {O::kWeights, O::kScratch, l.partitionSide() > 0 ? O::kScratch : O::kInputGrad});
          windowCopies();
          break;
        case LayerKind::kLayerNorm:
          mem(MemKernel::kLayerNormBwdData, outElems);
          break;
        case LayerKind::kGelu:
          mem(MemKernel::kGeluBwd, outElems);
          break;
        case LayerKind::kRmsNorm:
          mem(MemKernel::kRmsNormBwdData, outElems);
          break;
        case LayerKind::kSwiglu:
          mem(MemKernel::kSwigluBwd, outElems);
          break;
        case LayerKind::kConcat:
          // Each input's channels of dy copied (or added) into its gradient.
          for (size_t i = 0; i < l.inputs.size(); ++i)
            mem(summedInto(i) ? MemKernel::kAccumulate : MemKernel::kCopy, inputElems(i));
          break;
        case LayerKind::kSigmoid:
        case LayerKind::kSilu:
        case LayerKind::kTanh:
          mem(MemKernel::kSigmoidBwd, outElems);
          break;
        case LayerKind::kRelu6:
        case LayerKind::kHardSigmoid:
        case LayerKind::kHardSwish:
          mem(MemKernel::kHardActBwd, outElems);
          break;
        case LayerKind::kMul:
          // dx and dg in one kernel, each overwritten or added to as beta
          // says (no zero fill).
          mem(MemKernel::kMulBwd, outElems);
          break;
        case LayerKind::kSlice:
          // dy into its channels of dx: a gradient of its own first zeroed.
          if (!summed)
            mem(MemKernel::kZero, inElems);
          mem(summed ? MemKernel::kAccumulate : MemKernel::kCopy, outElems);
          break;
        case LayerKind::kShuffle:
          mem(summed ? MemKernel::kAccumulate : MemKernel::kCopy, outElems);
          break;
        case LayerKind::kScale:
          mem(MemKernel::kScaleFwd, outElems);  // dx = gamma dy, beta as summed says
          break;
        case LayerKind::kClassToken:
          // dy's positions after the tokens: every element of dx.
          mem(summed ? MemKernel::kAccumulate : MemKernel::kCopy, inElems);
          break;
        case LayerKind::kPosEmbedding:
          mem(summed ? MemKernel::kAccumulate : MemKernel::kCopy, outElems);  // dx = dy
          break;
        case LayerKind::kSpaceToDepth:
          mem(summed ? MemKernel::kAccumulate : MemKernel::kCopy, inElems);  // blocks back
          break;
        case LayerKind::kToken:
          // dy into its position of dx: a gradient of its own first zeroed.
          if (!summed)
            mem(MemKernel::kZero, inElems);
          mem(summed ? MemKernel::kAccumulate : MemKernel::kCopy, outElems);
          break;
        case LayerKind::kRnn:
          break;
      }
      break;
    }
    case Phase::kBwdWeights:
      switch (l.kind) {
        case LayerKind::kConv: {
          const double count = double(n) * l.spec.groups;
          if (!pointwise)
            columns(MemKernel::kIm2col, double(ck * area), count);
          gemm(GemmOp::kNT, fg, ck, area, count, true,
               {O::kOutputGrad, pointwise ? O::kInput : O::kScratch, O::kWeightGrad});
          if (l.spec.bias)
            mem(MemKernel::kBiasGrad, double(fg) * double(area), count);
          // Over at least as many examples as threads, each thread sums its
          // examples into its own zeroed partial, added onto the gradient.
          if (threads > 1 && n >= threads) {
            const double weights = double(l.spec.filters) * double(ck);
            const double filters = l.spec.bias ? double(l.spec.filters) : 0.0;
            mem(MemKernel::kZero, weights + filters, threads);
            mem(MemKernel::kReduce, weights, threads);
            mem(MemKernel::kReduce, filters, threads);
          }
          break;
        }
        case LayerKind::kFc:
          if (l.spec.flatten) {
            gemm(GemmOp::kTN, channels, fcIn, n, 1, true,
                 {O::kOutputGrad, O::kInput, O::kWeightGrad});
            if (l.spec.bias)
              mem(MemKernel::kBiasGrad, double(n) * double(channels));
          } else {
            gemm(GemmOp::kNT, channels, fcIn, inArea, double(n), true,
                 {O::kOutputGrad, O::kInput, O::kWeightGrad});
            if (l.spec.bias)
              mem(MemKernel::kBiasGrad, double(channels) * double(inArea), double(n));
          }
          break;
        case LayerKind::kBatchNorm:
          mem(MemKernel::kBatchNormBwdWeights, outElems);
          break;
        case LayerKind::kLayerNorm:
          mem(MemKernel::kLayerNormBwdWeights, outElems);
          break;
        case LayerKind::kRmsNorm:
          mem(MemKernel::kRmsNormBwdWeights, outElems);
          break;
        case LayerKind::kScale:
          mem(MemKernel::kScaleGrad, outElems);
          break;
        case LayerKind::kClassToken:
          // dtokens += dy's first positions, summed over the examples.
          mem(MemKernel::kReduce, double(n) * double(l.inShape.c) * double(l.spec.tokens));
          break;
        case LayerKind::kPosEmbedding:
          mem(MemKernel::kReduce, outElems);  // dP += sum over examples of dy
          break;
        case LayerKind::kEmbedding:
          mem(MemKernel::kEmbeddingBwd, outElems);
          break;
        case LayerKind::kAttention: {
          // Runs before bwd_data (as every layer's), so it carries the
          // backward through the heads that both need, leaving dQKV:
          //   dWo += dy C^T; dC = Wo^T dy; per head dP = dC^T V, dV = dC P;
          //   dS = softmax'(dP); dQ = K dS^T, dK = Q dS; [dQ, dK turned
          //   back by rotary positions]; dWqkv += dQKV x^T. A group's query
          //   heads add into its dK and dV (the same GEMMs, accumulating).
          //   In windows: dy copied into them first, dS summed into the
          //   position bias.
          const double heads = double(n) * l.spec.heads * double(windows);
          windowCopies();
          gemm(GemmOp::kNT, d, d, tp, double(n), true,
               {l.partitionSide() > 0 ? O::kScratch : O::kOutputGrad, O::kScratch, O::kWeightGrad});
          if (l.spec.bias)
            mem(MemKernel::kBiasGrad, double(d) * double(tp), double(n));
          gemm(GemmOp::kTN, d, tp, d, double(n));
          // The first query head of each key/value group writes its dK and
          // dV; the group's others add to them.
          const double firstOfGroup = heads * double(l.kvHeads()) / double(l.spec.heads);
          gemm(GemmOp::kTN, span, span, dh, heads);
          gemm(GemmOp::kNN, dh, span, span, firstOfGroup);
          gemm(GemmOp::kNN, dh, span, span, heads - firstOfGroup, true);
          mem(MemKernel::kAttnSoftmaxBwd, heads * double(span) * double(span));
          if (l.spec.positionBias != PositionBias::kNone)
            mem(MemKernel::kReduce, heads * double(span) * double(span));
          gemm(GemmOp::kNT, dh, span, span, heads);
          gemm(GemmOp::kNN, dh, span, span, firstOfGroup);
          gemm(GemmOp::kNN, dh, span, span, heads - firstOfGroup, true);
          mem(MemKernel::kRotary, rotated, double(n));
          gemm(GemmOp::kNT, rows, d, tp, double(n), true,
               {O::kScratch, l.partitionSide() > 0 ? O::kScratch : O::kInput, O::kWeightGrad});
          if (l.spec.bias || l.spec.qkvBias)
            mem(MemKernel::kBiasGrad, double(rows) * double(tp), double(n));
          break;
        }
        default:
          break;
      }
      break;
  }
  return calls;
}

std::vector<KernelCall> lowerCuda(const Network& net, int index, Phase phase, double examples,
                                  int outputs, MemKernel update, ElementType element) {
  STRATA_ENFORCE(index >= 0 && index < static_cast<int>(net.layers.size()));
  const Layer& l = net.layers[static_cast<size_t>(index)];
  std::vector<KernelCall> calls;
  // bf16: the casts of one conv or fc phase (cuda_conv.cpp, cuda_fc.cpp):
  // its two operands into bf16 scratch, and a convolution's result back;
  // attention's, its GEMM operands as attention_plan.h casts them.
  const bool bf16 =
      element == ElementType::kBf16 && phase != Phase::kUpdate &&
      (l.kind == LayerKind::kConv || l.kind == LayerKind::kFc || l.kind == LayerKind::kAttention);
  auto cast = [&](MemKernel kernel, double units) {
    KernelCall c;
    c.kernel = kernel;
    c.units = units;
    calls.push_back(c);
  };
  const double wholeBatch = double(std::max<int64_t>(1, std::llround(examples)));
  if (l.kind == LayerKind::kConv && phase != Phase::kUpdate) {
    // One cuDNN call per pass over the whole batch and every group, and the
    // bias kernels of kernels/ (one launch each).
    const int64_t n = std::max<int64_t>(1, std::llround(examples));
    const int64_t area = int64_t{l.outShape.h} * l.outShape.w;
    const int groups = std::max(1, l.spec.groups);
    KernelCall c;
    c.conv = true;
    c.m = n * area;
    c.n = l.spec.filters / groups;
    c.k = int64_t{l.inShape.c / groups} * l.spec.kernelH * l.spec.kernelW;
    c.count = groups;
    auto bias = [&](MemKernel kernel) {
      KernelCall b;
      b.kernel = kernel;
      b.units = double(n) * double(l.spec.filters) * double(area);
      calls.push_back(b);
    };
    const double in = wholeBatch * double(l.inShape.c) * l.inShape.h * l.inShape.w;
    const double out = double(n) * double(l.spec.filters) * double(area);
    const double weights = double(l.spec.filters) * double(c.k);
    if (phase == Phase::kFwd) {
      // The first reader of a value several layers read clears its gradient.
      for (const auto& z : lowerCpu(net, index, phase, examples, outputs))
        if (!z.gemm && z.kernel == MemKernel::kZero)
          calls.push_back(z);
      if (bf16) {
        cast(MemKernel::kCastBf16, in);
        cast(MemKernel::kCastBf16, weights);
      }
      c.pass = ConvPass::kFwd;
      calls.push_back(c);
      if (bf16)
        cast(MemKernel::kCastFp32, out);
      if (l.spec.bias)
        bias(MemKernel::kBias);
    } else if (phase == Phase::kBwdData) {
      if (bf16) {
        cast(MemKernel::kCastBf16, out);
        cast(MemKernel::kCastBf16, weights);
      }
      c.pass = ConvPass::kBwdData;  // cuDNN applies beta: no zero fill
      calls.push_back(c);
      if (bf16)
        cast(MemKernel::kCastFp32, in);
    } else {
      if (bf16) {
        cast(MemKernel::kCastBf16, in);
        cast(MemKernel::kCastBf16, out);
      }
      c.pass = ConvPass::kBwdFilter;
      calls.push_back(c);
      if (bf16)
        cast(MemKernel::kCastFp32, weights);
      if (l.spec.bias)
        bias(MemKernel::kBiasGrad);
    }
    return calls;
  }
  // Everything else calls what the CPU calls, but each kernel covers the
  // whole batch in one launch, and applies beta itself: the zero fills before
  // overwriting gradients go, except the Model's own clearing of a summed
  // gradient in forward. An add's accumulates stay one launch per input.
  // A per-position fc over a single position runs as the flattened one: its
  // per-example GEMMs stacked into one over the batch (fcForward's p == 1).
  // Attention (cuda_transformer.cpp) makes the CPU's GEMMs: a strided-batched
  // call over the examples, or over (examples x heads) in loops, is its
  // batch's count of the same GEMM, which is how the CPU's list counts them;
  // its softmax, bias and bias-gradient kernels are one launch each.
  const bool onePosition =
      l.kind == LayerKind::kFc && !l.spec.flatten && l.inShape.h * l.inShape.w == 1;
  for (KernelCall c : lowerCpu(net, index, phase, examples, outputs, update)) {
    // cuBLAS's beta adds into C at the product's cost: no call is told apart.
    c.accumulate = false;
    if (!c.gemm) {
      if (c.kernel == MemKernel::kZero && phase != Phase::kFwd)
        continue;
      if (l.kind != LayerKind::kAdd) {
        c.units *= c.count;
        c.count = 1;
      }
    } else if (onePosition) {
      const auto batch = static_cast<int64_t>(c.count);
      const int64_t m = c.m, n = c.n, k = c.k;
      c.count = 1;
      switch (c.op) {
        case GemmOp::kNN:  // y (O x 1) = W x per example: Y (n x O) = X W^T
          c.op = GemmOp::kNT;
          c.m = batch;
          c.n = m;
          c.k = k;
          break;
        case GemmOp::kTN:  // dx (C x 1) = W^T dy: dX (n x C) = dY W
          c.op = GemmOp::kNN;
          c.m = batch;
          c.n = m;
          c.k = k;
          break;
        case GemmOp::kNT:  // dW (O x C) += dy x^T: dW += dY^T X
          c.op = GemmOp::kTN;
          c.m = m;
          c.n = n;
          c.k = batch;
          break;
      }
    }
    calls.push_back(c);
  }
  if (bf16 && l.kind == LayerKind::kFc) {
    // fc: the rows held (a model-parallel slice: `outputs`) of the weights,
    // the input and the output gradient of the whole batch.
    const double rows = outputs > 0 ? double(outputs) : double(l.outShape.c);
    const double positions = l.spec.flatten ? 1.0 : double(l.inShape.h) * l.inShape.w;
    const double features =
        l.spec.flatten ? double(l.inShape.c) * l.inShape.h * l.inShape.w : double(l.inShape.c);
    const double x = wholeBatch * features * positions, dy = wholeBatch * rows * positions;
    cast(MemKernel::kCastBf16, phase == Phase::kBwdData ? dy : x);
    cast(MemKernel::kCastBf16, phase == Phase::kBwdWeights ? dy : rows * features);
  }
  if (bf16 && l.kind == LayerKind::kAttention) {
    // attention_plan.h's casts, over the whole batch (x: d x T an example,
    // scores: heads x T x T): forward x, the weights (Wqkv and Wo), QKV, the
    // probabilities, the context; backward weights dy, the context, Wo, dC,
    // QKV, the probabilities, dS, dQKV, x; backward data dQKV and Wqkv.
    // QKV is rows x T an example (3 d without grouped keys and values). In
    // windows: T the padded grid's positions, each scoring its window's.
    const double d = l.inShape.c, t = double(l.attentionPositions());
    const double rows = double(l.qkvRows());
    const double x = wholeBatch * d * t,
                 scores = wholeBatch * l.spec.heads * t * double(l.attentionSpan());
    const double qkv = wholeBatch * rows * t;
    if (phase == Phase::kFwd) {
      for (double units : {x, (rows + d) * d, qkv, scores, x})
        cast(MemKernel::kCastBf16, units);
    } else if (phase == Phase::kBwdWeights) {
      for (double units : {x, x, d * d, x, qkv, scores, scores, qkv, x})
        cast(MemKernel::kCastBf16, units);
    } else {
      cast(MemKernel::kCastBf16, qkv);
      cast(MemKernel::kCastBf16, rows * d);
    }
  }
  return calls;
}

std::vector<KernelCall> lower(std::string_view backend, const Network& network, int index,
                              Phase phase, double examples, int outputs, MemKernel update,
                              int threads) {
  if (backend == "cuda")
    return lowerCuda(network, index, phase, examples, outputs, update);
  return lowerCpu(network, index, phase, examples, outputs, update, threads);
}

}  // namespace strata
