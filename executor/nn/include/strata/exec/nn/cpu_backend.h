// The CPU backend: convolutions and fully-connected layers as GEMMs through
// Eigen, everything else as plain loops, on the best instruction set the
// running CPU supports and on the worker's threads.
//
// The kernels are compiled once per instruction set (baseline x86-64 with
// SSE2, AVX2 + FMA, AVX-512; see src/cpu_isa.h) and one binary picks at run
// time, from the CPU's features, the best path it can run, the way oneDNN and
// OpenBLAS dispatch: no -march flags, no environment variable needed. Every
// path computes the same functions; GEMM results differ between paths in the
// last bits (FMA and vector widths change the order of float sums), the other
// kernels are the same bit for bit. Results are deterministic run to run for a
// given path and thread count.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "strata/exec/nn/backend.h"
#include "strata/model/kernels.h"

namespace strata::nn {

struct CpuIsaTable;
class ThreadTeam;

// The instruction-set paths of the CPU kernels, worst first.
enum class CpuIsa { kBaseline, kAvx2, kAvx512 };

// "baseline", "avx2", "avx512": the names STRATA_CPU_ISA takes.
std::string_view cpuIsaName(CpuIsa isa);
// What the path uses, for the run header: "avx512 (AVX-512F/BW/DQ/VL, FMA)".
std::string cpuIsaDescription(CpuIsa isa);
// The paths this binary holds that this CPU can run, best first (baseline is
// always there).
std::vector<CpuIsa> runnableCpuIsas();
// The path CpuBackend takes: the best runnable one, or the one the
// environment variable STRATA_CPU_ISA names (for comparing paths and testing
// them on one machine). A name that is not a path, or a path this CPU cannot
// run or this binary does not hold, is a UserError naming the variable.
CpuIsa selectedCpuIsa();

struct CpuOptions {
  // Threads of this worker's kernels: the worker's own thread and threads - 1
  // helpers (--threads-per-worker; at least 1).
  int threads = 1;
  // Reports the kernels' calls from the start (setRecorder; not owned). A
  // record-only recorder also makes memory() ReservedMemory, so that a Model
  // on this backend allocates address space only (kernel_recorder.h).
  KernelRecorder* recorder = nullptr;
  // Where the buffers live (not owned; it must outlive the backend); null:
  // host memory. The kernels use its pointers whatever it says of host
  // access: tests give memory that says the host may not address it, so
  // that host code touching a buffer fails as it would on a GPU.
  Memory* memory = nullptr;
};

// Not thread-safe (one per worker, as every Backend): the worker calls it
// from one thread, and it splits a kernel's work over its own team.
class CpuBackend final : public Backend {
 public:
  explicit CpuBackend(CpuOptions options = {});
  ~CpuBackend() override;

  std::string_view name() const override { return "cpu"; }
  Memory& memory() override { return reserved_ ? *reserved_ : memory_ ? *memory_ : hostMemory(); }
  CpuIsa isa() const { return isa_; }
  int threads() const;
  bool runsTransformerLayers() const override { return impl_->runsTransformerLayers(); }
  // The kernels (impl_) report their calls themselves, one per logical call
  // whatever the thread count splits it into (kernel_recorder.h).
  void setRecorder(KernelRecorder* recorder) override {
    Backend::setRecorder(recorder);
    impl_->setRecorder(recorder);
  }

