// Model's layer phases (strata/exec/nn/model.h): forward, backward data and
// weights, the optimiser's update and the gradients' zeroing, each a call of
// the backend per layer; model.cpp builds the Model they run on.
#include <fmt/format.h>

#include <algorithm>
#include <span>

#include "model_state.h"
#include "strata/exec/nn/backend.h"
#include "strata/model/error.h"

namespace strata::nn {

namespace {

ConvDesc convDesc(const Layer& l) {
  ConvDesc d;
  d.inC = l.inShape.c;
  d.inH = l.inShape.h;
  d.inW = l.inShape.w;
  d.filters = l.spec.filters;
  d.kernelH = l.spec.kernelH;
  d.kernelW = l.spec.kernelW;
  d.stride = l.spec.stride;
  d.pad = l.spec.pad;
  d.groups = l.spec.groups;
  d.outH = l.outShape.h;
  d.outW = l.outShape.w;
  d.padW = l.spec.padWidth();
  d.dilation = l.spec.dilation;
  return d;
}

// The activation a vision network's pointwise layer computes.
Activation activationOf(LayerKind kind) {
  switch (kind) {
    case LayerKind::kSigmoid:
      return Activation::kSigmoid;
    case LayerKind::kSilu:
      return Activation::kSilu;
    case LayerKind::kRelu6:
      return Activation::kRelu6;
    case LayerKind::kHardSigmoid:
      return Activation::kHardSigmoid;
    case LayerKind::kHardSwish:
      return Activation::kHardSwish;
    case LayerKind::kTanh:
      return Activation::kTanh;
    default:
      break;
  }
  throw InvariantError(fmt::format("layer kind {} is no activation", toString(kind)));
}

PoolDesc poolDesc(const Layer& l) {
  PoolDesc d;
  d.mode = l.spec.poolMode;
  d.c = l.inShape.c;
  d.inH = l.inShape.h;
  d.inW = l.inShape.w;
  // The same rules as deriveLayer: a global pool is one window over the map.
  d.kernelH = l.spec.global ? l.inShape.h : l.spec.kernelH;
  d.kernelW = l.spec.global ? l.inShape.w : l.spec.kernelW;
  d.stride = l.spec.global ? 1 : l.spec.stride;
  d.pad = l.spec.global ? 0 : l.spec.pad;
  d.outH = l.outShape.h;
  d.outW = l.outShape.w;
  return d;
}

}  // namespace

// ---- phases ---------------------------------------------------------------

// Sizes the layer's buffers for its input's batch and clears, over the
// range, the gradient buffers of inputs this layer is the first to read when
// several layers will add into them.
Dims Model::outDims(int layer, int batch) const {
  const Layer& spec = network_.layers[static_cast<size_t>(layer)];
  // The layout, the same in every slot: the first's (another thread may
  // switch act_).
  const LayerState& st = slots_.front()->layers[static_cast<size_t>(layer)];
  // Sequence parallelism: this worker's positions.
  return st.localPositions > 0 ? Dims{batch, st.slice.size(), st.localPositions, 1}
                               : Dims{batch, st.slice.size(), spec.outShape.h, spec.outShape.w};
}

void Model::prepareForward(int layer, ExampleRange r, bool clearGradients) {
  checkRange(layer, r);
  const Layer& spec = network_.layers[static_cast<size_t>(layer)];
  LayerState& st = act_->layers[static_cast<size_t>(layer)];
  const int batch = inputOf(layer, 0).dims.n;
  for (size_t k = 1; k < spec.inputs.size(); ++k)
    STRATA_ENFORCE_OP(inputOf(layer, static_cast<int>(k)).dims.n, ==, batch);
  // For a layer whose output the group reduce-scatters, its partial output
  // at every position.
  st.out.resize(outDims(layer, batch));
  st.outGrad.resize(outDims(layer, batch));
  if (st.scattersOutput)
    st.full.resize(Dims{batch, st.slice.size(), spec.outShape.h, spec.outShape.w});
  if (st.sliced || !clearGradients)
    return;
  for (int p : spec.inputs) {
    if (p < 0) {
      if (inputFirstReader_ != layer)
        continue;
      act_->inputGrad.resize(act_->input.dims());
      if (inputReaders_ > 1)
        backend_->fill(act_->inputGrad.examples(r).span(), 0.0f);
    } else {
      LayerState& producer = act_->layers[static_cast<size_t>(p)];
      if (producer.firstReader == layer && producer.readers > 1) {
        backend_->fill(producer.outGrad.examples(r).span(), 0.0f);
      }
    }
  }
}

void Model::forward(int layer) {
  forward(layer, {0, inputOf(layer, 0).dims.n});
}

void Model::recompute(int layer) {
  runForward(layer, {0, inputOf(layer, 0).dims.n}, false);
}

void Model::forward(int layer, ExampleRange r) {
  runForward(layer, r, true);
}

void Model::recomputeAttentionCore(int layer) {
  const Layer& spec = network_.layers[static_cast<size_t>(layer)];
  STRATA_ENFORCE(spec.kind == LayerKind::kAttention);
  const int n = act_->layers[static_cast<size_t>(layer)].out.n();
  backend_->attentionCoreForward(act_->layers[static_cast<size_t>(layer)].attention,
                                 attentionSaved(layer, {0, n}));
}

void Model::runForward(int layer, ExampleRange r, bool clearGradients) {
  prepareForward(layer, r, clearGradients);
  const Layer& spec = network_.layers[static_cast<size_t>(layer)];
  LayerState& st = act_->layers[static_cast<size_t>(layer)];
  const ParamBlock& b = blocks_[static_cast<size_t>(layer)];
  const float* w = params_.data() + b.offset;
  const float* bias = b.bias > 0 ? w + b.weights : nullptr;
  const ConstTensorView x = inputOf(layer, 0).examples(r);
  const TensorView y = (st.scattersOutput ? st.full : st.out).examples(r);
  Backend& be = *backend_;
  switch (spec.kind) {
    case LayerKind::kConv:
      be.convForward(convDesc(spec), x, w, bias, y);
      break;
    case LayerKind::kPool: {
      const PoolDesc d = poolDesc(spec);
      int32_t* argmax = nullptr;
      if (d.mode == PoolMode::kMax) {
        st.argmax.resize(static_cast<size_t>(st.out.elements()));
        argmax = st.argmax.data() + r.begin * st.out.dims().perExample();
      }
      be.poolForward(d, x, y, argmax);
      break;
    }
    case LayerKind::kFc:
      be.fcForward(FcDesc{spec.spec.flatten, fcInputs(layer), st.slice.size()}, x,
                   params_.data() + weightOffset(layer), st.addsBias ? bias : nullptr, y);
      break;
    case LayerKind::kRelu:
      be.reluForward(x, y);
      break;
    case LayerKind::kDropout:
      if (options_.dropout && spec.spec.dropoutRate > 0) {
        be.dropoutForward(dropoutDesc(layer, r), x, y);
      } else {
        be.accumulate(x, y, 0.0f);
      }
      break;
    case LayerKind::kLrn: {
      st.lrnScale.resize(st.out.dims());
      LrnDesc d = options_.lrn;
      d.size = spec.spec.lrnSize;
      be.lrnForward(d, x, y, st.lrnScale.examples(r));
      break;
    }
    case LayerKind::kBatchNorm:
      be.batchNormForward(x, w, w + b.weights, options_.batchNormEps, y);
      break;
    case LayerKind::kAdd:
      be.add(x, inputOf(layer, 1).examples(r), y);
      for (size_t k = 2; k < spec.inputs.size(); ++k)
        be.accumulate(inputOf(layer, static_cast<int>(k)).examples(r), y, 1.0f);
      break;
    case LayerKind::kSoftmax: {
      const int64_t plane = int64_t{spec.inShape.h} * spec.inShape.w;
      act_->softmaxStats.resize(static_cast<size_t>(2 * st.out.n() * plane));
      float* stats = act_->softmaxStats.data() + 2 * r.begin * plane;
      be.softmaxStats(x, stats);
      be.softmaxProbabilities(x, stats, y);
      break;
    }
    case LayerKind::kEmbedding:
      be.embeddingForward(st.embedding, x, w, y);
      break;
    case LayerKind::kAttention: {
      const AttentionDesc& d = st.attention;
      const Dims qkvDims{st.out.n(), d.qkvFeatures(), spec.inShape.h, spec.inShape.w};
      st.qkv.resize(qkvDims);
      st.dqkv.resize(qkvDims);
      st.context.resize(Dims{st.out.n(), d.inner(), spec.inShape.h, spec.inShape.w});
      st.probs.resize(
          static_cast<size_t>(int64_t{st.out.n()} * d.heads * d.positions * d.positions));
      be.attentionForward(d, x, w, bias, attentionSaved(layer, r), y);
      break;
    }
    case LayerKind::kLayerNorm:
      be.layerNormForward(x, w, w + b.weights, options_.layerNormEps, y);
      break;
    case LayerKind::kGelu:
      be.geluForward(x, y);
      break;
    case LayerKind::kRmsNorm:
      be.rmsNormForward(x, w, static_cast<float>(spec.spec.eps), y);
      break;
    case LayerKind::kSwiglu:
      be.swigluForward(x, y);
      break;
    case LayerKind::kConcat: {
      // Each input into its channels of y, in the order of `inputs`.
      int offset = 0;
      for (size_t k = 0; k < spec.inputs.size(); ++k) {
        const ConstTensorView in = inputOf(layer, static_cast<int>(k)).examples(r);
        be.copyIntoChannels(in, y, offset);
        offset += in.dims.c;
      }
      break;
    }
    case LayerKind::kSigmoid:
    case LayerKind::kSilu:
    case LayerKind::kRelu6:
    case LayerKind::kHardSigmoid:
    case LayerKind::kHardSwish:
    case LayerKind::kTanh:
      be.activationForward(activationOf(spec.kind), x, y);
      break;
    case LayerKind::kMul:
      be.mulForward(x, inputOf(layer, 1).examples(r), y);
      break;
    case LayerKind::kSlice:
      be.copyFromChannels(x, spec.spec.offset, y, 0.0f);
      break;
    case LayerKind::kShuffle:
      be.shuffleChannels(x, spec.spec.groups, y, 0.0f);
      break;
    case LayerKind::kScale:
      be.scaleChannels(x, w, y, 0.0f);
      break;
    case LayerKind::kClassToken: {
      // The tokens at positions [0, tokens), the input's positions after them.
      const int tokens = spec.spec.tokens;
      be.broadcastPositions(w, tokens, y, 0);
      be.copyPositions(x, 0, y, tokens, spec.inShape.h * spec.inShape.w, 0.0f);
      break;
    }
    case LayerKind::kPosEmbedding:
      be.addTable(x, w, y);
      break;
    case LayerKind::kToken:
      be.copyPositions(x, spec.spec.index, y, 0, 1, 0.0f);
      break;
    case LayerKind::kRnn:
    case LayerKind::kSpaceToDepth:
      break;  // rejected by the constructor
  }
}

DropoutDesc Model::dropoutDesc(int layer, ExampleRange r) const {
  const Layer& spec = network_.layers[static_cast<size_t>(layer)];
  const LayerState& st = act_->layers[static_cast<size_t>(layer)];
  DropoutDesc d{static_cast<float>(spec.spec.dropoutRate),
                options_.seed,
                step_,
                layer,
                r.begin,
                st.slice.begin,
                spec.outShape.c};
  if (st.localPositions > 0) {
    d.firstPosition = st.firstPosition;
    d.totalPositions = spec.outShape.h * spec.outShape.w;
  }
  return d;
}

int64_t Model::weightOffset(int layer) const {
  return blocks_[static_cast<size_t>(gradientOwner(network_, layer))].offset;
}

AttentionSaved Model::attentionSaved(int layer, ExampleRange r) {
  LayerState& st = act_->layers[static_cast<size_t>(layer)];
  const Layer& spec = network_.layers[static_cast<size_t>(layer)];
  const int64_t t = int64_t{spec.inShape.h} * spec.inShape.w;
  STRATA_ENFORCE_OP(st.qkv.n(), ==, st.out.n());
  return AttentionSaved{st.qkv.examples(r), st.probs.data() + r.begin * st.attention.heads * t * t,
                        st.context.examples(r), st.dqkv.examples(r)};
}

void Model::backwardData(int layer) {
  backwardData(layer, {0, inputOf(layer, 0).dims.n});
}

void Model::backwardData(int layer, ExampleRange r) {
  checkRange(layer, r);
  const Layer& spec = network_.layers[static_cast<size_t>(layer)];
  LayerState& st = act_->layers[static_cast<size_t>(layer)];
  STRATA_ENFORCE_OP(st.out.n(), ==, inputOf(layer, 0).dims.n);  // forward ran on this batch
  const ParamBlock& b = blocks_[static_cast<size_t>(layer)];
  const float* w = params_.data() + b.offset;
  if (st.sliced)
    st.exchangeInGrad.resize(st.exchangeIn.dims());
  if (st.gathersInput)
    st.gatheredGrad.resize(st.gathered.dims());
  const ConstTensorView x = inputOf(layer, 0).examples(r);
  const ConstTensorView dy = outputGradOf(layer).examples(r);
  const TensorView dx = gradTargetOf(layer, 0).examples(r);
  const float beta = betaOf(layer, 0);
  Backend& be = *backend_;
  switch (spec.kind) {
    case LayerKind::kConv:
      be.convBackwardData(convDesc(spec), dy, w, dx, beta);
      break;
    case LayerKind::kPool:
      be.poolBackward(
          poolDesc(spec), dy,
          st.argmax.empty() ? nullptr : st.argmax.data() + r.begin * st.out.dims().perExample(), dx,
          beta);
      break;
    case LayerKind::kFc:
      be.fcBackwardData(FcDesc{spec.spec.flatten, fcInputs(layer), st.slice.size()}, dy,
                        params_.data() + weightOffset(layer), dx, beta);
      break;
    case LayerKind::kRelu:
      be.reluBackward(st.out.examples(r), dy, dx, beta);
      break;
    case LayerKind::kDropout:
      if (options_.dropout && spec.spec.dropoutRate > 0) {
        be.dropoutBackward(dropoutDesc(layer, r), dy, dx, beta);
      } else {
        be.accumulate(dy, dx, beta);
      }
      break;
    case LayerKind::kLrn: {
      LrnDesc d = options_.lrn;
      d.size = spec.spec.lrnSize;
      be.lrnBackward(d, x, st.out.examples(r), st.lrnScale.examples(r), dy, dx, beta);
      break;
    }
    case LayerKind::kBatchNorm:
      be.batchNormBackwardData(x, dy, w, options_.batchNormEps, dx, beta);
      break;
    case LayerKind::kAdd:
      be.accumulate(dy, dx, beta);
      for (size_t k = 1; k < spec.inputs.size(); ++k)
        be.accumulate(dy, gradTargetOf(layer, static_cast<int>(k)).examples(r),
                      betaOf(layer, static_cast<int>(k)));
      break;
    case LayerKind::kSoftmax: {
      const int64_t plane = int64_t{spec.inShape.h} * spec.inShape.w;
      STRATA_ENFORCE_OP(static_cast<int64_t>(act_->labels.size()), ==, softmaxPositions());
      STRATA_ENFORCE_OP(static_cast<int64_t>(act_->softmaxStats.size()), ==,
                        2 * softmaxPositions());
      const double normalizer =
          lossNormalizer_ > 0 ? lossNormalizer_ : static_cast<double>(softmaxPositions());
      be.softmaxBackward(x, act_->softmaxStats.data() + 2 * r.begin * plane,
                         act_->labels.data() + r.begin * plane, st.slice.begin,
                         static_cast<float>(1.0 / normalizer), dx, beta);
      break;
    }
    case LayerKind::kEmbedding:
      break;  // token ids take no gradient
    case LayerKind::kAttention:
      // From the dQKV its bwd_weights (which the Model runs first) left.
      STRATA_ENFORCE_OP(st.dqkv.n(), ==, st.out.n());
      be.attentionBackwardData(st.attention, st.dqkv.examples(r), w, dx, beta);
      break;
    case LayerKind::kLayerNorm:
      be.layerNormBackwardData(x, dy, w, options_.layerNormEps, dx, beta);
      break;
    case LayerKind::kGelu:
      be.geluBackward(x, dy, dx, beta);
      break;
    case LayerKind::kRmsNorm:
      be.rmsNormBackwardData(x, dy, w, static_cast<float>(spec.spec.eps), dx, beta);
      break;
    case LayerKind::kSwiglu:
      be.swigluBackward(x, dy, dx, beta);
      break;
    case LayerKind::kConcat: {
      // Each input's gradient: its channels of dy.
      int offset = 0;
      for (size_t k = 0; k < spec.inputs.size(); ++k) {
        const int which = static_cast<int>(k);
        const TensorView into = gradTargetOf(layer, which).examples(r);
        be.copyFromChannels(dy, offset, into, betaOf(layer, which));
        offset += into.dims.c;
      }
      break;
    }
    case LayerKind::kSigmoid:
    case LayerKind::kSilu:
    case LayerKind::kRelu6:
    case LayerKind::kHardSigmoid:
    case LayerKind::kHardSwish:
    case LayerKind::kTanh:
      be.activationBackward(activationOf(spec.kind), x, st.out.examples(r), dy, dx, beta);
      break;
    case LayerKind::kMul:
      // Both inputs' gradients in one kernel (x * x: one buffer, both summed).
      be.mulBackward(x, inputOf(layer, 1).examples(r), dy, dx, beta,
                     gradTargetOf(layer, 1).examples(r), betaOf(layer, 1));
      break;
    case LayerKind::kSlice:
      // dy into its channels of dx; a gradient of its own zero elsewhere.
      if (beta == 0.0f)
        be.fill(dx.span(), 0.0f);
      be.addIntoChannels(dy, dx, spec.spec.offset, beta);
      break;
    case LayerKind::kShuffle:
      // The inverse permutation: the shuffle of C / groups groups.
      be.shuffleChannels(dy, spec.inShape.c / spec.spec.groups, dx, beta);
      break;
    case LayerKind::kScale:
      be.scaleChannels(dy, w, dx, beta);
      break;
    case LayerKind::kClassToken:
      // dy's positions after the tokens are x's: all of dx.
      be.copyPositions(dy, spec.spec.tokens, dx, 0, spec.inShape.h * spec.inShape.w, beta);
      break;
    case LayerKind::kPosEmbedding:
      be.accumulate(dy, dx, beta);  // dx = dy
      break;
    case LayerKind::kToken:
      // dy into its position of dx; a gradient of its own zero elsewhere.
      if (beta == 0.0f)
        be.fill(dx.span(), 0.0f);
      be.copyPositions(dy, 0, dx, spec.spec.index, 1, beta);
      break;
    case LayerKind::kRnn:
    case LayerKind::kSpaceToDepth:
      break;  // rejected by the constructor
  }
}

void Model::backwardWeights(int layer) {
  backwardWeights(layer, {0, inputOf(layer, 0).dims.n});
}

void Model::backwardWeights(int layer, ExampleRange r) {
  checkRange(layer, r);
  const Layer& spec = network_.layers[static_cast<size_t>(layer)];
  LayerState& st = act_->layers[static_cast<size_t>(layer)];
  const ParamBlock& b = blocks_[static_cast<size_t>(layer)];
  // A tied fc holds no weights of its own but adds into its embedding's.
  if (!spec.computesWeightGradient())
    return;
  STRATA_ENFORCE_OP(st.out.n(), ==, inputOf(layer, 0).dims.n);
  float* dw = grads_.data() + b.offset;
  float* dbias = b.bias > 0 ? dw + b.weights : nullptr;
  const ConstTensorView x = inputOf(layer, 0).examples(r);
  const ConstTensorView dy = outputGradOf(layer).examples(r);
  switch (spec.kind) {
    case LayerKind::kConv:
      backend_->convBackwardWeights(convDesc(spec), x, dy, dw, dbias);
      break;
    case LayerKind::kFc:
      backend_->fcBackwardWeights(FcDesc{spec.spec.flatten, fcInputs(layer), st.slice.size()}, x,
                                  dy, grads_.data() + weightOffset(layer), dbias);
      break;
    case LayerKind::kBatchNorm:
      backend_->batchNormBackwardWeights(x, dy, options_.batchNormEps, dw, dw + b.weights);
      break;
    case LayerKind::kLayerNorm:
      backend_->layerNormBackwardWeights(x, dy, options_.layerNormEps, dw, dw + b.weights);
      break;
    case LayerKind::kRmsNorm:
      backend_->rmsNormBackwardWeights(x, dy, static_cast<float>(spec.spec.eps), dw);
      break;
    case LayerKind::kScale:
      backend_->scaleBackwardWeights(x, dy, dw);
      break;
    case LayerKind::kClassToken:
      backend_->sumPositions(dy, 0, spec.spec.tokens, dw);  // dy's token positions
      break;
    case LayerKind::kPosEmbedding:
      backend_->sumPositions(dy, 0, spec.inShape.h * spec.inShape.w, dw);
      break;
    case LayerKind::kEmbedding:
      backend_->embeddingBackwardWeights(st.embedding, x, dy, dw);
      break;
    case LayerKind::kAttention:
      backend_->attentionBackwardWeights(st.attention, x, dy, params_.data() + b.offset,
                                         attentionSaved(layer, r), dw, dbias);
      break;
    default:
      break;
  }
}

void Model::allocateStates(Optimizer optimizer) {
  if (isAdam(optimizer)) {
    if (adamM_.empty()) {
      adamM_.resize(params_.size());  // zero-filled
      adamV_.resize(params_.size());
    }
  } else if (momentum_.empty()) {
    momentum_.resize(params_.size());  // zero-filled
  }
}

void Model::applyRule(const UpdateRule& rule, int64_t offset, int64_t size, int64_t step) {
  allocateStates(rule.optimizer);
  const auto at = [&](Buffer<float>& buffer) {
    return std::span<float>(buffer.data() + offset, static_cast<size_t>(size));
  };
  switch (rule.optimizer) {
    case Optimizer::kSgd:
    case Optimizer::kMomentum:
      backend_->sgdMomentum(at(params_), at(momentum_), at(grads_), rule.learningRate,
                            rule.optimizer == Optimizer::kSgd ? 0.0f : rule.momentum,
                            rule.weightDecay);
      return;
    case Optimizer::kAdam:
    case Optimizer::kAdamW:
      backend_->adam(at(params_), at(adamM_), at(adamV_), at(grads_), rule.adam(step));
      return;
  }
}

void Model::update(int layer, const UpdateRule& rule) {
  const ParamBlock b = paramBlock(layer);
  if (b.size() == 0)
    return;
  const int64_t step = ++updates_.at(static_cast<size_t>(layer));
  applyRule(rule, b.offset, b.size(), step);
}

void Model::updateAll(const UpdateRule& rule) {
  if (params_.empty())
    return;
  // One kernel over every layer: one step for all, after the most-updated.
  const int64_t step = *std::max_element(updates_.begin(), updates_.end()) + 1;
  std::fill(updates_.begin(), updates_.end(), step);
  applyRule(rule, 0, static_cast<int64_t>(params_.size()), step);
}

void Model::update(int layer, float learningRate, float momentum, float weightDecay) {
  update(layer, UpdateRule{Optimizer::kMomentum, learningRate, momentum, weightDecay});
}

void Model::updateAll(float learningRate, float momentum, float weightDecay) {
  updateAll(UpdateRule{Optimizer::kMomentum, learningRate, momentum, weightDecay});
}

void Model::updateShard(int firstLayer, int lastLayer, int64_t begin, int64_t end,
                        const UpdateRule& rule, int64_t step) {
  const auto all = layersOf(params_, firstLayer, lastLayer);
  STRATA_ENFORCE(0 <= begin && begin <= end && end <= static_cast<int64_t>(all.size()));
  if (begin == end)
    return;
  const int64_t offset = (all.data() - params_.data()) + begin;
  applyRule(rule, offset, end - begin, step);
  backend_->synchronize();
}

void Model::zeroGradients() {
  backend_->fill(grads_, 0.0f);
}

void Model::zeroGradients(int layer) {
  const ParamBlock b = paramBlock(layer);
  backend_->fill(std::span<float>(grads_.data() + b.offset, static_cast<size_t>(b.size())), 0.0f);
}

void Model::zeroGradientsBeforeBackprop(int layer) {
  STRATA_ENFORCE(layer >= 0 && layer < layerCount());
  for (int j = layer; j >= 0; --j)
    if (firstGradientWriter_[static_cast<size_t>(j)] == layer)
      zeroGradients(j);
}

void Model::forwardAll() {
  for (int l = 0; l < layerCount(); ++l) {
    STRATA_ENFORCE(!modelParallel(l));
    forward(l);
  }
}

void Model::backwardAll(bool inputGradient) {
  for (int l = layerCount() - 1; l >= 0; --l) {
    STRATA_ENFORCE(!modelParallel(l));
    backwardWeights(l);
    const auto& inputs = network_.layers[static_cast<size_t>(l)].inputs;
    const bool readsOnlyInput =
        std::all_of(inputs.begin(), inputs.end(), [](int p) { return p < 0; });
    if (inputGradient || !readsOnlyInput)
      backwardData(l);
  }
}

}  // namespace strata::nn
