// A worker's compute threads: the worker's own thread plus size() - 1
// helpers that spin briefly, then sleep, between calls. CpuBackend splits a layer's examples, or a
// GEMM's rows or columns, over them (--threads-per-worker). Each call hands
// task i to member i % size() (member 0 is the caller), so the same call
// always splits the same way: results are deterministic for a given size.
// Compiled once, without ISA flags; the kernels of every ISA call it.
#pragma once

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <mutex>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

namespace strata::nn {

class ThreadTeam {
 public:
  explicit ThreadTeam(int threads);
  ~ThreadTeam();
  ThreadTeam(const ThreadTeam&) = delete;
  ThreadTeam& operator=(const ThreadTeam&) = delete;

  int size() const { return size_; }
  // Runs fn(context, i) for every i in [0, tasks) and returns when all have
  // finished; an exception thrown by a task is rethrown here (the first one).
  void run(int tasks, void (*fn)(void*, int), void* context);
  // The same for a callable taking the task index.
  template <class F>
  void forEach(int tasks, F&& f) {
    using Fn = std::remove_reference_t<F>;
    run(
        tasks, [](void* c, int i) { (*static_cast<Fn*>(c))(i); }, &f);
  }

 private:
  void helperLoop(int member);
  void runMember(int member);

  int size_;
  std::vector<std::thread> helpers_;
  std::mutex mutex_;
  std::condition_variable start_;
  std::condition_variable done_;
  std::atomic<uint64_t> generation_{0};  // bumped by each run
  std::atomic<int> pending_{0};          // helpers still working on this generation
  std::atomic<bool> stop_{false};
  // The call being run: written by run() before it bumps generation_.
  int tasks_ = 0;
  void (*fn_)(void*, int) = nullptr;
  void* context_ = nullptr;
  std::exception_ptr error_;
};

// [begin, end) of part `part` of `count` items cut into `parts` contiguous
// parts (the remainder spread over the first ones).
inline std::pair<int64_t, int64_t> partOf(int64_t count, int parts, int part) {
  const int64_t base = count / parts, extra = count % parts;
  const int64_t begin = part * base + std::min<int64_t>(part, extra);
  return {begin, begin + base + (part < extra ? 1 : 0)};
}

}  // namespace strata::nn
