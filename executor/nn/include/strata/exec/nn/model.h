// A trainable instance of a strata::Network on a compute Backend.
//
// The Model owns the parameters (one contiguous array: per layer its weights
// then its bias, layers in order, so the gradients of consecutive layers form
// one span an allreduce can take in buckets), their gradients, the
// optimizer's states (the momentum of SGD, or Adam's two moments, allocated
// at the first update that needs them) and per layer the output activation and the gradient with
// respect to that output. A Plan interpreter drives it one (layer, phase, examples) task at a time:
//
//   model.input(b) <- examples; model.setLabels(labels)
//   for l in 0..L-1:     model.forward(l)
//   for l in L-1..0:     model.backwardWeights(l); model.backwardData(l)
//   allreduce(model.allGradients()); model.updateAll(rule)
//
// Batches. Every phase call takes an ExampleRange of the layer's current
// batch, which is the batch of the tensor it reads (the network input, the
// output of the layer it reads, or its exchange input). So the caller decides
// how many examples one call covers, and a batch may be processed in pieces:
// forward over [0, 16) then [16, 32) gives the same outputs as one call over
// [0, 32), and weight gradients accumulate across calls until zeroGradients().
// Exceptions: batchnorm normalises over the examples of each call, and the
// ranges of backward calls must be those of the forward calls of the same
// layer (batchnorm recomputes its statistics from the range it is given).
//
// Gradients of a value read by several layers (a residual branch) are summed:
// the gradient buffer is cleared over a range when its first reader runs
// forward on that range, and every reader's backwardData adds to it.
//
// Model parallelism (the fc part of owt-a/b/c, Krizhevsky 2014). A worker
// instantiates fc layers with only a slice [begin, end) of their output
// neurons (ModelOptions::slices; modelParallelSlices() gives rank r's share):
//  - a sliced fc holds rows [begin, end) of the whole layer's weight matrix
//    and the matching bias entries, initialised to exactly the values the
//    whole layer would have, so K workers together hold the one-worker model;
//  - it reads its whole input (all input neurons, for the round's batch) from
//    exchangeInput(l), which the caller fills: for the first model-parallel
//    fc the gathered boundary activations, for later ones the slices of every
//    worker's previous layer (copyIntoChannels);
//  - its output, and that of the relu / dropout layers after it, is the slice
//    only: output(l) has end - begin channels;
//  - backwardData writes the partial gradient with respect to the whole input
//    into exchangeInputGrad(l): the sum over the K workers of these partial
//    gradients is the input gradient (the caller reduce-scatters it into the
//    producers' outputGrad slices, or into the owners of the examples);
//  - a softmax after a sliced fc needs the statistics of all classes: after
//    forward, softmaxStats() holds max and sum of exp over this worker's
//    classes per position; the caller merges those of all workers
//    (mergeSoftmaxStats) and writes the result back into softmaxStats() before
//    backwardData(softmax) and loss(). loss() and correctCount() are then this
//    worker's share: summed over the workers they give the whole layer's.
//  - Or the caller gathers the whole logits itself and uses
//    softmaxCrossEntropy(), writing each worker's slice of the logit gradient
//    into outputGrad() of the last fc.
//
// Tensor parallelism (Megatron; ModelOptions::tensorParallel, the split of
// strata/model/tensor_parallel.h). Worker r of a group of t holds:
//  - an attention layer's heads [r H/t, (r+1) H/t) (their Q, K and V rows of
//    Wqkv and bqkv, their columns of Wo, and the whole bo); its output is the
//    worker's partial sum of the output projection, bo added by worker 0 only;
//  - the MLP's first fc by outputs (evenSlice; before swiglu a share of each
//    half, gate and value, laid out [gate share | value share]), the
//    activation after it on that share, the second fc by inputs (the share
//    it reads; whole bias, added by worker 0 only): its output is a partial
//    sum;
//  - the embedding's token rows vocabRows(V, t, r) (a token outside them
//    gives zeros) and the whole position table, added by worker 0 only; the
//    fc feeding the loss (tied or not) by the same rows, and the loss
//    softmax over them (softmaxStats merged as for a sliced softmax);
//  - every other layer whole.
// Every parameter draws the value the whole layer's would have. The caller
// sums the partial outputs (output(l) of attention, the second fc, the
// embedding) and the partial input gradients of attention, the first fc and
// the output fc (outputGrad of their input, which no other layer may read)
// over the group, as the Plan's tensor-parallel collectives do.
//
// Loss. softmax + cross-entropy over channels at every position (a
// classifier has one position per example); the loss is the mean over the
// positions of the batch, or the sum divided by setLossNormalizer(N): with
// N = K * b on each of K data-parallel workers, summing their gradients gives
// the gradient of the mean over the global batch.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "strata/exec/nn/backend.h"
#include "strata/exec/nn/tensor.h"
#include "strata/model/network.h"
#include "strata/model/strategy.h"
#include "strata/model/tensor_parallel.h"

