// Inside the CPU backend: the kernels of one instruction set. Their files
// (cpu_kernels.cpp lists them) are compiled once per ISA the build supports,
// each time with STRATA_CPU_ISA set to that ISA's namespace (cpu_baseline,
// cpu_avx2, cpu_avx512), its compiler flags, and `Eigen` renamed
// (strata_eigen_<isa>). CMake then links each ISA's objects into one
// relocatable object whose symbols are all local except those of its own
// namespace, so an inline function or template that two copies both
// instantiate (std::vector<float>'s members, say) is never shared
// between them: code built for AVX-512 cannot be reached from the baseline
// path on a CPU without it. CpuBackend (cpu_backend.cpp) picks a table at
// run time from the CPU's features.
#pragma once

#include <memory>
#include <span>
#include <vector>

#include "strata/exec/nn/backend.h"
#include "strata/model/kernels.h"
#include "thread_team.h"

namespace strata::nn {

// What one ISA's copy exports: a backend factory and the kernels that
// `strata calibrate` times alone (see CpuBackend's static members).
struct CpuIsaTable {
  std::unique_ptr<Backend> (*make)(ThreadTeam& team);
  void (*gemm)(GemmOp op, int m, int n, int k, const float* a, const float* b, float* c,
               bool accumulate);
  void (*im2col)(const ConvDesc& d, const float* x, float* col);
  void (*col2im)(const ConvDesc& d, const float* col, float* x);
  void (*biasAdd)(float* y, const float* bias, int channels, int64_t positions);
  void (*biasGrad)(const float* dy, float* dbias, int channels, int64_t positions);
  void (*zero)(float* x, int64_t count);
  void (*attnSoftmaxForward)(const float* s, float* p, int64_t rows, int t, bool causal,
                             float scale);
  void (*attnSoftmaxBackward)(const float* p, const float* dp, float* ds, int64_t rows, int t,
                              float scale);
  void (*adam)(std::span<float> w, std::span<float> m, std::span<float> v, std::span<const float> g,
               const AdamParams& p);
  void (*rotaryTable)(int dh, int t, float base, std::vector<float>& table);
  void (*rotary)(float* x, int64_t blocks, int dh, int r, int t, const float* table, bool inverse);
};

namespace cpu_baseline {
const CpuIsaTable& table();
}
#if STRATA_CPU_HAVE_AVX2
namespace cpu_avx2 {
const CpuIsaTable& table();
}
#endif
#if STRATA_CPU_HAVE_AVX512
namespace cpu_avx512 {
const CpuIsaTable& table();
}
#endif

}  // namespace strata::nn

#ifdef STRATA_CPU_ISA
namespace strata::nn::STRATA_CPU_ISA {

class CpuImpl final : public Backend {
 public:
  // team: the worker's threads (not owned; outlives this backend).
  explicit CpuImpl(ThreadTeam& team) : team_(team) {}
  std::string_view name() const override { return "cpu"; }

  void convForward(const ConvDesc& d, ConstTensorView x, const float* w, const float* bias,
                   TensorView y) override;
  void convBackwardData(const ConvDesc& d, ConstTensorView dy, const float* w, TensorView dx,
                        float beta) override;
  void convBackwardWeights(const ConvDesc& d, ConstTensorView x, ConstTensorView dy, float* dw,
                           float* dbias) override;

  void poolForward(const PoolDesc& d, ConstTensorView x, TensorView y, int32_t* argmax) override;
  void poolBackward(const PoolDesc& d, ConstTensorView dy, const int32_t* argmax, TensorView dx,
                    float beta) override;

  void fcForward(const FcDesc& d, ConstTensorView x, const float* w, const float* bias,
                 TensorView y) override;
  void fcBackwardData(const FcDesc& d, ConstTensorView dy, const float* w, TensorView dx,
                      float beta) override;
  void fcBackwardWeights(const FcDesc& d, ConstTensorView x, ConstTensorView dy, float* dw,
                         float* dbias) override;

  void reluForward(ConstTensorView x, TensorView y) override;
  void reluBackward(ConstTensorView y, ConstTensorView dy, TensorView dx, float beta) override;
  void dropoutForward(const DropoutDesc& d, ConstTensorView x, TensorView y) override;
  void dropoutBackward(const DropoutDesc& d, ConstTensorView dy, TensorView dx,
                       float beta) override;
  void fill(std::span<float> x, float value) override;
  void add(ConstTensorView a, ConstTensorView b, TensorView y) override;
  void accumulate(ConstTensorView src, TensorView dst, float beta) override;

  void lrnForward(const LrnDesc& d, ConstTensorView x, TensorView y, TensorView scale) override;
  void lrnBackward(const LrnDesc& d, ConstTensorView x, ConstTensorView y, ConstTensorView scale,
                   ConstTensorView dy, TensorView dx, float beta) override;