  void convForward(const ConvDesc& d, ConstTensorView x, const float* w, const float* bias,
                   TensorView y) override {
    impl_->convForward(d, x, w, bias, y);
  }
  void convBackwardData(const ConvDesc& d, ConstTensorView dy, const float* w, TensorView dx,
                        float beta) override {
    impl_->convBackwardData(d, dy, w, dx, beta);
  }
  void convBackwardWeights(const ConvDesc& d, ConstTensorView x, ConstTensorView dy, float* dw,
                           float* dbias) override {
    impl_->convBackwardWeights(d, x, dy, dw, dbias);
  }
  void poolForward(const PoolDesc& d, ConstTensorView x, TensorView y, int32_t* argmax) override {
    impl_->poolForward(d, x, y, argmax);
  }
  void poolBackward(const PoolDesc& d, ConstTensorView dy, const int32_t* argmax, TensorView dx,
                    float beta) override {
    impl_->poolBackward(d, dy, argmax, dx, beta);
  }
  void fcForward(const FcDesc& d, ConstTensorView x, const float* w, const float* bias,
                 TensorView y) override {
    impl_->fcForward(d, x, w, bias, y);
  }
  void fcBackwardData(const FcDesc& d, ConstTensorView dy, const float* w, TensorView dx,
                      float beta) override {
    impl_->fcBackwardData(d, dy, w, dx, beta);
  }
  void fcBackwardWeights(const FcDesc& d, ConstTensorView x, ConstTensorView dy, float* dw,
                         float* dbias) override {
    impl_->fcBackwardWeights(d, x, dy, dw, dbias);
  }
  void reluForward(ConstTensorView x, TensorView y) override { impl_->reluForward(x, y); }
  void reluBackward(ConstTensorView y, ConstTensorView dy, TensorView dx, float beta) override {
    impl_->reluBackward(y, dy, dx, beta);
  }
  void dropoutForward(const DropoutDesc& d, ConstTensorView x, TensorView y) override {
    impl_->dropoutForward(d, x, y);
  }
  void dropoutBackward(const DropoutDesc& d, ConstTensorView dy, TensorView dx,
                       float beta) override {
    impl_->dropoutBackward(d, dy, dx, beta);
  }
  void fill(std::span<float> x, float value) override { impl_->fill(x, value); }
  void add(ConstTensorView a, ConstTensorView b, TensorView y) override { impl_->add(a, b, y); }
  void accumulate(ConstTensorView src, TensorView dst, float beta) override {
    impl_->accumulate(src, dst, beta);
  }
  void lrnForward(const LrnDesc& d, ConstTensorView x, TensorView y, TensorView scale) override {
    impl_->lrnForward(d, x, y, scale);
  }
  void lrnBackward(const LrnDesc& d, ConstTensorView x, ConstTensorView y, ConstTensorView scale,
                   ConstTensorView dy, TensorView dx, float beta) override {
    impl_->lrnBackward(d, x, y, scale, dy, dx, beta);
  }
  void batchNormForward(ConstTensorView x, const float* gamma, const float* shift, float eps,
                        TensorView y) override {
    impl_->batchNormForward(x, gamma, shift, eps, y);
  }
  void batchNormBackwardData(ConstTensorView x, ConstTensorView dy, const float* gamma, float eps,
                             TensorView dx, float beta) override {
    impl_->batchNormBackwardData(x, dy, gamma, eps, dx, beta);
  }
  void batchNormBackwardWeights(ConstTensorView x, ConstTensorView dy, float eps, float* dgamma,
                                float* dshift) override {
    impl_->batchNormBackwardWeights(x, dy, eps, dgamma, dshift);
  }
  void softmaxStats(ConstTensorView logits, float* stats) override {
    impl_->softmaxStats(logits, stats);
  }
  void softmaxProbabilities(ConstTensorView logits, const float* stats, TensorView y) override {
    impl_->softmaxProbabilities(logits, stats, y);
  }
  SoftmaxLossSum softmaxLoss(ConstTensorView logits, const float* stats, const int32_t* labels,
                             int classOffset) override {
    return impl_->softmaxLoss(logits, stats, labels, classOffset);
  }
  void softmaxBackward(ConstTensorView logits, const float* stats, const int32_t* labels,
                       int classOffset, float scale, TensorView dlogits, float beta) override {
    impl_->softmaxBackward(logits, stats, labels, classOffset, scale, dlogits, beta);
  }
  void layerNormForward(ConstTensorView x, const float* gain, const float* bias, float eps,
                        TensorView y) override {
    impl_->layerNormForward(x, gain, bias, eps, y);
  }
  void layerNormBackwardData(ConstTensorView x, ConstTensorView dy, const float* gain, float eps,
                             TensorView dx, float beta) override {
    impl_->layerNormBackwardData(x, dy, gain, eps, dx, beta);
  }
  void layerNormBackwardWeights(ConstTensorView x, ConstTensorView dy, float eps, float* dgain,
                                float* dbias) override {
    impl_->layerNormBackwardWeights(x, dy, eps, dgain, dbias);
  }
  bool runsLlamaLayers() const override { return impl_->runsLlamaLayers(); }
  void rmsNormForward(ConstTensorView x, const float* gain, float eps, TensorView y) override {
    impl_->rmsNormForward(x, gain, eps, y);
  }
  void rmsNormBackwardData(ConstTensorView x, ConstTensorView dy, const float* gain, float eps,
                           TensorView dx, float beta) override {
    impl_->rmsNormBackwardData(x, dy, gain, eps, dx, beta);
  }
  void rmsNormBackwardWeights(ConstTensorView x, ConstTensorView dy, float eps,
                              float* dgain) override {
    impl_->rmsNormBackwardWeights(x, dy, eps, dgain);
  }
  void swigluForward(ConstTensorView x, TensorView y) override { impl_->swigluForward(x, y); }
  void swigluBackward(ConstTensorView x, ConstTensorView dy, TensorView dx, float beta) override {
    impl_->swigluBackward(x, dy, dx, beta);
  }
  void geluForward(ConstTensorView x, TensorView y) override { impl_->geluForward(x, y); }
  void geluBackward(ConstTensorView x, ConstTensorView dy, TensorView dx, float beta) override {
    impl_->geluBackward(x, dy, dx, beta);
  }
  void attentionForward(const AttentionDesc& d, ConstTensorView x, const float* w,
                        const float* bias, const AttentionSaved& saved, TensorView y) override {
    impl_->attentionForward(d, x, w, bias, saved, y);
  }
  void attentionBackwardWeights(const AttentionDesc& d, ConstTensorView x, ConstTensorView dy,
                                const float* w, const AttentionSaved& saved, float* dw,
                                float* dbias) override {
    impl_->attentionBackwardWeights(d, x, dy, w, saved, dw, dbias);
  }
  void attentionCoreForward(const AttentionDesc& d, const AttentionSaved& saved) override {
    impl_->attentionCoreForward(d, saved);
  }
  bool runsAttentionCore() const override { return true; }
  bool runsTensorParallelLayers() const override { return true; }
  void attentionBackwardData(const AttentionDesc& d, ConstTensorView dqkv, const float* w,
                             TensorView dx, float beta) override {
    impl_->attentionBackwardData(d, dqkv, w, dx, beta);
  }
  void embeddingForward(const EmbeddingDesc& d, ConstTensorView ids, const float* table,
                        TensorView y) override {
    impl_->embeddingForward(d, ids, table, y);
  }
  void embeddingBackwardWeights(const EmbeddingDesc& d, ConstTensorView ids, ConstTensorView dy,
                                float* dtable) override {
    impl_->embeddingBackwardWeights(d, ids, dy, dtable);
  }
  bool runsVisionLayers() const override { return impl_->runsVisionLayers(); }
  void activationForward(Activation fn, ConstTensorView x, TensorView y) override {
    impl_->activationForward(fn, x, y);
  }
  void activationBackward(Activation fn, ConstTensorView x, ConstTensorView y, ConstTensorView dy,
                          TensorView dx, float beta) override {
    impl_->activationBackward(fn, x, y, dy, dx, beta);
  }
  // A concatenation's copies are kernel calls (copy), reported as such.
  void copyIntoChannels(ConstTensorView src, TensorView dst, int channelOffset) override {
    impl_->copyIntoChannels(src, dst, channelOffset);
  }
  void copyFromChannels(ConstTensorView src, int channelOffset, TensorView dst,
                        float beta) override {
    impl_->copyFromChannels(src, channelOffset, dst, beta);
  }
  void addIntoChannels(ConstTensorView src, TensorView dst, int channelOffset,
                       float beta) override {
    impl_->addIntoChannels(src, dst, channelOffset, beta);
  }
  void shuffleChannels(ConstTensorView x, int groups, TensorView y, float beta) override {
    impl_->shuffleChannels(x, groups, y, beta);
  }
  void scaleChannels(ConstTensorView x, const float* gamma, TensorView y, float beta) override {
    impl_->scaleChannels(x, gamma, y, beta);
  }
  void scaleBackwardWeights(ConstTensorView x, ConstTensorView dy, float* dgamma) override {
    impl_->scaleBackwardWeights(x, dy, dgamma);
  }
  void copyPositions(ConstTensorView src, int srcFirst, TensorView dst, int dstFirst, int count,
                     float beta) override {
    impl_->copyPositions(src, srcFirst, dst, dstFirst, count, beta);
  }
  void broadcastPositions(const float* table, int count, TensorView dst, int dstFirst) override {
    impl_->broadcastPositions(table, count, dst, dstFirst);
  }
  void addTable(ConstTensorView x, const float* table, TensorView y) override {
    impl_->addTable(x, table, y);
  }
  void sumPositions(ConstTensorView src, int srcFirst, int count, float* table) override {
    impl_->sumPositions(src, srcFirst, count, table);
  }
  void mulForward(ConstTensorView x, ConstTensorView g, TensorView y) override {
    impl_->mulForward(x, g, y);
  }
  void mulBackward(ConstTensorView x, ConstTensorView g, ConstTensorView dy, TensorView dx,
                   float betaX, TensorView dg, float betaG) override {
    impl_->mulBackward(x, g, dy, dx, betaX, dg, betaG);
  }
  void sgdMomentum(std::span<float> w, std::span<float> v, std::span<const float> g,
                   float learningRate, float momentum, float weightDecay) override {
    impl_->sgdMomentum(w, v, g, learningRate, momentum, weightDecay);
  }
  void adam(std::span<float> w, std::span<float> m, std::span<float> v, std::span<const float> g,
            const AdamParams& p) override {
    impl_->adam(w, m, v, g, p);
  }

  // ---- the kernels inside the layers above, for calibration ----------------
  // Each is the exact code the layer kernels run (model/kernels.h names them)
  // on the selected path (selectedCpuIsa()), on one thread, exposed so that
  // `strata calibrate` can time it alone at any size.

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
  // Rotary positions (rotary): the table of cosines and sines for r turned
  // features over t positions with base `base`, and the turn (or, with
  // inverse, the turn back) of the first r features of `blocks` heads of
  // dh x t in place.
  static void rotaryTable(int r, int t, float base, std::vector<float>& table);
  static void rotaryKernel(float* x, int64_t blocks, int dh, int r, int t, const float* table,
                           bool inverse);
  // Backend::adam's kernel (adam), the one training runs.
  static void adamKernel(std::span<float> w, std::span<float> m, std::span<float> v,
                         std::span<const float> g, const AdamParams& p);

 private:
  CpuIsa isa_;
  std::unique_ptr<ThreadTeam> team_;
  std::unique_ptr<Backend> impl_;             // the selected path's kernels, on team_
  std::unique_ptr<ReservedMemory> reserved_;  // memory() when built record-only
  Memory* memory_ = nullptr;                  // CpuOptions::memory
};

}  // namespace strata::nn