namespace strata::nn {

// A half-open range [begin, end) of output neurons (channels) of a layer.
struct NeuronRange {
  int begin = 0;
  int end = 0;

  int size() const { return end - begin; }
  bool empty() const { return end <= begin; }
  bool operator==(const NeuronRange&) const = default;
};

// Part `index` of `n` neurons split into `parts` near-equal contiguous parts:
// [index * n / parts, (index + 1) * n / parts). Sizes differ by at most one, so
// any n >= parts works. Requires 0 <= index < parts.
NeuronRange evenSlice(int n, int parts, int index);

// Per layer: the fc layers from network.modelParallelFrom on get rank's even
// slice of their outputs; every other layer an empty range (not sliced). For
// ModelOptions::slices. Requires 0 <= rank < workers. Throws UserError when the
// network has no model-parallel part, and ConfigError naming the layer when an
// fc has fewer outputs than workers or the part holds a layer other than fc,
// dropout, softmax or a pointwise activation (relu, sigmoid, silu, relu6,
// hardsigmoid, hardswish, tanh: each acts on the slice it reads).
std::vector<NeuronRange> modelParallelSlices(const Network& network, int workers, int rank);

// This worker's place in a tensor-parallel group (the header comment).
struct TensorParallelRank {
  int size = 1;  // workers of the group; 1: every layer whole
  int rank = 0;  // in [0, size)
  // Megatron's sequence parallelism (tensor_parallel.h): the replicated
  // layers run on this worker's T / size positions of each example,
  // positions [rank T / size, (rank + 1) T / size).
  bool sequenceParallel = false;
};

// How to instantiate a Model.
struct ModelOptions {
  // Seeds the initial weights and the dropout masks. Weights are a pure
  // function of (seed, layer index, element of the whole layer).
  uint64_t seed = 1;
  // false: dropout layers are the identity (for equality tests between runs
  // whose batches are laid out differently).
  bool dropout = true;
  LrnDesc lrn{};               // constants of lrn layers (size comes from the layer)
  float batchNormEps = 1e-5f;  // added to the batch variance
  float layerNormEps = 1e-5f;  // added to each position's variance (PyTorch's default)
  // Empty, or one entry per layer: a non-empty range makes that layer (an fc)
  // model-parallel with only those output neurons. See the header comment.
  std::vector<NeuronRange> slices{};
  // Megatron tensor parallelism (the header comment); not with `slices`.
  TensorParallelRank tensorParallel{};
  // The backend to run on; null: the Model creates and owns a CpuBackend.
  // A given backend must outlive the Model.
  Backend* backend = nullptr;
  // false: the parameters stay zero, never written (batchnorm, layernorm and
  // rmsnorm scales included): for a Model whose backend only records its kernel
  // calls (kernel_recorder.h) on ReservedMemory, where the values are never
  // read and a 1.3-billion-parameter network must cost address space only.
  bool initializeParameters = true;
};

// The weight update and its hyper-parameters (exec::RunOptions carries one).
// sgd and momentum run Backend::sgdMomentum (sgd with momentum 0); adam and
// adamw run Backend::adam (adamw decoupled) at each layer's own step count.
struct UpdateRule {
  Optimizer optimizer = Optimizer::kMomentum;
  float learningRate = 0.01f;
  float momentum = 0.9f;  // sgd and momentum only (sgd: 0)
  // L2 in the gradient for sgd, momentum and adam; decoupled for adamw.
  float weightDecay = 0;
  // adam and adamw (AdamParams' defaults, PyTorch's).
  float beta1 = 0.9f;
  float beta2 = 0.999f;
  float eps = 1e-8f;

