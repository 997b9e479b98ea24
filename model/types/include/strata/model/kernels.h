// Kernel tables: what a compute backend's kernels cost on one device, measured
// by `strata calibrate` independently of any network, and the lowering of a
// layer phase into the kernels the backend really runs.
//
// A layer phase is priced as the sum of its kernel calls, each at the exact
// shape the backend runs it: GEMMs from a grid of (m, n, k) per transpose
// variant, memory-bound kernels (elementwise, pooling, LRN, softmax,
// batchnorm, im2col/col2im, SGD, reduce-add) from a throughput-by-size table.
// The CPU lowering (backend "cpu") mirrors executor/nn/src/cpu_kernels.cpp and
// model.cpp call for call; a GPU backend fills the same tables from
// cuBLAS/cuDNN and adds its own lowering (e.g. a convolution table).
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "strata/model/network.h"
#include "strata/model/units.h"

namespace strata {

enum class ElementType;  // cluster.h

// C (m x n) = op(A) (m x k) * op(B) (k x n), row-major, as Eigen runs them:
// nn: A * B; nt: A * B^T; tn: A^T * B.
enum class GemmOp { kNN, kNT, kTN };
inline constexpr GemmOp kAllGemmOps[] = {GemmOp::kNN, GemmOp::kNT, GemmOp::kTN};
std::string_view toString(GemmOp op);

// Memory-bound kernels; each table row counts the kernel's own unit per call
// (docs/configs.md, "kernels"): elements of the tensor it produces, except
// im2col/col2im (elements of the column matrix), pool forward (window reads:
// output elements x window area) and sgd/reduce (parameters / elements summed).
enum class MemKernel {
  kIm2col,
  kCol2im,
  kZero,        // fill with 0 before an accumulating kernel (beta = 0)
  kCopy,        // dst = src
  kAccumulate,  // dst += src
  kAdd,         // y = a + b
  kBias,        // y += bias (per output channel)
  kBiasGrad,    // dbias += sums of dy
  kReluFwd,
  kReluBwd,
  kDropoutFwd,
  kDropoutBwd,
  kPoolMaxFwd,  // unit: window reads
  kPoolMaxBwd,  // unit: input elements (zeroing dx, then scattering)
  kPoolAvgFwd,  // unit: window reads
  kPoolAvgBwd,  // unit: window reads
  kLrnFwd,
  kLrnBwd,
  kSoftmaxFwd,  // statistics + probabilities
  kSoftmaxBwd,  // loss + gradient
  kBatchNormFwd,
  kBatchNormBwdData,
  kBatchNormBwdWeights,
  kSgd,     // unit: parameters
  kReduce,  // unit: elements summed into an accumulator (y += x)
  // The window kernels above are timed with 3x3 windows, these with 2x2:
  // a pooling layer's rate is interpolated by its window area between them.
  kPoolMaxFwd2,
  kPoolAvgFwd2,
  kPoolAvgBwd2,
  // Transformer layers (unit: elements of the tensor produced, except as noted).
  kLayerNormFwd,
  kLayerNormBwdData,
  kLayerNormBwdWeights,  // unit: input elements read
  kGeluFwd,
  kGeluBwd,
  kAttnSoftmaxFwd,  // scaled, causally masked softmax over attention scores; unit: scores
  kAttnSoftmaxBwd,  // unit: scores
  kEmbeddingFwd,    // gather of token (and position) vectors; unit: output elements
  kEmbeddingBwd,    // scatter-add into the tables; unit: output elements
  kAdam,            // unit: parameters
  // Mixed precision (the CUDA backend's --element bf16): the casts around its
  // bf16 GEMMs and convolutions; unit: elements converted.
  kCastBf16,  // fp32 -> bf16 (round to nearest even), an operand into scratch
  kCastFp32,  // bf16 -> fp32 with beta, a convolution's result out of scratch
  // Llama's layers (unit: elements of the tensor produced, except as noted).
  kRmsNormFwd,
  kRmsNormBwdData,
  kRmsNormBwdWeights,  // unit: input elements read
  kSwigluFwd,          // unit: output elements (half the input's)
  kSwigluBwd,          // unit: output-gradient elements (half of dx's)
  kRotary,             // rotary positions of Q and K, or their inverse on dQ, dK; unit: elements
  // Vision networks' activations and gates (unit: elements of the tensor
  // produced): sigmoid, silu and tanh (timed as silu, the dearest); relu6,
  // hardsigmoid and hardswish, piecewise linear (timed as hardswish); the
  // product x * g (timed with a per-channel gate, backward giving dx and dg).
  kSigmoidFwd,
  kSigmoidBwd,
  kHardActFwd,
  kHardActBwd,
  kMulFwd,
  kMulBwd,
  // Layer scale (a learned value per channel): y = gamma x, and backward's
  // dx = gamma dy, one kernel; its gradient dgamma += sums of dy x (unit:
  // input elements read).
  kScaleFwd,
  kScaleGrad,
  // im2col and col2im cost more per element on short rows (a fixed cost per
  // output row) and on strided taps (gathered reads): kIm2col and kCol2im
  // are timed on rows of 64 at stride 1 (3x3 taps), these on rows of 8 at
  // stride 1 and on rows of 64 at strides 2 and 4 (3x3 and 7x7 taps, which
  // overlap as strided convolutions' do); columnsTime combines them by a
  // layer's row width and stride.
  kIm2colShort,
  kCol2imShort,
  kIm2colStride2,
  kCol2imStride2,
  kIm2colStride4,
  kCol2imStride4,
};
inline constexpr int kMemKernelCount = 60;
// The output row widths of the im2col/col2im tables (strata calibrate).
inline constexpr int kColumnsLongRow = 64;
inline constexpr int kColumnsShortRow = 8;
std::string_view toString(MemKernel kernel);
// Parses a config name ("relu_fwd"); false when unknown.
bool parseMemKernel(std::string_view name, MemKernel& out);

// Attained rate by size for one kernel: `rate[i]` units per second at
// `units[i]` units per call (sizes increasing). Log-linear in between;
// constant beyond the ends.
struct SizeTable {
  std::vector<double> units;
  std::vector<double> rate;
  bool empty() const { return units.empty(); }
};

// GEMM FLOP/s on a grid: the same increasing `dims` for m, n and k.
struct GemmTable {
  std::vector<int64_t> dims;
  // rate[op][(im * D + in) * D + ik], FLOP/s.
  std::array<std::vector<double>, 3> rate;
  bool empty() const { return dims.empty(); }
};

// The three passes of a convolution as cuDNN runs them, each an implicit
// GEMM over the unfolded input: forward Y (m x n) = X_col (m x k) W^T,
// backward data dX_col (m x k) = dY (m x n) W, backward filter dW (n x k) =
// dY^T X_col, with m = examples x output positions, n = filters per group,
// k = input channels per group x kernel area.
enum class ConvPass { kFwd, kBwdData, kBwdFilter };

// Where a kernel call's operands are, as the tables time them: hot (the
// call repeated on the same buffers, as the plain tables), warm (out of the
// core's own cache, in the last-level one: memoryWarm, gemmWarm) or cold
// (out of every cache: memoryCold, gemmCold).
enum class Residence { kHot, kWarm, kCold };
inline constexpr ConvPass kAllConvPasses[] = {ConvPass::kFwd, ConvPass::kBwdData,
                                              ConvPass::kBwdFilter};
std::string_view toString(ConvPass pass);  // fwd, bwd_data, bwd_filter

// The GEMM and convolution tables of one element type other than fp32
// (backend cuda): `gemm` and `conv` as KernelTables has them, measured through
// the backend's fc and conv phases in that precision (CudaBackendOptions::
// element), so a bf16 entry includes the casts of its operands (and a
// convolution's of its result) that the backend makes around each call.
struct ElementTables {
  GemmTable gemm;
  GemmTable conv;
};

struct KernelTables {
  // "cpu": the lowering of executor/nn's CPU backend (lowerCpu); "cuda": of
  // its CUDA backend (lowerCuda: cuDNN convolutions, cuBLAS GEMMs, kernels/).
  std::string backend;
  GemmTable gemm;
  // cuda: FLOP/s of cuDNN's convolutions (3x3, stride 1, pad 1, the
  // algorithm cuDNN finds fastest) on a grid of implicit-GEMM shapes, indexed
  // by ConvPass instead of GemmOp. Empty: a convolution is priced as the GEMM
  // of its implicit shape (fwd as nt, bwd_data as nn, bwd_filter as tn, as fc
  // layers run them).
  GemmTable conv;
  std::array<SizeTable, kMemKernelCount> memory;
  // The same kernels with their operands out of the caches (calibrate times
  // each call after writing twice `lastLevelCache` bytes): what a kernel
  // costs in a step whose data outgrows the cache, where its operands were
  // last touched long ago (ComputeCosts, operand residency). A kernel without
  // a cold table is priced hot.
  std::array<SizeTable, kMemKernelCount> memoryCold;
  // The same kernels with their operands out of the core's own cache but in
  // the last-level one (calibrate since 2026-12-04 times each call right
  // after writing four times `coreCache` bytes): what a kernel costs in a
  // step for an operand the step touched a few MiB ago, which every operand
  // but the one the layer before just wrote is. On the 2-core Xeon VM a relu
  // over 256 KiB ran 5.6x slower than repeated, and tiny-gpt's adds and
  // layernorms, priced hot, ran 2-4x slower in a pass (docs/cost-model.md,
  // "Operands out of the core's cache"). A kernel without a warm table is
  // priced hot there.
  std::array<SizeTable, kMemKernelCount> memoryWarm;
  // memory, memoryWarm or memoryCold, by where the operands are.
  const std::array<SizeTable, kMemKernelCount>& memoryTables(Residence at) const {
    return at == Residence::kCold ? memoryCold : at == Residence::kWarm ? memoryWarm : memory;
  }
  // The cache private to a core (cpu0's largest level no other CPU shares:
  // L2), which the warm tables were flushed of; each of a worker's threads
  // has its own. 0: unknown (no warm pricing).
  Bytes coreCache;
  // The node's last-level cache the cold tables were flushed of, and which
  // ComputeCosts shares among the workers on a node; 0: unknown (no cold
  // pricing).
  Bytes lastLevelCache;
  // The cache an operand actually finds (strata calibrate since 2026-12-03):
  // a GEMM whose 64 MiB operand was last touched D bytes of other writes ago
  // is timed for several D, and C is the size for which the LRU share
  // 1 - min(1, C / (D + 64 MiB)) fits its slowdown between hot and cold best.
  // A VM's share of a host's cache can be far below the cache it reports
  // (the 2-core Xeon VM: 480 MiB reported). 0: not measured (ComputeCosts then
  // uses lastLevelCache).
  Bytes effectiveCache;
  // How much slower a GEMM runs with its operands out of the caches
  // (strata calibrate since 2026-12-04): on a coarse grid of shapes, each
  // call timed right after writing twice lastLevelCache and against the
  // same call repeated (how the gemm grid is timed); rate[op] holds cold
  // time / hot time (1: no slower). ComputeCosts prices a GEMM call as its
  // hot time x (1 + (slowdown - 1) x s), s the share of the call's operand
  // bytes that the step has evicted and the hot table had cached. Empty:
  // GEMMs are priced hot.
  GemmTable gemmCold;
  bool hasGemmCold() const { return !gemmCold.empty(); }
  // The same slowdown with the operands out of the core's cache only (each
  // call right after writing four times coreCache; the grid of gemmCold):
  // priced for the share of a call's operand bytes that the core's cache
  // lost and the last-level cache kept. Empty: priced as hot there.
  GemmTable gemmWarm;
  bool hasGemmWarm() const { return !gemmWarm.empty(); }
  // Fixed cost of one layer-phase call around its kernels (the Model's
  // bookkeeping: views, checks, buffer sizing), added once per phase.
  Seconds callOverhead;
  // The machine's speed while the tables were measured: validate's two
  // reference kernels (exec::referenceGemmRate, a 256^3 GEMM in FLOP/s;
  // exec::referenceCopyRate, a 16 MiB copy in floats/s; one thread) timed
  // before, between and after calibrate's sweeps, the median of each. 0: not
  // recorded (a file from before 2026-11-27, or a GPU's): validate then
  // anchors to the tables' own points for those kernels.
  double referenceGemmRate = 0;
  double referenceCopyRate = 0;
  // Optional (`by_element`, backend cuda): the tables of tf32 and bf16.
  std::map<ElementType, ElementTables> byElement;
  bool empty() const { return gemm.empty(); }
  // Whether `element` is priced from tables: fp32 when there are tables, any
  // other type when byElement has its GEMM table.
  bool pricesElement(ElementType element) const;
  // These tables with `element`'s GEMM and conv tables in place of fp32's
  // (requires pricesElement): memory-bound kernels stay fp32's, as the
  // backend runs every other layer in fp32 whatever the element.
  KernelTables forElement(ElementType element) const;

