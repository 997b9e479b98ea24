// The endpoints: where a collective's data is on one rank, by its buffer kind.
//
// Weight gradients are the Model's gradient span of the bucket's layers,
// split into `parts` chunks and `segments` segments (integer splits, the
// remainder spread over the first pieces); owt activations and activation
// gradients move rows (examples) or channel slices of the Model's tensors,
// staged contiguously. A transfer followed by a reduce receives into scratch
// that the reduce adds (or, for softmax statistics, merges) into place.
#include "endpoints.h"

#include <algorithm>
#include <functional>
#include <memory>
#include <mutex>
#include <vector>

#include "strata/model/error.h"
#include "worker.h"

namespace strata::exec::detail {

namespace {

// A flat buffer on every rank (weight gradients, softmax statistics): parts
// are chunks of it, segments pieces of a chunk. `group` keeps (max, sum) pairs
// of softmax statistics whole.
class FlatEndpoint final : public Endpoint {
 public:
  // `backend`: the buffer's; softmax statistics go to the host through its
  // memory to be merged.
  FlatEndpoint(BufferOps& ops, nn::Backend& backend, std::span<float> buffer, int parts,
               int segments, int group, bool mergeStats)
      : ops_(ops),
        backend_(backend),
        buffer_(buffer),
        parts_(parts),
        segments_(segments),
        group_(group),
        merge_(mergeStats) {}

  void setParts(int count) override { count_ = std::max(1, count); }
  std::span<const float> send(int part, int segment, int) override { return at(part, segment); }
  std::span<float> land(int part, int segment, int) override { return at(part, segment); }
  size_t size(int part, int segment, int) override { return at(part, segment).size(); }
  void reduce(int part, int segment, int, std::span<const float> data) override {
    auto dst = at(part, segment);
    if (merge_) {
      // On the host, in copies: the statistics are a few floats per
      // position, and may be device memory.
      nn::Memory& memory = backend_.memory();
      std::vector<float> into(dst.size()), other(data.size());
      nn::download(memory, std::span<float>(into), dst.data());
      nn::download(memory, std::span<float>(other), data.data());
      nn::mergeSoftmaxStats(into, other);
      nn::upload(memory, dst.data(), std::span<const float>(into));
      // In place before it returns: the collective's next send reads it
      // through the communicator (on its own stream on a GPU).
      backend_.synchronize();
      return;
    }
    ops_.add(dst, data);
  }

 private:
  std::span<float> at(int part, int segment) {
    const int64_t groups = static_cast<int64_t>(buffer_.size()) / group_;
    const int p = parts_ > 1 ? part : 0;
    auto chunk = piece(groups, parts_, p);
    if (count_ > 1)
      chunk.second = piece(groups, parts_, std::min(p + count_, parts_) - 1).second;
    const auto seg = piece(chunk.second - chunk.first, segments_, segment);
    return buffer_.subspan(static_cast<size_t>((chunk.first + seg.first) * group_),
                           static_cast<size_t>((seg.second - seg.first) * group_));
  }
  BufferOps& ops_;
  nn::Backend& backend_;
  std::span<float> buffer_;
  int parts_, segments_, group_;
  bool merge_;
  int count_ = 1;
};

// Sequence parallelism's all-gather or reduce-scatter over a tensor-parallel
// group of t: a tensor of every position ([n, c, T], NCHW) and this
// worker's T / t of them ([n, c, T / t]), staged chunk-major (chunk v:
// positions [v T / t, (v + 1) T / t) of every example and channel, laid out
// as a worker's tensor), so that the ring's part v is group position v's
// chunk. A gather stages this worker's positions now and places every
// chunk into the whole tensor at finish(); a scatter stages the whole
// partial tensor now, the ring sums part v on position v, and finish()
// copies this worker's chunk out.
class PositionChunks final : public Endpoint {
 public:
  enum class Mode { kGather, kScatter };
  // `local`: this worker's positions; `whole`: every position (the same n
  // and c); `staging`: t chunks of local's size; `position`: this worker's
  // in the group.
  PositionChunks(Mode mode, BufferOps& ops, nn::Backend& backend, nn::TensorView local,
                 nn::TensorView whole, std::span<float> staging, int t, int position, int parts,
                 int segments)
      : mode_(mode),
        ops_(ops),
        local_(local),
        whole_(whole),
        staging_(staging),
        t_(t),
        position_(position),
        flat_(ops, backend, staging, parts, segments, 1, false) {
    const int64_t chunk = local.elements();
    STRATA_ENFORCE(local.dims.n == whole.dims.n && local.dims.c == whole.dims.c);
    STRATA_ENFORCE_OP(whole.elements(), ==, chunk * t);
    STRATA_ENFORCE_OP(static_cast<int64_t>(staging.size()), ==, chunk * t);
    STRATA_ENFORCE_OP(parts, ==, t);
    if (mode == Mode::kGather) {
      ops.copy(at(position).data(), local.data, at(position).size_bytes());
      return;
    }
    for (int v = 0; v < t; ++v)
      moveChunk(v, false);
  }
  std::span<const float> send(int part, int segment, int dst) override {
    return flat_.send(part, segment, dst);
  }
  std::span<float> land(int part, int segment, int src) override {
    return flat_.land(part, segment, src);
  }
  size_t size(int part, int segment, int src) override { return flat_.size(part, segment, src); }
  void reduce(int part, int segment, int src, std::span<const float> data) override {
    STRATA_ENFORCE(mode_ == Mode::kScatter);
    flat_.reduce(part, segment, src, data);
  }
  void finish() override {
    if (mode_ == Mode::kScatter) {
      ops_.copy(local_.data, at(position_).data(), at(position_).size_bytes());
      return;
    }
    for (int v = 0; v < t_; ++v)
      moveChunk(v, true);
  }