  // Backend::adam's parameters for step t >= 1.
  AdamParams adam(int64_t step) const {
    return {learningRate, beta1, beta2, eps, weightDecay, optimizer == Optimizer::kAdamW, step};
  }
};

// Offsets of one layer's parameters within Model::allParameters().
struct ParamBlock {
  int64_t offset = 0;   // first element
  int64_t weights = 0;  // weight elements (batchnorm: gamma)
  int64_t bias = 0;     // bias elements following them (batchnorm: shift)
  int64_t size() const { return weights + bias; }
};

// Buffers live in the backend's memory (Backend::memory()), which may be
// device memory the host cannot address (memory.h). So the Model hands its
// buffers out in two ways:
//  - as the memory's pointers (the Tensors of input, output, outputGrad,
//    inputGrad, exchangeInput, exchangeInputGrad; parametersNoWait,
//    gradientsNoWait, softmaxStatsNoWait): for the backend's kernels and a
//    communicator's BufferOps, never dereferenced by the host unless the
//    memory is host-accessible (Tensor::at, fill and the spans below check);
//  - as host copies: parametersToHost, gradientsToHost, softmaxStatsToHost,
//    Tensor::toHost (downloads, which wait for the kernels before them), and
//    setLabels, writeInput, uploadParameters, uploadGradients,
//    uploadSoftmaxStats (uploads, ordered after them).
// The host spans (parameters, gradients, momentum, allParameters,
// allGradients, softmaxStats) exist for host memory only: they throw
// InvariantError when the memory is not host-accessible. The accessors wait
// for the backend's kernels (Backend::synchronize()) before handing a buffer
// out, except the NoWait ones; the phases themselves do not wait.
class Model {
 public:
  // Allocates and initialises the parameters: biases and batchnorm shifts 0,
  // batchnorm scales 1, conv and fc weights uniform in [-a, a] with variance
  // 2 / fanIn (He et al. 2015, for layers whose only reader is a relu) or
  // 1 / fanIn (LeCun/Xavier-style, for the others, e.g. the classifier).
  // Transformer layers: attention's Wqkv and Wo like an fc reading d
  // features, embedding tables (tokens, then positions) with variance 1 / d,
  // layernorm gains 1 and biases 0, rmsnorm gains 1 (grouped-query attention:
  // Wqkv's d + 2 kv rows). Vision transformers (torchvision's ViT): a
  // class_token's tokens 0, a pos_embedding's table normal with std 0.02;
  // layer scale's gammas 1. A tied fc (spec.tiedTo) holds no weights:
  // it reads its embedding's token table, and its bwd_weights adds into that
  // table's gradient (the embedding's block, which the embedding's own
  // bwd_weights, last in backprop, completes).
  // Throws UserError naming the layer for an rnn layer (not supported), a
  // transformer layer on a backend that does not run them, one of Llama's
  // (rmsnorm, swiglu, grouped-query or rotary attention) on a backend whose
  // runsLlamaLayers() is false (cuda), a vision network's concat, mul,
  // slice, shuffle, scale, class_token, pos_embedding, token, sigmoid, silu,
  // relu6, hardsigmoid, hardswish or tanh on one whose
  // runsVisionLayers() is false (cuda), or a model-parallel or
  // tensor-parallel layout it cannot run.
  explicit Model(const Network& network, ModelOptions options = {});
  ~Model();
  Model(Model&&) noexcept;
  Model& operator=(Model&&) noexcept;