  // How the GEMM tables were timed: true (strata calibrate since
  // 2026-12-03, `gemm: {timed: accumulate}`) with C += op(A) op(B), the
  // product alone; a call writing C = is then priced as the product plus
  // the zero fill of C that Eigen makes before it (1.45x a 4096 x 4096 x 8
  // tn product alone on the 2-core VM). false: timed with C =, which every
  // call is priced as.
  bool gemmAccumulates = false;
  // Seconds of one GEMM call; sets *outside when a dimension lies beyond the
  // grid (the rate is then the edge's).
  Seconds gemmTime(GemmOp op, double m, double n, double k, bool* outside = nullptr) const;
  // Seconds of one convolution pass of implicit-GEMM shape (m, n, k): from
  // the conv table, or else the GEMM table (see `conv`).
  Seconds convTime(ConvPass pass, double m, double n, double k, bool* outside = nullptr) const;
  // Seconds of one call of a memory-bound kernel over `units` units, its
  // operands where `at` says: from memoryWarm or memoryCold where the kernel
  // has that table, else hot.
  Seconds memoryTime(MemKernel kernel, double units, bool* outside = nullptr,
                     Residence at = Residence::kHot) const;
  // A pooling window kernel (timed at 3x3) for a window of `window` elements:
  // interpolated by area between its 2x2 and 3x3 tables (*outside beyond).
  Seconds windowTime(MemKernel kernel, double units, double window, bool* outside = nullptr,
                     Residence at = Residence::kHot) const;
  // An im2col or col2im over `units` column entries whose output rows are
  // `rowWidth` long, at `stride`: time per unit e + r / rowWidth (a cost
  // per element and one per row, solved from the long and short tables;
  // rows past the long table's width at its rate), plus the strided
  // tables' extra per unit over stride 1, linear in log2 stride between
  // strides 1, 2 and 4 (stride 4's beyond, flagged *outside). Without
  // those tables, or without a geometry (rowWidth 0), memoryTime.
  Seconds columnsTime(MemKernel kernel, double units, int rowWidth, int stride,
                      bool* outside = nullptr, Residence at = Residence::kHot) const;
  // Whether any kernel has a cold table.
  bool hasCold() const;
  // gemmCold's slowdown of an `op` call of shape (m, n, k): trilinear in
  // log size between its grid points, the edges' beyond; at least 1; 1
  // without gemmCold.
  double gemmColdSlowdown(GemmOp op, double m, double n, double k) const;
  // The same of gemmWarm (1 without it).
  double gemmWarmSlowdown(GemmOp op, double m, double n, double k) const;
  // Whether any kernel has a warm table.
  bool hasWarm() const;
  // The cache ComputeCosts prices operand residency with: effectiveCache
  // where measured, else lastLevelCache.
  Bytes residencyCache() const {
    return effectiveCache.value() > 0 ? effectiveCache : lastLevelCache;
  }
  // Rate at a size (interpolated), for tests and printing.
  double gemmRate(GemmOp op, double m, double n, double k, bool* outside = nullptr) const;
  double memoryRate(MemKernel kernel, double units, bool* outside = nullptr,
                    Residence at = Residence::kHot) const;
};

// What a GEMM operand holds (KernelCall::a, b, c): the layer's weights or
// their gradient (one copy, re-read by each example's call), an activation
// of the step (each call its example's slice): the layer's input or output,
// or their gradients; or scratch the phase has just written (im2col
// columns, attention's per-head products), which is in the cache.
enum class GemmOperand {
  kScratch,
  kWeights,
  kWeightGrad,
  kInput,
  kOutput,
  kInputGrad,
  kOutputGrad
};

// One kernel call of a lowered layer phase, `count` times.
struct KernelCall {
  bool gemm = false;
  GemmOp op = GemmOp::kNN;
  bool conv = false;  // a cuDNN convolution pass (m, n, k: its implicit GEMM)
  ConvPass pass = ConvPass::kFwd;
  int64_t m = 0, n = 0, k = 0;  // GEMM shape
  // GEMM: C += op(A) op(B) (else C =, which Eigen runs as a zero fill of C
  // and then the same product: KernelTables::gemmAccumulates).
  bool accumulate = false;
  // GEMM: what A, B and C hold, by which ComputeCosts tells how long ago
  // the step last touched each (operand residency).
  GemmOperand a = GemmOperand::kScratch, b = GemmOperand::kScratch, c = GemmOperand::kScratch;
  MemKernel kernel = MemKernel::kCopy;
  double units = 0;   // memory kernel units per call
  double window = 0;  // pooling window area (window kernels), else 0
  // im2col and col2im: the convolution's output row width and stride
  // (KernelTables::columnsTime), else 0.
  int rowWidth = 0, stride = 0;
  double count = 1;
};

}  // namespace strata