 private:
  std::span<float> at(int v) {
    const int64_t chunk = local_.elements();
    return staging_.subspan(static_cast<size_t>(v * chunk), static_cast<size_t>(chunk));
  }
  // Chunk v between the staging and the whole tensor: rows of T / t
  // positions, one per example and channel.
  void moveChunk(int v, bool intoWhole) {
    const size_t width = static_cast<size_t>(local_.dims.h) * local_.dims.w * sizeof(float);
    const size_t pitch = width * static_cast<size_t>(t_);
    const size_t rows = static_cast<size_t>(local_.dims.n) * local_.dims.c;
    float* chunk = at(v).data();
    float* whole = whole_.data + static_cast<int64_t>(v) * local_.dims.h * local_.dims.w;
    if (intoWhole)
      ops_.copyRows(whole, pitch, chunk, width, width, rows);
    else
      ops_.copyRows(chunk, width, whole, pitch, width, rows);
  }

  Mode mode_;
  BufferOps& ops_;
  nn::TensorView local_, whole_;
  std::span<float> staging_;
  int t_, position_;
  FlatEndpoint flat_;
};

// A ps pull with staleness: this rank sends its server's updated chunk and
// lands the others' in a staging copy of the key's weights (a slot per step
// of delay), which the compute lane copies into the model before the forward
// that may use them.
class PullEndpoint final : public Endpoint {
 public:
  PullEndpoint(std::span<const float> shard, std::span<float> slot, int parts)
      : shard_(shard), slot_(slot), parts_(parts) {}
  std::span<const float> send(int, int, int) override { return shard_; }
  std::span<float> land(int part, int, int) override { return at(part); }
  size_t size(int part, int, int) override { return at(part).size(); }
  void reduce(int, int, int, std::span<const float>) override {
    throw InvariantError("a ps pull sums nothing");
  }

 private:
  std::span<float> at(int part) {
    const auto r = piece(static_cast<int64_t>(slot_.size()), parts_, part);
    return slot_.subspan(static_cast<size_t>(r.first), static_cast<size_t>(r.second - r.first));
  }
  std::span<const float> shard_;
  std::span<float> slot_;
  int parts_;
};

// Rows (examples) of a tensor: what a rank sends is rows of its own tensor
// chosen per destination; what it receives lands in rows chosen per source;
// sums go into an accumulator initialised with this rank's own share.
class RowsEndpoint final : public Endpoint {
 public:
  using RowsOf = std::function<std::pair<int64_t, int64_t>(int rank)>;
  // sendFrom: this rank's source tensor; sendRows(dst): rows sent to dst.
  // landIn: where received rows go (rows landRows(src)), or nullptr when
  // received data is summed into `acc` (rows accRows(src) of the sender's
  // tensor map onto the whole accumulator).
  RowsEndpoint(BufferOps& ops, std::span<float> sendFrom, int64_t rowSize, RowsOf sendRows,
               std::span<float> landIn, RowsOf landRows, int segments)
      : ops_(ops),
        from_(sendFrom),
        row_(rowSize),
        sendRows_(std::move(sendRows)),
        to_(landIn),
        landRows_(std::move(landRows)),
        segments_(segments) {}