  const Network& network() const { return network_; }
  int layerCount() const { return static_cast<int>(network_.layers.size()); }
  Backend& backend() { return *backend_; }

  // ---- buffers ----
  // The network input resized to `batch` examples, for the caller to fill.
  Tensor& input(int batch);
  // The network input made from a batch of synthetic examples by the backend
  // (Backend::writeSynthetic): on a GPU by a kernel on its stream, without
  // waiting for the kernels of the step before.
  void writeInput(const SyntheticBatch& batch);
  const Tensor& input() const;
  // Labels of the softmax layer's batch, one per position (examples x h x w),
  // whole-layer class indices in [0, classes). Copied.
  void setLabels(std::span<const int32_t> labels);
  // Output activation of a layer (saved for backward); the slice for a sliced
  // layer. The softmax layer's output holds probabilities normalised over the
  // classes this worker holds.
  const Tensor& output(int layer) const;
  // Gradient of the loss with respect to output(layer), written by the
  // backwardData of its readers, or by the caller (model-parallel exchange).
  Tensor& outputGrad(int layer);
  // Gradient with respect to the network input; written by backwardData of
  // the layers that read the input (a Plan never asks for it: tests do).
  const Tensor& inputGrad() const;
  // True for a sliced (model-parallel) layer, which reads exchangeInput().
  bool modelParallel(int layer) const;
  // The output neurons this worker holds: the slice, or [0, channels).
  NeuronRange slice(int layer) const;
  // The whole input of a model-parallel layer, resized to `batch` examples
  // for the caller to fill (shape: the layer's inShape).
  Tensor& exchangeInput(int layer, int batch);
  // This worker's partial gradient with respect to exchangeInput(layer).
  const Tensor& exchangeInputGrad(int layer) const;

  // ---- sequence parallelism (TensorParallelRank::sequenceParallel) ----
  // output() and outputGrad() of a replicated layer, and of a layer whose
  // output the group reduce-scatters, hold this worker's T / t positions of
  // each example ([n, c, T / t, 1]). The group's collectives move the rest:
  //  - a layer that all-gathers its input (attention, the MLP's first fc,
  //    the output fc) reads every position from gatheredInput(layer), which
  //    the caller fills, and writes its partial input gradient, every
  //    position, to gatheredInputGrad(layer), which the caller
  //    reduce-scatters into its input's outputGrad();
  //  - a layer whose output the group reduce-scatters (attention, the MLP's
  //    second fc, the embedding) writes its partial output, every position,
  //    to fullOutput(layer), which the caller reduce-scatters into output(),
  //    and reads its output gradient from fullOutputGrad(layer), which the
  //    caller all-gathers from outputGrad().
  // Whether the layer all-gathers its input / reduce-scatters its output.
  bool gathersInput(int layer) const;
  bool scattersOutput(int layer) const;
  // Resized to `batch` examples of every position, for the caller to fill.
  Tensor& gatheredInput(int layer, int batch);
  const Tensor& gatheredInputGrad(int layer) const;
  const Tensor& fullOutput(int layer) const;
  Tensor& fullOutputGrad(int layer, int batch);

