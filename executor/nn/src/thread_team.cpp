#include "thread_team.h"

#include <chrono>

#include "strata/model/error.h"

namespace strata::nn {

namespace {
// How long a helper (or the caller, waiting for the helpers) spins on the
// team's counters before it sleeps on a condition variable. A wake-up from
// sleep costs 2-30 us on the development VM (`strata calibrate`'s
// lane_handoff, alone and beside GEMMs), as much as a small kernel: the
// calls of one layer phase follow each other within microseconds, so a
// helper that spins this long takes the next call without sleeping, and one
// left idle (communication, the step's end) sleeps after 50 us.
constexpr auto kSpin = std::chrono::microseconds(50);

// Spins until done() or kSpin has passed; whether done() became true.
template <class Done>
bool spinUntil(Done&& done) {
  const auto until = std::chrono::steady_clock::now() + kSpin;
  for (int i = 0;; ++i) {
    if (done())
      return true;
    if ((i & 63) == 63 && std::chrono::steady_clock::now() >= until)
      return false;
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
  }
}
}  // namespace

ThreadTeam::ThreadTeam(int threads) : size_(threads) {
  STRATA_ENFORCE_OP(threads, >=, 1);
  helpers_.reserve(static_cast<size_t>(threads - 1));
  for (int m = 1; m < threads; ++m)
    helpers_.emplace_back([this, m] { helperLoop(m); });
}

ThreadTeam::~ThreadTeam() {
  {
    std::lock_guard lock(mutex_);
    stop_.store(true);
  }
  start_.notify_all();
  for (auto& t : helpers_)
    t.join();
}

void ThreadTeam::runMember(int member) {
  try {
    for (int i = member; i < tasks_; i += size_)
      fn_(context_, i);
  } catch (...) {
    std::lock_guard lock(mutex_);
    if (!error_)
      error_ = std::current_exception();
  }
}

void ThreadTeam::helperLoop(int member) {
  uint64_t seen = 0;
  for (;;) {
    auto moved = [&] { return stop_.load() || generation_.load() != seen; };
    if (!spinUntil(moved)) {
      std::unique_lock lock(mutex_);
      start_.wait(lock, moved);
    }
    if (stop_.load())
      return;
    seen = generation_.load();
    runMember(member);
    if (pending_.fetch_sub(1) == 1) {
      std::lock_guard lock(mutex_);
      done_.notify_one();
    }
  }
}

void ThreadTeam::run(int tasks, void (*fn)(void*, int), void* context) {
  if (size_ == 1 || tasks <= 1) {
    for (int i = 0; i < tasks; ++i)
      fn(context, i);
    return;
  }
  // The call's fields are written before the generation moves (sequentially
  // consistent atomics): a helper that sees the new generation sees them.
  tasks_ = tasks;
  fn_ = fn;
  context_ = context;
  error_ = nullptr;
  pending_.store(size_ - 1);
  {
    std::lock_guard lock(mutex_);  // a helper deciding to sleep sees it, or is woken
    generation_.fetch_add(1);
  }
  start_.notify_all();
  runMember(0);
  auto finished = [&] { return pending_.load() == 0; };
  if (!spinUntil(finished)) {
    std::unique_lock lock(mutex_);
    done_.wait(lock, finished);
  }
  std::exception_ptr error;
  {
    std::lock_guard lock(mutex_);
    error = error_;
    error_ = nullptr;
  }
  if (error)
    std::rethrow_exception(error);
}

}  // namespace strata::nn
