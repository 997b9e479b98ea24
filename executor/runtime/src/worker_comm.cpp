// A rank's transfer and reduce tasks: its sends and receives of one step of
// a collective, and the sums of what it received.
#include <algorithm>
#include <cmath>

#include "strata/model/error.h"
#include "worker.h"

namespace strata::exec::detail {

Endpoint& Worker::endpoint(int c) {
  auto it = endpoints_.find(c);
  if (it != endpoints_.end())
    return *it->second;
  auto e = makeEndpoint(plan_.collectives[static_cast<size_t>(c)]);
  return *endpoints_.emplace(c, std::move(e)).first->second;
}

std::span<float> Worker::stage(int collective, int slot, size_t n) {
  auto& buffer = stage_.try_emplace({collective, slot}, backend_->memory()).first->second;
  buffer.resizeUninitialized(n);
  return buffer.span();
}

int Worker::indexOf(const Collective& c) const {
  const auto i = &c - plan_.collectives.data();
  STRATA_ENFORCE(i >= 0 && i < static_cast<std::ptrdiff_t>(plan_.collectives.size()));
  return static_cast<int>(i);
}

void Worker::transfer(size_t t, const Task& task, Measured& m) {
  auto& e = endpoint(task.collective);
  const bool summed = task.summed;  // the Plan says which transfers a reduce sums
  std::vector<int> sendPart(static_cast<size_t>(world_), -1),
      recvPart(static_cast<size_t>(world_), -1);
  for (const auto& f : plan_.flowsOf(task)) {
    if (f.src == w_)
      sendPart[static_cast<size_t>(f.dst)] = f.part;
    if (f.dst == w_)
      recvPart[static_cast<size_t>(f.src)] = f.part;
  }
  const int tag = tagOf(t);
  const int seg = std::max(task.segment, 0);
  e.setParts(partsCovered(task));
  // Scratch stays allocated from transfer to transfer (grow-only, per
  // source): a fresh buffer per segment cost an allocation and a zero-fill,
  // and on a GPU (then managed memory) a cudaMallocManaged and a device-wide
  // cudaFree, ~0.7 ms per 4 MB segment on an H100, more than the copy.
  summedFrom_.clear();
  scratchPart_.clear();
  for (int i = 1; i < world_; ++i) {
    const int dst = (w_ + i) % world_, src = (w_ - i + world_) % world_;
    const int sp = sendPart[static_cast<size_t>(dst)], rp = recvPart[static_cast<size_t>(src)];
    std::span<const float> out;
    std::span<float> in;
    if (sp >= 0)
      out = e.send(sp, seg, dst);
    if (rp >= 0) {
      if (summed) {
        // In the backend's memory, so a GPU's reduce-add kernel reads it.
        auto& buf = scratch_.try_emplace(src, backend_->memory()).first->second;
        buf.resizeUninitialized(e.size(rp, seg, src));
        in = buf.span();
        summedFrom_.push_back(src);
      } else {
        in = e.land(rp, seg, src);
      }
    }
    if (sp >= 0 && rp >= 0) {
      comm_.sendRecv(dst, tag, out, src, tag, in);
    } else if (sp >= 0) {
      comm_.send(dst, tag, out);
    } else if (rp >= 0) {
      comm_.recv(src, tag, in);
    }
    m.sent += double(out.size()) * sizeof(float);
    m.received += double(in.size()) * sizeof(float);
    if (rp >= 0)
      scratchPart_[src] = rp;
  }
  std::sort(summedFrom_.begin(), summedFrom_.end());  // sums in rank order
}

int Worker::partsCovered(const Task& task) const {
  const auto& c = plan_.collectives[static_cast<size_t>(task.collective)];
  if (c.allreduce != AllreduceAlgorithm::kHalvingDoubling || c.parts <= 1)
    return 1;
  return static_cast<int>(std::lround(task.bytes.value() / (c.bytes.value() / c.parts)));
}

void Worker::reduce(size_t, const Task& task) {
  auto& e = endpoint(task.collective);
  const int seg = std::max(task.segment, 0);
  e.setParts(partsCovered(task));
  // A dedicated server's gradients are the sum of the workers' chunks
  // alone: it starts from zero (its buffer holds the step before's sum).
  if (server() && !summedFrom_.empty()) {
    const int src = summedFrom_.front();
    const auto dst = e.land(scratchPart_[src], seg, src);
    // Zeroed in the backend's memory, and done before the communicator's
    // sums (on their own stream on a GPU) read it.
    backend_->memory().zero(dst.data(), dst.size_bytes());
    backend_->synchronize();
  }
  // Sources in a fixed order (by rank) so every run sums alike.
  for (int src : summedFrom_)
    e.reduce(scratchPart_[src], seg, src, scratch_.at(src).span());
}

void Worker::endCollective(int c) {
  auto it = endpoints_.find(c);
  if (it != endpoints_.end())
    it->second->finish();
}

}  // namespace strata::exec::detail
