#include "strata/exec/nn/kernel_recorder.h"

#include <fmt/format.h>
#include <sys/mman.h>

#include <algorithm>
#include <new>
#include <tuple>

namespace strata::nn {

void KernelRecorder::record(const KernelCall& call) {
  std::lock_guard lock(mutex_);
  calls_.push_back(call);
}

std::vector<KernelCall> KernelRecorder::calls() const {
  std::lock_guard lock(mutex_);
  return mergeCalls(calls_);
}

void KernelRecorder::clear() {
  std::lock_guard lock(mutex_);
  calls_.clear();
}

KernelCall gemmCall(GemmOp op, int64_t m, int64_t n, int64_t k, double count, bool accumulate) {
  KernelCall c;
  c.gemm = true;
  c.op = op;
  c.m = m;
  c.n = n;
  c.k = k;
  c.count = count;
  c.accumulate = accumulate;
  return c;
}

KernelCall convCall(ConvPass pass, int64_t m, int64_t n, int64_t k, int groups) {
  KernelCall c;
  c.conv = true;
  c.pass = pass;
  c.m = m;
  c.n = n;
  c.k = k;
  c.count = groups;
  return c;
}

KernelCall memoryCall(MemKernel kernel, double units, double window) {
  KernelCall c;
  c.kernel = kernel;
  c.units = units;
  c.window = window;
  return c;
}

KernelCall columnsCall(MemKernel kernel, double units, int rowWidth, int stride) {
  KernelCall c = memoryCall(kernel, units);
  c.rowWidth = rowWidth;
  c.stride = stride;
  return c;
}

namespace {
// What makes two calls the same call (all but the count); fields that do not
// apply to a kind are left at their defaults by the makers above and by the
// lowering, and are zeroed here in case they were not.
auto keyOf(const KernelCall& c) {
  const bool memory = !c.gemm && !c.conv;
  return std::make_tuple(c.conv, c.gemm, c.gemm ? static_cast<int>(c.op) : 0,
                         c.gemm && c.accumulate, c.conv ? static_cast<int>(c.pass) : 0,
                         memory ? 0 : c.m, memory ? 0 : c.n, memory ? 0 : c.k,
                         memory ? static_cast<int>(c.kernel) : 0, memory ? c.units : 0.0,
                         memory ? c.window : 0.0, memory ? c.rowWidth : 0, memory ? c.stride : 0);
}
}  // namespace

std::vector<KernelCall> mergeCalls(std::vector<KernelCall> calls) {
  std::erase_if(calls, [](const KernelCall& c) {
    return c.count <= 0 || (!c.gemm && !c.conv && c.units <= 0);
  });
  std::stable_sort(calls.begin(), calls.end(),
                   [](const KernelCall& a, const KernelCall& b) { return keyOf(a) < keyOf(b); });
  std::vector<KernelCall> merged;
  for (const KernelCall& c : calls) {
    if (!merged.empty() && keyOf(merged.back()) == keyOf(c))
      merged.back().count += c.count;
    else
      merged.push_back(c);
  }
  return merged;
}

std::string describe(const KernelCall& c) {
  if (c.conv)
    return fmt::format("conv {} {}x{}x{} x{}", toString(c.pass), c.m, c.n, c.k, c.count);
  if (c.gemm)
    return fmt::format("gemm {} {}x{}x{}{} x{}", toString(c.op), c.m, c.n, c.k,
                       c.accumulate ? " +=" : "", c.count);
  if (c.window > 0)
    return fmt::format("{} {} window {} x{}", toString(c.kernel), c.units, c.window, c.count);
  if (c.rowWidth > 0)
    return fmt::format("{} {} rows {} stride {} x{}", toString(c.kernel), c.units, c.rowWidth,
                       c.stride, c.count);
  return fmt::format("{} {} x{}", toString(c.kernel), c.units, c.count);
}

std::string describe(const std::vector<KernelCall>& calls) {
  std::string s;
  for (const KernelCall& c : calls)
    s += (s.empty() ? "" : "; ") + describe(c);
  return s.empty() ? "(no calls)" : s;
}

void* ReservedMemory::allocate(size_t bytes) {
  void* p = mmap(nullptr, std::max<size_t>(bytes, 1), PROT_READ | PROT_WRITE,
                 MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (p == MAP_FAILED)
    throw std::bad_alloc();
  return p;
}

void ReservedMemory::deallocate(void* p, size_t bytes) noexcept {
  static_cast<void>(munmap(p, std::max<size_t>(bytes, 1)));
}

}  // namespace strata::nn