  // Accumulator mode: the sum lands in `acc` (initialised by the caller).
  void accumulate(std::span<float> acc) { acc_ = acc; }

  std::span<const float> send(int, int segment, int dst) override {
    return seg(sub(from_, scale(sendRows_(dst))), segment);
  }
  std::span<float> land(int, int segment, int src) override {
    return seg(sub(to_, scale(landRows_(src))), segment);
  }
  size_t size(int, int segment, int src) override {
    // Rows from `src` have the size of the rows this rank would land or sum.
    const auto r = acc_.empty() ? landRows_(src) : std::pair<int64_t, int64_t>{0, accRows()};
    const int64_t n = (r.second - r.first) * row_;
    const auto s = piece(n, segments_, segment);
    return static_cast<size_t>(s.second - s.first);
  }
  void reduce(int, int segment, int, std::span<const float> data) override {
    ops_.add(seg(acc_, segment), data);
  }

 private:
  int64_t accRows() const { return static_cast<int64_t>(acc_.size()) / row_; }
  std::pair<int64_t, int64_t> scale(std::pair<int64_t, int64_t> rows) const {
    return {rows.first * row_, rows.second * row_};
  }
  std::span<float> seg(std::span<float> s, int segment) const {
    return sub(s, piece(static_cast<int64_t>(s.size()), segments_, segment));
  }
  BufferOps& ops_;
  std::span<float> from_;
  int64_t row_;
  RowsOf sendRows_;
  std::span<float> to_;
  RowsOf landRows_;
  int segments_;
  std::span<float> acc_;
};

}  // namespace

// Staged allgather of channel slices (inner FC exchange).
class Worker::SliceGather final : public Endpoint {
 public:
  SliceGather(Worker& w, int collective, int producer, int batch, int segments)
      : w_(w), producer_(producer), batch_(batch), segments_(segments) {
    for (int v = 0; v < w.k_; ++v) {
      const auto s =
          nn::evenSlice(w.net_.layers[static_cast<size_t>(producer)].outShape.c, w.k_, v);
      staged_.push_back(w.stage(collective, v, static_cast<size_t>(batch) * s.size() * area()));
    }
    // This rank's own slice, copied now: the compute lane moves on.
    const auto& out = w.model_.output(producer);
    auto own = staged_[static_cast<size_t>(w.w_)];
    w.comm_.ops().copy(own.data(), out.data(), own.size_bytes());
  }
  std::span<const float> send(int, int segment, int) override {
    return seg(staged_[static_cast<size_t>(w_.w_)], segment);
  }
  std::span<float> land(int, int segment, int src) override {
    return seg(staged_[static_cast<size_t>(src)], segment);
  }
  size_t size(int, int segment, int src) override {
    return seg(staged_[static_cast<size_t>(src)], segment).size();
  }
  void reduce(int, int, int, std::span<const float>) override {
    throw InvariantError("an allgather has no sum");
  }
  void finish() override {
    auto& in = w_.model_.exchangeInput(producer_ + 1, batch_);
    const auto& shape = w_.net_.layers[static_cast<size_t>(producer_)].outShape;
    STRATA_ENFORCE(in.dims().n == batch_ && in.dims().h == shape.h && in.dims().w == shape.w);
    const size_t plane = static_cast<size_t>(area()) * sizeof(float);
    for (int v = 0; v < w_.k_; ++v) {
      if (v == w_.w_)
        continue;  // own slice placed before the forward
      // Slice v's channels of every example: rows of s.size() planes.
      const auto s = nn::evenSlice(shape.c, w_.k_, v);
      w_.comm_.ops().copyRows(
          in.data() + int64_t{s.begin} * area(), static_cast<size_t>(in.dims().c) * plane,
          staged_[static_cast<size_t>(v)].data(), static_cast<size_t>(s.size()) * plane,
          static_cast<size_t>(s.size()) * plane, static_cast<size_t>(batch_));
    }
  }