  void batchNormForward(ConstTensorView x, const float* gamma, const float* shift, float eps,
                        TensorView y) override;
  void batchNormBackwardData(ConstTensorView x, ConstTensorView dy, const float* gamma, float eps,
                             TensorView dx, float beta) override;
  void batchNormBackwardWeights(ConstTensorView x, ConstTensorView dy, float eps, float* dgamma,
                                float* dshift) override;

  void softmaxStats(ConstTensorView logits, float* stats) override;
  void softmaxProbabilities(ConstTensorView logits, const float* stats, TensorView y) override;
  SoftmaxLossSum softmaxLoss(ConstTensorView logits, const float* stats, const int32_t* labels,
                             int classOffset) override;
  void softmaxBackward(ConstTensorView logits, const float* stats, const int32_t* labels,
                       int classOffset, float scale, TensorView dlogits, float beta) override;

  bool runsTransformerLayers() const override { return true; }
  void layerNormForward(ConstTensorView x, const float* gain, const float* bias, float eps,
                        TensorView y) override;
  void layerNormBackwardData(ConstTensorView x, ConstTensorView dy, const float* gain, float eps,
                             TensorView dx, float beta) override;
  void layerNormBackwardWeights(ConstTensorView x, ConstTensorView dy, float eps, float* dgain,
                                float* dbias) override;
  void geluForward(ConstTensorView x, TensorView y) override;
  void geluBackward(ConstTensorView x, ConstTensorView dy, TensorView dx, float beta) override;
  bool runsLlamaLayers() const override { return true; }
  void rmsNormForward(ConstTensorView x, const float* gain, float eps, TensorView y) override;
  void rmsNormBackwardData(ConstTensorView x, ConstTensorView dy, const float* gain, float eps,
                           TensorView dx, float beta) override;
  void rmsNormBackwardWeights(ConstTensorView x, ConstTensorView dy, float eps,
                              float* dgain) override;
  void swigluForward(ConstTensorView x, TensorView y) override;
  void swigluBackward(ConstTensorView x, ConstTensorView dy, TensorView dx, float beta) override;
  void attentionForward(const AttentionDesc& d, ConstTensorView x, const float* w,
                        const float* bias, const AttentionSaved& saved, TensorView y) override;
  void attentionCoreForward(const AttentionDesc& d, const AttentionSaved& saved) override;
  bool runsAttentionCore() const override { return true; }
  void attentionBackwardWeights(const AttentionDesc& d, ConstTensorView x, ConstTensorView dy,
                                const float* w, const AttentionSaved& saved, float* dw,
                                float* dbias) override;
  void attentionBackwardData(const AttentionDesc& d, ConstTensorView dqkv, const float* w,
                             TensorView dx, float beta) override;
  void embeddingForward(const EmbeddingDesc& d, ConstTensorView ids, const float* table,
                        TensorView y) override;
  void embeddingBackwardWeights(const EmbeddingDesc& d, ConstTensorView ids, ConstTensorView dy,
                                float* dtable) override;

  bool runsVisionLayers() const override { return true; }
  void activationForward(Activation fn, ConstTensorView x, TensorView y) override;
  void activationBackward(Activation fn, ConstTensorView x, ConstTensorView y, ConstTensorView dy,
                          TensorView dx, float beta) override;
  void copyIntoChannels(ConstTensorView src, TensorView dst, int channelOffset) override;
  void copyFromChannels(ConstTensorView src, int channelOffset, TensorView dst,
                        float beta) override;
  void addIntoChannels(ConstTensorView src, TensorView dst, int channelOffset, float beta) override;
  void shuffleChannels(ConstTensorView x, int groups, TensorView y, float beta) override;
  void scaleChannels(ConstTensorView x, const float* gamma, TensorView y, float beta) override;
  void scaleBackwardWeights(ConstTensorView x, ConstTensorView dy, float* dgamma) override;
  void copyPositions(ConstTensorView src, int srcFirst, TensorView dst, int dstFirst, int count,
                     float beta) override;
  void broadcastPositions(const float* table, int count, TensorView dst, int dstFirst) override;
  void addTable(ConstTensorView x, const float* table, TensorView y) override;
  void sumPositions(ConstTensorView src, int srcFirst, int count, float* table) override;
  void mulForward(ConstTensorView x, ConstTensorView g, TensorView y) override;
  void mulBackward(ConstTensorView x, ConstTensorView g, ConstTensorView dy, TensorView dx,
                   float betaX, TensorView dg, float betaG) override;

  void sgdMomentum(std::span<float> w, std::span<float> v, std::span<const float> g,
                   float learningRate, float momentum, float weightDecay) override;
  void adam(std::span<float> w, std::span<float> m, std::span<float> v, std::span<const float> g,
            const AdamParams& p) override;

