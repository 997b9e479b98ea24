#include "thread_team.h"

#include "strata/model/error.h"

namespace strata::nn {

ThreadTeam::ThreadTeam(int threads) : size_(threads) {
  STRATA_ENFORCE_OP(threads, >=, 1);
  helpers_.reserve(static_cast<size_t>(threads - 1));
  for (int m = 1; m < threads; ++m)
    helpers_.emplace_back([this, m] { helperLoop(m); });
}

ThreadTeam::~ThreadTeam() {
  {
    std::lock_guard lock(mutex_);
    stop_ = true;
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
    {
      std::unique_lock lock(mutex_);
      start_.wait(lock, [&] { return stop_ || generation_ != seen; });
      if (stop_)
        return;
      seen = generation_;
    }
    runMember(member);
    std::lock_guard lock(mutex_);
    if (--pending_ == 0)
      done_.notify_one();
  }
}

void ThreadTeam::run(int tasks, void (*fn)(void*, int), void* context) {
  if (size_ == 1 || tasks <= 1) {
    for (int i = 0; i < tasks; ++i)
      fn(context, i);
    return;
  }
  {
    std::lock_guard lock(mutex_);
    tasks_ = tasks;
    fn_ = fn;
    context_ = context;
    error_ = nullptr;
    pending_ = size_ - 1;
    ++generation_;
  }
  start_.notify_all();
  runMember(0);
  std::exception_ptr error;
  {
    std::unique_lock lock(mutex_);
    done_.wait(lock, [&] { return pending_ == 0; });
    error = error_;
    error_ = nullptr;
  }
  if (error)
    std::rethrow_exception(error);
}

}  // namespace strata::nn
