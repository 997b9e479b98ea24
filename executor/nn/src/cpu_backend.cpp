// CpuBackend: picks the kernels of the best instruction set the running CPU
// supports (cpu_isa.h) and gives them the worker's threads. Compiled without
// ISA flags: this file must run on every x86-64 CPU.
#include "strata/exec/nn/cpu_backend.h"

#include <fmt/format.h>

#include <cstdlib>

#include "cpu_isa.h"
#include "strata/model/error.h"
#include "thread_team.h"

namespace strata::nn {

namespace {

// Whether this CPU (and its OS, which must save the wider registers) runs a
// path. GCC's and Clang's __builtin_cpu_supports read CPUID and XGETBV.
bool cpuRuns(CpuIsa isa) {
  switch (isa) {
    case CpuIsa::kBaseline:
      return true;
    case CpuIsa::kAvx2:
#if STRATA_CPU_HAVE_AVX2
      return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
#else
      return false;
#endif
    case CpuIsa::kAvx512:
#if STRATA_CPU_HAVE_AVX512
      return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
             __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
             __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl");
#else
      return false;
#endif
  }
  return false;
}

const CpuIsaTable& tableOf(CpuIsa isa) {
  switch (isa) {
#if STRATA_CPU_HAVE_AVX512
    case CpuIsa::kAvx512:
      return cpu_avx512::table();
#endif
#if STRATA_CPU_HAVE_AVX2
    case CpuIsa::kAvx2:
      return cpu_avx2::table();
#endif
    default:
      return cpu_baseline::table();
  }
}

constexpr CpuIsa kAllIsas[] = {CpuIsa::kAvx512, CpuIsa::kAvx2, CpuIsa::kBaseline};

const CpuIsaTable& selectedTable() {
  return tableOf(selectedCpuIsa());
}

}  // namespace

std::string_view cpuIsaName(CpuIsa isa) {
  switch (isa) {
    case CpuIsa::kBaseline:
      return "baseline";
    case CpuIsa::kAvx2:
      return "avx2";
    case CpuIsa::kAvx512:
      return "avx512";
  }
  return "?";
}

std::string cpuIsaDescription(CpuIsa isa) {
  switch (isa) {
    case CpuIsa::kBaseline:
      return "baseline (x86-64 SSE2)";
    case CpuIsa::kAvx2:
      return "avx2 (AVX2, FMA)";
    case CpuIsa::kAvx512:
      return "avx512 (AVX-512 F/BW/DQ/VL, FMA)";
  }
  return "?";
}

std::vector<CpuIsa> runnableCpuIsas() {
  std::vector<CpuIsa> isas;
  for (CpuIsa isa : kAllIsas)
    if (cpuRuns(isa))
      isas.push_back(isa);
  return isas;
}

namespace {
CpuIsa selectIsa() {
  const char* forced = std::getenv("STRATA_CPU_ISA");
  if (forced == nullptr || *forced == '\0')
    return runnableCpuIsas().front();
  const std::string_view name = forced;
  std::string runnable;
  for (CpuIsa i : runnableCpuIsas())
    runnable += (runnable.empty() ? "" : ", ") + std::string(cpuIsaName(i));
  for (CpuIsa isa : kAllIsas) {
    if (name != cpuIsaName(isa))
      continue;
    if (!cpuRuns(isa))
      throw UserError(
          fmt::format("STRATA_CPU_ISA={}: this CPU cannot run that path or this build "
                      "has none (paths here: {}); unset it to take the best one",
                      name, runnable));
    return isa;
  }
  throw UserError(
      fmt::format("STRATA_CPU_ISA={}: not a CPU path (paths here: {}); unset it to "
                  "take the best one",
                  name, runnable));
}
}  // namespace

CpuIsa selectedCpuIsa() {
  // Once per process: the static kernels below run at calibration's smallest
  // sizes, where a lookup per call would show in the timings.
  static const CpuIsa isa = selectIsa();
  return isa;
}

CpuBackend::CpuBackend(CpuOptions options)
    : isa_(selectedCpuIsa()),
      team_(std::make_unique<ThreadTeam>(options.threads)),
      impl_(tableOf(isa_).make(*team_)),
      memory_(options.memory) {
  if (options.recorder != nullptr) {
    setRecorder(options.recorder);
    if (options.recorder->recordOnly())
      reserved_ = std::make_unique<ReservedMemory>();
  }
}

CpuBackend::~CpuBackend() = default;

int CpuBackend::threads() const {
  return team_->size();
}

void CpuBackend::gemm(GemmOp op, int m, int n, int k, const float* a, const float* b, float* c,
                      bool accumulate) {
  selectedTable().gemm(op, m, n, k, a, b, c, accumulate);
}
void CpuBackend::im2colKernel(const ConvDesc& d, const float* x, float* col) {
  selectedTable().im2col(d, x, col);
}
void CpuBackend::col2imKernel(const ConvDesc& d, const float* col, float* x) {
  selectedTable().col2im(d, col, x);
}
void CpuBackend::biasAdd(float* y, const float* bias, int channels, int64_t positions) {
  selectedTable().biasAdd(y, bias, channels, positions);
}
void CpuBackend::biasGrad(const float* dy, float* dbias, int channels, int64_t positions) {
  selectedTable().biasGrad(dy, dbias, channels, positions);
}
void CpuBackend::zero(float* x, int64_t count) {
  selectedTable().zero(x, count);
}
void CpuBackend::attnSoftmaxForward(const float* s, float* p, int64_t rows, int t, bool causal,
                                    float scale) {
  selectedTable().attnSoftmaxForward(s, p, rows, t, causal, scale);
}
void CpuBackend::attnSoftmaxBackward(const float* p, const float* dp, float* ds, int64_t rows,
                                     int t, float scale) {
  selectedTable().attnSoftmaxBackward(p, dp, ds, rows, t, scale);
}
void CpuBackend::rotaryTable(int r, int t, float base, std::vector<float>& table) {
  selectedTable().rotaryTable(r, t, base, table);
}
void CpuBackend::rotaryKernel(float* x, int64_t blocks, int dh, int r, int t, const float* table,
                              bool inverse) {
  selectedTable().rotary(x, blocks, dh, r, t, table, inverse);
}
void CpuBackend::adamKernel(std::span<float> w, std::span<float> m, std::span<float> v,
                            std::span<const float> g, const AdamParams& p) {
  selectedTable().adam(w, m, v, g, p);
}

}  // namespace strata::nn