  // ---- the kernels inside the layers above, for calibration ----------------
  // Each is the exact code the layer kernels run (model/kernels.h names them),
  // exposed so that `strata calibrate` can time it alone at any size.

  // C (m x n) = op(A) op(B), or C += that when `accumulate`; row-major; A and
  // B as the op reads them (nn: A m x k, B k x n; nt: B n x k; tn: A k x m).
  static void gemm(GemmOp op, int m, int n, int k, const float* a, const float* b, float* c,
                   bool accumulate);
  // One example's column matrix (ungrouped): col has inC*kh*kw x outH*outW.
  static void im2colKernel(const ConvDesc& d, const float* x, float* col);
  // Adds a column matrix back onto one example's input (the adjoint).
  static void col2imKernel(const ConvDesc& d, const float* col, float* x);
  // y (channels x positions) += bias per channel; dbias += per-channel sums.
  static void biasAdd(float* y, const float* bias, int channels, int64_t positions);
  static void biasGrad(const float* dy, float* dbias, int channels, int64_t positions);
  // x = 0 over count elements (what an overwriting gradient kernel does first).
  static void zero(float* x, int64_t count);
  // Attention's softmax over `rows` rows of t scores (row r is query r % t of
  // its head): p = softmax(scale * s), keys after the query 0 when causal
  // (attn_softmax_fwd). p may be s (the layer runs it in place).
  static void attnSoftmaxForward(const float* s, float* p, int64_t rows, int t, bool causal,
                                 float scale);
  // dS = scale * p * (dP - rowsum(dP * p)) (attn_softmax_bwd); ds may be dp.
  static void attnSoftmaxBackward(const float* p, const float* dp, float* ds, int64_t rows, int t,
                                  float scale);
  // Rotary positions' table for r turned features over t positions (the
  // cosine and sine of each pair i < r/2 at each position, interleaved,
  // pair-major), with angles p base^(-2i/r).
  static void rotaryTable(int r, int t, float base, std::vector<float>& table);
  // Turns the first r features of `blocks` heads of dh x t (feature-major)
  // in place by the table's angles (rotary), pairs (i, i + r/2), or back
  // (inverse: R^T, the gradients' way); features r.. stay.
  static void rotaryKernel(float* x, int64_t blocks, int dh, int r, int t, const float* table,
                           bool inverse);
  // Backend::adam's kernel (adam): what training runs and `strata calibrate`
  // times.
  static void adamKernel(std::span<float> w, std::span<float> m, std::span<float> v,
                         std::span<const float> g, const AdamParams& p);

 private:
  // attentionForward's core, in its order: example n's scores (Q K^T per
  // head into saved.probs), the batch's softmax over them, example n's
  // context (V P^T per head into saved.context).
  void attentionScores(const AttentionDesc& d, int n, const AttentionSaved& saved);
  void attentionSoftmax(const AttentionDesc& d, int examples, const AttentionSaved& saved);
  void attentionContext(const AttentionDesc& d, int n, const AttentionSaved& saved);
  // C = op(A) op(B) (+ C) split over the team's threads by rows or columns.
  void teamGemm(GemmOp op, int m, int n, int k, const float* a, const float* b, float* c,
                bool accumulate);
  // How many threads a kernel over `examples` independent examples of
  // `perExample` elements takes: at least kElementGrain elements each.
  int examplesParts(int examples, int64_t perExample) const;
  // teamGemm when `split`, else gemm on this thread; either reports one call.
  void gemmOn(bool split, GemmOp op, int m, int n, int k, const float* a, const float* b, float* c,
              bool accumulate) {
    if (split)
      teamGemm(op, m, n, k, a, b, c, accumulate);
    else if (runsGemm(op, m, n, k, accumulate))
      gemm(op, m, n, k, a, b, c, accumulate);
  }
  // dst = beta * dst before a kernel adds its result; beta 0 is a call of
  // the zero kernel (it must not read dst: it may hold NaN).
  void scaleForBeta(TensorView dst, float beta);
  // Scratch of `elements` floats for each of `parts` threads (none in a
  // record-only run, whose kernels touch no data).
  void reserveScratch(int parts, int64_t elements);

  ThreadTeam& team_;
  std::vector<std::vector<float>> scratch_;   // per thread: im2col of one example and group
  std::vector<std::vector<float>> partials_;  // per thread: conv weight gradients
  std::vector<float> col_;                    // scratch of the serial kernels (lrn, layernorm)
  std::vector<float> dcontext_;               // attention backward: dC of one example (d x T)
  std::vector<float> dprobs_;                 // attention backward: dP, then dS, of the batch
  std::vector<float> rotary_;                 // attention: rotary positions' cosines and sines
  std::vector<float> rowMean_;                // layernorm: per position of one example
  std::vector<float> rowInvStd_;
};

}  // namespace strata::nn::STRATA_CPU_ISA
#endif