 private:
  int64_t area() const {
    const auto& s = w_.net_.layers[static_cast<size_t>(producer_)].outShape;
    return int64_t{s.h} * s.w;
  }
  std::span<float> seg(std::span<float> s, int segment) const {
    return sub(s, piece(static_cast<int64_t>(s.size()), segments_, segment));
  }
  Worker& w_;
  int producer_, batch_, segments_;
  std::vector<std::span<float>> staged_;  // per rank: Worker::stage memory
};

// Reduce-scatter of partial input gradients by channel slice.
class Worker::SliceScatter final : public Endpoint {
 public:
  SliceScatter(Worker& w, int collective, int producer, int batch, int segments)
      : w_(w), producer_(producer), batch_(batch), segments_(segments) {
    const auto& shape = w.net_.layers[static_cast<size_t>(producer)].outShape;
    const auto& partial = w.model_.exchangeInputGrad(producer + 1);
    STRATA_ENFORCE(partial.dims().n == batch && partial.dims().c == shape.c &&
                   partial.dims().h == shape.h && partial.dims().w == shape.w);
    const size_t plane = static_cast<size_t>(shape.h) * shape.w * sizeof(float);
    for (int v = 0; v < w.k_; ++v) {
      // Slice v's channels of every example, packed.
      const auto s = nn::evenSlice(shape.c, w.k_, v);
      const auto st =
          w.stage(collective, v, static_cast<size_t>(batch) * s.size() * shape.h * shape.w);
      w.comm_.ops().copyRows(st.data(), static_cast<size_t>(s.size()) * plane,
                             partial.data() + int64_t{s.begin} * shape.h * shape.w,
                             static_cast<size_t>(shape.c) * plane,
                             static_cast<size_t>(s.size()) * plane, static_cast<size_t>(batch));
      staged_.push_back(st);
    }
  }
  std::span<const float> send(int, int segment, int dst) override {
    return seg(staged_[static_cast<size_t>(dst)], segment);
  }
  std::span<float> land(int, int, int) override {
    throw InvariantError("a reduce-scatter sums what it receives");
  }
  size_t size(int, int segment, int) override {
    return seg(staged_[static_cast<size_t>(w_.w_)], segment).size();
  }
  void reduce(int, int segment, int, std::span<const float> data) override {
    w_.comm_.ops().add(seg(staged_[static_cast<size_t>(w_.w_)], segment), data);
  }
  void finish() override {
    auto& g = w_.model_.outputGrad(producer_);
    const auto own = staged_[static_cast<size_t>(w_.w_)];
    STRATA_ENFORCE_OP(static_cast<int64_t>(own.size()), <=, g.elements());
    w_.comm_.ops().copy(g.data(), own.data(), own.size_bytes());
  }

 private:
  std::span<float> seg(std::span<float> s, int segment) const {
    return sub(s, piece(static_cast<int64_t>(s.size()), segments_, segment));
  }
  Worker& w_;
  int producer_, batch_, segments_;
  std::vector<std::span<float>> staged_;  // per rank: Worker::stage memory
};

// Boundary gradients back to the owners of the round's examples.
class Worker::BoundaryReturn final : public Endpoint {
 public:
  BoundaryReturn(Worker& w, int collective, int round, int segments)
      : w_(w), round_(round), segments_(segments) {
    row_ = w.net_.layers[static_cast<size_t>(w.mp_)].inShape.elements();
    // Copied: the compute lane may start the next round before all is sent.
    const auto& g = w.model_.exchangeInputGrad(w.mp_);
    partial_ = w.stage(collective, -1, static_cast<size_t>(g.elements()));
    w.comm_.ops().copy(partial_.data(), g.data(), partial_.size_bytes());
    const auto own = w.ownRows(round, w.w_);
    const int64_t at = w.roundOffset(round, w.w_);
    const int64_t n = std::max<int64_t>(0, (own.second - own.first) * row_);
    acc_ = w.stage(collective, -2, static_cast<size_t>(n));
    if (n > 0)
      w.comm_.ops().copy(acc_.data(), partial_.data() + at * row_, acc_.size_bytes());
  }
  std::span<const float> send(int, int segment, int dst) override {
    const auto rows = w_.ownRows(round_, dst);
    const int64_t at = w_.roundOffset(round_, dst);
    return seg(sub(partial_, {at * row_, (at + rows.second - rows.first) * row_}), segment);
  }
  std::span<float> land(int, int, int) override {
    throw InvariantError("gradients coming back are summed");
  }
  size_t size(int, int segment, int) override { return seg(acc_, segment).size(); }
  void reduce(int, int segment, int, std::span<const float> data) override {
    w_.comm_.ops().add(seg(acc_, segment), data);
  }
  void finish() override {
    if (acc_.empty())
      return;
    const auto own = w_.ownRows(round_, w_.w_);
    auto& g = w_.model_.outputGrad(w_.mp_ - 1);
    STRATA_ENFORCE_OP(own.first * row_ + static_cast<int64_t>(acc_.size()), <=, g.elements());
    w_.comm_.ops().copy(g.data() + own.first * row_, acc_.data(), acc_.size_bytes());
  }