  // ---- phases (ranges index the layer's current batch; see header) ----
  void forward(int layer, ExampleRange examples);
  void forward(int layer);
  // The forward of the whole batch again, before the layer's backward
  // (--recompute full): the same outputs and saved tensors, bit for bit, and
  // no gradient buffer cleared (its inputs' may hold what later layers'
  // backward added).
  void recompute(int layer);
  // The attention core again (--recompute selective): layer `layer`'s
  // scores, probabilities and context from its saved Q, K and V
  // (Backend::attentionCoreForward), the same bits as its forward.
  void recomputeAttentionCore(int layer);
  // Gradient with respect to the layer's input(s) from outputGrad(layer)
  // (softmax: from the labels and softmaxStats()). Requires forward of the
  // same range.
  void backwardData(int layer, ExampleRange examples);
  void backwardData(int layer);
  // Adds the layer's weight gradients over the range to gradients(layer); a
  // no-op for layers without parameters.
  void backwardWeights(int layer, ExampleRange examples);
  void backwardWeights(int layer);
  // The rule's update of one layer's / every layer's parameters. The states
  // (momentum; Adam's m and v) start at zero. Adam counts each layer's
  // updates: a layer's n-th update is step n of its bias corrections (a
  // layer updated per round of a step counts every round); updateAll takes
  // one step for all, the most-updated layer's next, and sets every count
  // to it.
  void update(int layer, const UpdateRule& rule);
  void updateAll(const UpdateRule& rule);
  // SGD with momentum (UpdateRule with Optimizer::kMomentum).
  void update(int layer, float learningRate, float momentum, float weightDecay = 0);
  void updateAll(float learningRate, float momentum, float weightDecay = 0);
  // The same on elements [begin, end) of the parameters of layers
  // [firstLayer, lastLayer] taken as one span (a ps server's shard), so a
  // shard's update gives the bits update() gives on those elements; Adam at
  // step `step` >= 1 (the caller's count: a server's shard is part of a
  // layer, whose count update() keeps). Waits for the backend before
  // returning (a server thread sends the result).
  void updateShard(int firstLayer, int lastLayer, int64_t begin, int64_t end,
                   const UpdateRule& rule, int64_t step);
  // Sets every gradient / one layer's gradients to zero (after a per-round
  // update of the fc layers while the conv layers keep accumulating).
  void zeroGradients();
  void zeroGradients(int layer);
  // Zeroes the gradients that `layer`'s bwd_weights is the first to write in
  // backprop (layers in reverse order): its own, except an embedding's when
  // a tied fc writes into it first, plus, for the last tied fc of an
  // embedding, that embedding's. For a caller that clears gradients layer by
  // layer just before their backprop (ps's later steps in one plan).
  void zeroGradientsBeforeBackprop(int layer);

  // Single-worker conveniences over the whole batch: forward of every layer;
  // backward of every layer in reverse (weights, then data; data also for the
  // first layer when `inputGradient`). Not for models with sliced layers.
  void forwardAll();
  void backwardAll(bool inputGradient = false);

  // ---- parameters ----
  ParamBlock paramBlock(int layer) const;
  // Elements of the parameters (this worker's: a slice's rows only).
  int64_t parameterCount() const { return static_cast<int64_t>(params_.size()); }
  std::span<float> parameters(int layer);  // weights then bias, contiguous
  std::span<float> gradients(int layer);
  // Gradients of layers [firstLayer, lastLayer], one contiguous span.
  std::span<float> gradients(int firstLayer, int lastLayer);
  // The same span without waiting for the backend: for a caller that orders
  // its accesses itself (the Plan interpreter waits for the event after the
  // task that produced these gradients, not for every kernel enqueued since).
  std::span<float> gradientsNoWait(int firstLayer, int lastLayer);
  // Parameters of layers [firstLayer, lastLayer], one contiguous span, without
  // waiting for the backend (a ps pull lands the new weights in it).
  std::span<float> parametersNoWait(int firstLayer, int lastLayer);
  std::span<float> allParameters();
  std::span<float> allGradients();
  std::span<float> momentum(int layer);  // allocates the momentum on first use
  // The index in a one-worker Model's allParameters() of element i of this
  // worker's: the identity, but for a model-parallel slice or a
  // tensor-parallel share (whose elements hold the whole layer's there).
  int64_t wholeParameterIndex(int64_t i) const;
  // An embedding's token table on this worker (its rows, tensor-parallel
  // share included, times its features): the first elements of its
  // parameter block, before the position table.
  int64_t tokenTableElements(int layer) const;
  // How many updates the layer has had (Adam's step count).
  int64_t updateCount(int layer) const { return updates_.at(static_cast<size_t>(layer)); }

  // ---- host copies (any memory; see above) ----
  std::vector<float> parametersToHost();
  std::vector<float> gradientsToHost();
  // Layers [firstLayer, lastLayer], as parametersNoWait lays them out.
  std::vector<float> parametersToHost(int firstLayer, int lastLayer);
  std::vector<float> gradientsToHost(int firstLayer, int lastLayer);
  // Writes host values over every parameter / those of layers [firstLayer,
  // lastLayer] (sizes must match).
  void uploadParameters(std::span<const float> values);
  void uploadParameters(int firstLayer, int lastLayer, std::span<const float> values);
  void uploadGradients(int firstLayer, int lastLayer, std::span<const float> values);

  // ---- loss ----
  // 0 (default): the number of positions of the softmax batch.
  void setLossNormalizer(double normalizer) { lossNormalizer_ = normalizer; }
  // Per position of the softmax batch: (max, sum of exp(z - max)) over the
  // classes held, after forward(softmax); writable for merged statistics.
  std::span<float> softmaxStats();
  // The same statistics as the memory's pointers, without waiting.
  std::span<float> softmaxStatsNoWait();
  std::vector<float> softmaxStatsToHost();
  void uploadSoftmaxStats(std::span<const float> values);
  // Cross-entropy summed over positions / normaliser, from the logits of the
  // last forward, the labels and softmaxStats(); for a sliced softmax this
  // worker's share (see header).
  double loss();
  // Positions whose label has the largest logit (this worker's share).
  int64_t correctCount();
  // correctCount() / positions.
  double accuracy();

  // The dropout masks are a function of (seed, step, layer, row, neuron); the
  // caller advances the step so each step draws new masks.
  void setStep(uint64_t step) { step_ = step; }

  // ---- micro-batches in flight (a pipeline stage) ----
  // What one micro-batch's forward writes and its backward reads (every
  // layer's output and output gradient and its saved tensors, the network
  // input and its gradient, the labels, the softmax statistics) exists once
  // per activation slot; the parameters, their gradients and the
  // optimizer's states once. A Model starts with one slot. setActivationSlots
  // makes more, empty: a tensor is sized at its first use, so a slot holds
  // only the layers run in it. Not while a phase or another thread uses the
  // Model.
  void setActivationSlots(int slots);
  int activationSlots() const { return static_cast<int>(slots_.size()); }
  // The phases and every accessor above work on slot `slot` from now on.
  void useActivationSlot(int slot);
  int activationSlot() const;
  // Slot `slot`'s output of `layer` and that output's gradient, sized for
  // `batch` examples as the layer's forward would size them: where a
  // pipeline's transfer reads or lands one micro-batch's boundary tensor
  // while the phases run another's. The current slot stays; another thread
  // may call these while the phases work on a different slot.
  Tensor& slotOutput(int layer, int slot, int batch);
  Tensor& slotOutputGrad(int layer, int slot, int batch);

 private:
  struct LayerState;