 private:
  std::span<float> seg(std::span<float> s, int segment) const {
    return sub(s, piece(static_cast<int64_t>(s.size()), segments_, segment));
  }
  Worker& w_;
  int round_, segments_;
  int64_t row_ = 0;
  std::span<float> partial_;  // Worker::stage memory
  std::span<float> acc_;
};

std::unique_ptr<Endpoint> Worker::makeEndpoint(const Collective& c) {
  const int segs = c.segments;
  if (c.algorithm == "p2p")
    return pipelineEndpoint(c);
  switch (c.buffer) {
    case BufferKind::kWeightGradients: {
      // No wait for the whole backend: the communication lane waited for
      // the tasks that produced these gradients (lane()).
      return std::make_unique<FlatEndpoint>(
          comm_.ops(), *backend_, gradsOf(c.firstLayer, c.lastLayer), c.parts, segs, 1, false);
    }
    case BufferKind::kWeights: {
      if (stale_ > 0) {
        auto& key = keys_.at(c.firstLayer);
        const int it = plan_.tasks[c.firstTask].iteration;
        return std::make_unique<PullEndpoint>(key.weights, key.slot(it), c.parts);
      }
      // Synchronous: the servers' updated chunks land in place. The
      // compute lane reads these weights again only in the next step's
      // forward, which waits for the pull (PullWait).
      return std::make_unique<FlatEndpoint>(
          comm_.ops(), *backend_, paramsOf(c.firstLayer, c.lastLayer), c.parts, segs, 1, false);
    }
    case BufferKind::kLossStatistics:
      // After the forward that wrote them: their sends read them on the
      // communicator's own stream.
      backend_->synchronize();
      return std::make_unique<FlatEndpoint>(comm_.ops(), *backend_, model_.softmaxStatsNoWait(),
                                            c.parts, segs, 2, true);
    case BufferKind::kActivations:
      return activationsEndpoint(c);
    case BufferKind::kActivationGradients:
      return gradientsEndpoint(c);
  }
  throw InvariantError("unknown buffer kind");
}

std::unique_ptr<Endpoint> Worker::pipelineEndpoint(const Collective& c) {
  // A tied table's two copies: each stage sends its token table's gradient
  // and adds the other's (the reduce task).
  if (c.buffer == BufferKind::kWeightGradients)
    return std::make_unique<FlatEndpoint>(comm_.ops(), *backend_,
                                          gradsOf(c.firstLayer, c.lastLayer, true), c.parts,
                                          c.segments, 1, false);
  // A boundary tensor of micro-batch m (the output of the chunk's last
  // layer, or its gradient on the way back): read from, or landed in, m's
  // slot, whichever micro-batch the compute lane is on meanwhile.
  const int micro = plan_.tasks[c.firstTask].micro;
  STRATA_ENFORCE(micro >= 0 && micro < microbatches_);
  nn::Tensor& t = c.buffer == BufferKind::kActivations
                      ? model_.slotOutput(c.firstLayer, micro, b_)
                      : model_.slotOutputGrad(c.firstLayer, micro, b_);
  return std::make_unique<FlatEndpoint>(comm_.ops(), *backend_, t.span(), c.parts, c.segments, 1,
                                        false);
}

std::unique_ptr<Endpoint> Worker::tensorParallelEndpoint(const Collective& c) {
  const int l = c.firstLayer;
  const Layer& layer = net_.layers[static_cast<size_t>(l)];
  const bool gather = c.algorithm == "allgather", scatter = c.algorithm == "reduce-scatter";
  if (gather || scatter) {
    // Sequence parallelism (Model, "sequence parallelism"): forward, the
    // input of a layer that gathers it, or the output of one that scatters
    // it; backward, the output gradient of a layer that scatters its
    // output, or the input gradient of one that gathers its input.
    const bool forward = c.buffer == BufferKind::kActivations;
    const int producer = layer.inputs[0];
    nn::TensorView local, whole;
    if (forward && gather) {
      STRATA_ENFORCE(model_.gathersInput(l));
      local = const_cast<nn::Tensor&>(model_.output(producer)).view();
      whole = model_.gatheredInput(l, local.dims.n).view();
    } else if (forward) {
      STRATA_ENFORCE(model_.scattersOutput(l));
      whole = const_cast<nn::Tensor&>(model_.fullOutput(l)).view();
      local = const_cast<nn::Tensor&>(model_.output(l)).view();
    } else if (gather) {
      STRATA_ENFORCE(model_.scattersOutput(l));
      local = model_.outputGrad(l).view();
      whole = model_.fullOutputGrad(l, local.dims.n).view();
    } else {
      STRATA_ENFORCE(model_.gathersInput(l));
      whole = const_cast<nn::Tensor&>(model_.gatheredInputGrad(l)).view();
      local = model_.outputGrad(producer).view();
    }
    const auto staging = stage(indexOf(c), 0, static_cast<size_t>(whole.elements()));
    return std::make_unique<PositionChunks>(
        gather ? PositionChunks::Mode::kGather : PositionChunks::Mode::kScatter, comm_.ops(),
        *backend_, local, whole, staging, tp_, w_ % tp_, c.parts, c.segments);
  }
  if (c.buffer == BufferKind::kActivations && layer.kind == LayerKind::kSoftmax) {
    // The loss over the group's shares of the vocabulary: each position's
    // (max, sum of exp) merged. (The Plan prices 3 values a position, the
    // target's logit too; here the worker holding the target adds its loss.)
    backend_->synchronize();
    return std::make_unique<FlatEndpoint>(comm_.ops(), *backend_, model_.softmaxStatsNoWait(),
                                          c.parts, c.segments, 2, true);
  }
  // A partial sum, in place: the output of a row layer (attention, the
  // MLP's second fc) or of the embedding; the input gradient of a column
  // layer (attention, the MLP's first fc, the output fc), which no other
  // layer adds into (Model checks).
  nn::Tensor& sum = c.buffer == BufferKind::kActivations ? const_cast<nn::Tensor&>(model_.output(l))
                                                         : model_.outputGrad(layer.inputs[0]);
  return std::make_unique<FlatEndpoint>(comm_.ops(), *backend_, sum.span(), c.parts, c.segments, 1,
                                        false);
}

std::unique_ptr<Endpoint> Worker::activationsEndpoint(const Collective& c) {
  if (tp_ > 1)
    return tensorParallelEndpoint(c);
  const int r = c.round;
  if (c.firstLayer == mp_) {
    // Boundary: this rank sends its round rows of its own boundary output;
    // rows from v land at v's offset in the round's input.
    const int64_t row = net_.layers[static_cast<size_t>(mp_)].inShape.elements();
    std::span<float> staged;
    {
      std::lock_guard lock(stagingMutex_);
      // std::map: the element stays put while others come and go. Kept
      // from step to step (an allocation per round costs a device-wide
      // cudaFree on a GPU); this step's rows are in it once `landed_`
      // names the round.
      auto& buffer = staging_.try_emplace(r, backend_->memory()).first->second;
      buffer.resizeUninitialized(static_cast<size_t>(roundBatch(r) * row));
      staged = buffer.span();
      landed_.insert(r);
    }
    auto& boundary = const_cast<nn::Tensor&>(model_.output(mp_ - 1));
    return std::make_unique<RowsEndpoint>(
        comm_.ops(), boundary.span(), row, [this, r](int) { return ownRows(r, w_); }, staged,
        [this, r](int v) {
          const int64_t at = roundOffset(r, v);
          const auto rows = ownRows(r, v);
          return std::pair<int64_t, int64_t>{at, at + rows.second - rows.first};
        },
        c.segments);
  }
  // Inner allgather of layer firstLayer's output slices into the next
  // layer's input: staged per source, placed when the collective finishes.
  const int producer = c.firstLayer;
  const int batch = roundBatch(r);
  return std::make_unique<SliceGather>(*this, indexOf(c), producer, batch, c.segments);
}

std::unique_ptr<Endpoint> Worker::gradientsEndpoint(const Collective& c) {
  if (tp_ > 1)
    return tensorParallelEndpoint(c);
  const int r = c.round;
  if (c.firstLayer == mp_ - 1) {
    // Gradients of the boundary activations: every rank's partial gradient
    // (exchangeInputGrad of the first FC layer, round batch x A) goes, by
    // rows, to the owners of the examples, which sum them into outputGrad.
    return std::make_unique<BoundaryReturn>(*this, indexOf(c), r, c.segments);
  }
  // Inner reduce-scatter: partial gradients of the whole input of layer
  // firstLayer + 1 go, by channel slice, to the producers of the slices.
  return std::make_unique<SliceScatter>(*this, indexOf(c), c.firstLayer, roundBatch(r), c.segments);
}

}  // namespace strata::exec::detail