  ConstTensorView inputOf(int layer, int which) const;
  // The output gradient the layer's backward reads: outGrad, or the
  // all-gathered fullGrad of a layer that scatters its output.
  const Tensor& outputGradOf(int layer) const;
  // The dropout layer's masks over the range (its slice or positions).
  DropoutDesc dropoutDesc(int layer, ExampleRange r) const;
  // Sets layer l's tensor-parallel part, bias and attention or embedding
  // share (whole for t = 1).
  void shareOf(int l, TensorParallelRank tp, TpRole role);
  // Sequence parallelism: which layers hold a worker's positions, gather
  // their input or scatter their output (LayerState); refuses a layer that
  // reads what its part cannot.
  void splitPositions(TensorParallelRank tp);
  // Input features of an fc layer's GEMMs: the whole layer's, or the slice
  // a tensor-parallel row fc reads.
  int fcInputs(int layer) const;
  // The element of the whole layer's parameters (weights then bias) that
  // element `e` of this worker's block of `layer` holds (the identity but
  // for a slice or a share).
  int64_t wholeElement(int layer, int64_t e) const;
  // Where the weights a layer's GEMMs read (and its weight gradient) start in
  // params_ (grads_): its own block, or for a tied fc its embedding's token
  // table (gradientOwner).
  int64_t weightOffset(int layer) const;
  // An attention layer's saved tensors over examples r.
  AttentionSaved attentionSaved(int layer, ExampleRange r);
  // Layers [firstLayer, lastLayer] of a parameter-shaped buffer, one span.
  std::span<float> layersOf(Buffer<float>& buffer, int firstLayer, int lastLayer) const;
  // Allocates (zero-filled) the states `optimizer` keeps, on first use.
  void allocateStates(Optimizer optimizer);
  // The rule's kernel on one span of parameters, gradients and states (at
  // `offset` in every parameter-shaped buffer), Adam at step `step`.
  void applyRule(const UpdateRule& rule, int64_t offset, int64_t size, int64_t step);
  Tensor& gradTargetOf(int layer, int which);
  float betaOf(int layer, int which) const;
  // Slot `slot`'s state of `layer`, its output and output gradient sized for
  // `batch` examples.
  LayerState& slotLayer(int layer, int slot, int batch);
  // Dims of the layer's output (and output gradient) for `batch` examples.
  Dims outDims(int layer, int batch) const;
  void prepareForward(int layer, ExampleRange r, bool clearGradients);
  void runForward(int layer, ExampleRange r, bool clearGradients);
  void checkRange(int layer, ExampleRange r) const;
  int softmaxLayer() const;
  int64_t softmaxPositions() const;
  SoftmaxLossSum softmaxSums();

  Network network_;
  ModelOptions options_;
  std::unique_ptr<Backend> ownedBackend_;
  Backend* backend_ = nullptr;
  struct Activations;
  // Activation slots (setActivationSlots), each where it stays; act_: the
  // current one.
  std::vector<std::unique_ptr<Activations>> slots_;
  Activations* act_ = nullptr;
  std::vector<ParamBlock> blocks_;
  // Per layer: the layer whose bwd_weights writes its gradient block first in
  // backprop (itself, or the last tied fc of an embedding).
  std::vector<int> firstGradientWriter_;
  Buffer<float> params_;
  Buffer<float> grads_;
  Buffer<float> momentum_;
  Buffer<float> adamM_;  // Adam's moments, allocated (zero) by the first adam update
  Buffer<float> adamV_;
  std::vector<int64_t> updates_;  // per layer: updates so far (Adam's step count)
  int inputReaders_ = 0;
  int inputFirstReader_ = -1;
  double lossNormalizer_ = 0;
  uint64_t step_ = 0;
};

// Merges softmax statistics: into = the statistics of the union of the two
// sets of classes (max of the maxima; sums rescaled to the common max).
// Both spans hold (max, sum) pairs for the same positions.
void mergeSoftmaxStats(std::span<float> into, std::span<const float> other);

// Softmax cross-entropy on whole logits (n, classes, h, w) gathered by the
// caller: returns the loss summed over positions / normalizer (0: the number
// of positions) and, when dlogits is non-null, writes its gradient there.
double softmaxCrossEntropy(Backend& backend, ConstTensorView logits,
                           std::span<const int32_t> labels, double normalizer, TensorView* dlogits);

}  // namespace strata::nn
