// A rank's construction, its two lanes, and its compute and update tasks
// (worker.h says which file holds the rest).
//
// Each rank walks the Plan's tasks in order and runs those it takes part in:
// its compute and update tasks, and the transfers and sums whose flows name
// it. Plan order is topological and every rank follows the same order, so
// blocking sends and receives cannot deadlock (a rank waiting in task T for a
// peer means the peer has finished every earlier task both take part in).
#include "worker.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <limits>
#include <thread>

#include "strata/exec/comm/collectives.h"
#include "strata/model/error.h"

namespace strata::exec::detail {

Worker::Worker(Communicator& comm, const Plan& plan, const Network& net, const RunOptions& opt)
    : comm_(comm),
      plan_(plan),
      net_(net),
      opt_(opt),
      rule_{plan.scenario.options.optimizer,
            opt.learningRate,
            opt.momentum,
            opt.weightDecay,
            opt.beta1,
            opt.beta2,
            opt.eps},
      k_(plan.scenario.workers),
      world_(plan.scenario.workers + plan.servers),
      w_(comm.rank()),
      b_(plan.scenario.batchPerWorker),
      owt_(isModelParallel(plan.scenario.strategy)),
      mp_(owt_ ? net.modelParallelFrom : static_cast<int>(net.layers.size())),
      tp_(std::max(1, plan.scenario.options.tp)),
      pp_(std::max(1, plan.scenario.options.pp)),
      dp_(plan.scenario.workers / (tp_ * pp_)),
      layout_(rankLayoutOf(plan.scenario)),
      dataset_(nn::SyntheticDataset::forNetwork(net, opt.seed)),
      backend_(opt.backend ? opt.backend(comm.rank())
                           : makeBackend(opt.device, "--device", gpuOfWorker(opt, comm.rank()),
                                         opt.threadsPerWorker, plan.scenario.options.element)),
      model_(net, modelOptions()),
      timer_(*backend_) {
  microbatches_ = std::max(1, plan.scenario.options.microbatches);
  for (size_t t = 0; t < plan.tasks.size(); ++t)
    if (involves(plan.tasks[t]))
      mine_.push_back(t);
  // The layers this rank runs: a pipeline stage's, or all.
  computes_.assign(net.layers.size(), 0);
  for (size_t t : mine_)
    if (plan.tasks[t].kind == TaskKind::kCompute)
      computes_[static_cast<size_t>(plan.tasks[t].layer)] = 1;
  pipeline_ = pp_ > 1;
  if (pipeline_ && !server()) {
    model_.setActivationSlots(microbatches_);
    readsInput_ = holdsLoss_ = false;
    for (size_t l = 0; l < net.layers.size(); ++l)
      if (computes_[l]) {
        readsInput_ = readsInput_ || net.layers[l].readsNetworkInput();
        holdsLoss_ = holdsLoss_ || l + 1 == net.layers.size();
      }
  }
  lastOf_.assign(plan.collectives.size(), -1);
  for (size_t t : mine_)
    if (plan.tasks[t].collective >= 0)
      lastOf_[static_cast<size_t>(plan.tasks[t].collective)] = static_cast<int64_t>(t);
  std::vector<char> isMine(plan.tasks.size(), 0);
  for (size_t t : mine_)
    isMine[t] = 1;
  ownDeps_.resize(plan.tasks.size());
  for (size_t t : mine_) {
    (onComputeLane(plan.tasks[t]) ? computeTasks_ : commTasks_).push_back(t);
    // Dependencies on other ranks' tasks are kept by the messages, except
    // one: waiting for a collective to finish (its last task may not involve
    // this rank, e.g. the fold-out of halving-doubling) means waiting for
    // this rank's last task of it.
    for (int d : plan.depsOf(plan.tasks[t])) {
      const auto du = static_cast<size_t>(d);
      if (isMine[du]) {
        ownDeps_[t].push_back(d);
      } else if (const int c = plan.tasks[du].collective; c >= 0) {
        const int64_t own = lastOf_[static_cast<size_t>(c)];
        if (own >= 0 && own < static_cast<int64_t>(t))
          ownDeps_[t].push_back(static_cast<int>(own));
      }
    }
  }
  done_.assign(plan.tasks.size(), 0);
  timing_.resize(plan.tasks.size());
  // The mean over the global batch's positions (one per example for a
  // classifier, T per sequence for a language model), as one worker's
  // Model takes it by default.
  // With micro-batches the global batch is dp M b: each micro-batch's
  // gradients add to the others' (gradient accumulation).
  model_.setLossNormalizer(double(dp_) * microbatches_ * b_ * positions());
  // ps: this rank's communication tasks job by job, and the tag of rank
  // 0's i-th choice (that of the i-th job's first server update: a task
  // that sends nothing, so no transfer uses its tag).
  serveByJob_ = !plan.jobs.empty() && k_ > 1;
  jobTasks_.resize(plan.jobs.size());
  for (size_t t : commTasks_) {
    if (plan.tasks[t].job < 0)
      serveByJob_ = false;
    else
      jobTasks_[static_cast<size_t>(plan.tasks[t].job)].push_back(t);
  }
  for (const auto& j : plan.jobs) {
    int tag = tagOf(j.lastTask);
    for (uint32_t t = j.firstTask; t <= j.lastTask; ++t)
      if (plan.tasks[t].kind == TaskKind::kUpdate) {
        tag = tagOf(t);
        break;
      }
    decisionTag_.push_back(tag);
  }
  keyOf_.assign(net.layers.size(), -1);
  // A dedicated server's model holds its chunks' current weights (it runs
  // no forward): staleness is the workers' matter.
  if (plan.scenario.strategy == Strategy::kPs && k_ > 1 && !server())
    stale_ = plan.scenario.options.staleness;
  if (stale_ > 0) {
    makeKeys();
    for (const auto& [first, key] : keys_)
      pulledUpTo_[first] = -1;
  }
}

std::vector<Measured> Worker::run(int firstStep) {
  const int n = plan_.iterations;
  for (int s = firstStep; s < firstStep + n; ++s)
    if (opt_.failRank == w_ && opt_.failStep == s)
      throw RunFailure(
          fmt::format("injected fault at step {} (--fail-rank {} --fail-step {})", s, w_, s));
  for (int s = firstStep; s < firstStep + n; ++s)
    if (opt_.hangRank == w_ && opt_.hangStep == s) {
      step_ = s;
      hang();
    }
  firstStep_ = firstStep;
  step_ = firstStep;
  prepared_ = -1;
  lossShares_.assign(static_cast<size_t>(n), 0.0);
  std::vector<Measured> ms(static_cast<size_t>(n));
  model_.zeroGradients();
  premake();
  microPrepared_.assign(static_cast<size_t>(microbatches_), 0);
  if (pipeline_ && !server())
    model_.useActivationSlot(0);
  prepare(0);
  // The ranks start the step together. Making a step's examples is the
  // data loader's work, not the step's, and it takes each rank its own
  // time (the host's synthetic ImageNet batch of 64 took 0.1-0.3 s): a rank
  // would wait for the slowest in its first transfer, and that wait would
  // count as the step's communication (alexnet-owt ring, 2 workers on one
  // H100: steps of 17.5 to 53.9 ms for ~17 ms of work).
  if (world_ > 1)
    barrier(comm_);
  // Two lanes, as the Plan's resources: this thread runs the compute and
  // update tasks, a communication thread the transfers and sums (and a ps
  // server's updates), each in Plan order and each task once its own
  // dependencies on this rank are done. So gradients travel while backprop
  // goes on (overlap), a push returns at once and whatever needs the data
  // (the update, the next round's forward, a ps step's next forward of the
  // layer: PullWait) waits for it.
  // Time 0: compute and update tasks are timed by marks on the backend (the
  // GPU's own clock on CUDA, whose kernels run after the host enqueued
  // them), communication on the host clock from the same origin.
  const auto t0 = timer_.start();
  std::fill(done_.begin(), done_.end(), 0);
  marks_.assign(plan_.tasks.size(), {-1, -1});
  error_ = nullptr;
  std::thread commLane([&] { lane(t0, true, ms); });
  lane(t0, false, ms);
  commLane.join();
  if (error_)
    std::rethrow_exception(error_);
  timer_.finish();
  const double total = seconds(t0);
  gatherShards();
  measure(total, ms);
  return ms;
}

void Worker::gatherShards() {
  if (plan_.scenario.options.zero < 3 || k_ <= 1)
    return;
  backend_->synchronize();  // the updates
  for (const auto& t : plan_.tasks)
    if (t.kind == TaskKind::kUpdate && t.worker == w_ && t.part >= 0 && t.iteration == 0) {
      // Chunk `part` of the unit's parameters is this rank's, its position
      // in its data-parallel group (the same stage and lane of every
      // replica): a ring over the group.
      STRATA_ENFORCE_OP(t.shards, ==, dp_);
      STRATA_ENFORCE_OP(t.part, ==, replica());
      const auto all = paramsOf(t.layer, t.lastLayer);
      const auto n = static_cast<int64_t>(all.size());
      const int at = replica(), stage = layout_.stage(w_), lane = w_ % tp_;
      const auto wrap = [&](int i) { return ((i % dp_) + dp_) % dp_; };
      const auto peer = [&](int d) { return layout_.rank(wrap(d), stage, lane); };
      for (int i = 1; i < dp_; ++i)
        comm_.sendRecv(peer(at + 1), kTagAllGather,
                       std::span<const float>(sub(all, piece(n, dp_, wrap(at - i + 1)))),
                       peer(at - 1), kTagAllGather, sub(all, piece(n, dp_, wrap(at - i))));
    }
}

void Worker::premake() {
  premade_.clear();
  if (server() || plan_.iterations * microbatches_ == 1 || opt_.device != Device::kCpu)
    return;
  const auto& in = net_.input;
  // At most 1 GiB of examples per rank (ps's 6 steps of alexnet at batch 64:
  // 231 MB); beyond it the steps make their own, inside the window, as
  // docs/executor.md says.
  constexpr double kMostBytes = 1024.0 * 1024 * 1024;
  if (double(plan_.iterations) * microbatches_ * b_ * in.c * in.h * in.w * sizeof(float) >
      kMostBytes)
    return;
  for (int j = 0; j < plan_.iterations * microbatches_; ++j) {
    const int i = j / microbatches_;
    const int64_t first =
        firstExample(firstStep_ + i, dp_, replica(), b_, j % microbatches_, microbatches_);
    Premade p{dataset_.batch(first, b_), {}};
    // Made from the generator, then the batch's values (syntheticFill reads
    // a batch's values, when it has some, rather than the generator).
    std::vector<float> values(static_cast<size_t>(b_) * in.c * in.h * in.w);
    nn::syntheticFill(p.batch, nn::TensorView{values.data(), nn::Dims{b_, in.c, in.h, in.w}});
    p.batch.values = std::move(values);
    p.batch.tokens = {};  // the values, not the generator, are the batch now
    if (!owt_)
      p.labels = dataset_.labels(first, b_, positions());
    premade_.push_back(std::move(p));
  }
}

void Worker::prepare(int i, int micro) {
  if (server())
    return;
  prepared_ = i;
  preparedMicro_ = micro;
  const int s = firstStep_ + i;
  step_ = s;
  model_.setStep(microStep(i, micro));
  microPrepared_[static_cast<size_t>(micro)] = 1;
  // Own examples for the data-parallel (conv) part: a pipeline stage's
  // first layers read them, its last the labels.
  const bool labels = !owt_ && holdsLoss_;
  if (!premade_.empty()) {
    const Premade& p = premade_[static_cast<size_t>(i * microbatches_ + micro)];
    if (readsInput_)
      model_.writeInput(p.batch);
    if (labels)
      model_.setLabels(p.labels);
    return;
  }
  const int64_t first = firstExample(s, dp_, replica(), b_, micro, microbatches_);
  if (readsInput_)
    model_.writeInput(dataset_.batch(first, b_));
  if (labels)
    model_.setLabels(dataset_.labels(first, b_, positions()));
}

void Worker::hang() {
  if (opt_.hangStopsProcess) {
    stopThisProcessForTest(Seconds(2 * opt_.timeout.value() + 60));
    return;
  }
  while (!comm_.aborted())
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  throw CommError(fmt::format("hung at step {} (--hang-rank {} --hang-step {})", step_, w_, step_));
}

void Worker::lane(Clock::time_point t0, bool communication, std::vector<Measured>& ms) {
  try {
    if (communication && serveByJob_) {
      serveJobs(t0, ms);
      return;
    }
    for (size_t t : communication ? commTasks_ : computeTasks_)
      if (!runTask(t, t0, communication, ms))
        return;
  } catch (const std::exception& e) {
    {
      std::lock_guard lock(mutex_);
      if (!error_)
        error_ = std::current_exception();
    }
    cv_.notify_all();
    // The other lane may be blocked in a receive: end the world.
    comm_.abort(fmt::format("worker {}: {}", w_, e.what()));
  }
}

bool Worker::runTask(size_t t, Clock::time_point t0, bool communication,
                     std::vector<Measured>& ms) {
  {
    std::unique_lock lock(mutex_);
    cv_.wait(lock, [&] {
      if (error_)
        return true;
      for (int d : ownDeps_[t])
        if (!done_[static_cast<size_t>(d)])
          return false;
      return true;
    });
    if (error_)
      return false;
  }
  const Task& task = plan_.tasks[t];
  Measured& m = ms[static_cast<size_t>(task.iteration)];
  if (!communication) {
    if (pipeline_) {
      if (task.kind == TaskKind::kCompute)
        enterMicro(task);
    } else {
      if (task.iteration != prepared_)
        prepare(task.iteration);
      // The next micro-batch's first forward: its examples.
      if (task.kind == TaskKind::kCompute && task.micro >= 0 && task.micro != preparedMicro_ &&
          task.phase == Phase::kFwd && !task.recompute)
        prepare(task.iteration, task.micro);
    }
    // Compute and update: marks on the backend, read after the step.
    const int a = timer_.mark();
    if (task.kind == TaskKind::kCompute)
      compute(task);
    else
      update(task);
    marks_[t] = {a, timer_.mark()};
  } else {
    // The compute lane only enqueued its tasks (a GPU runs them
    // later): wait for the ones this task reads, and only those.
    for (int d : ownDeps_[t])
      if (const int end = marks_[static_cast<size_t>(d)].second; end >= 0)
        timer_.wait(end);
    const double start = seconds(t0);
    if (task.kind == TaskKind::kTransfer)
      transfer(t, task, m);
    else if (task.kind == TaskKind::kReduce)
      reduce(t, task);
    else
      serverUpdate(task);
    const double end = seconds(t0);
    timing_[t] = {start, end};
    m.communication += end - start;
  }
  if (task.collective >= 0 && lastOf_[static_cast<size_t>(task.collective)] == int64_t(t)) {
    endCollective(task.collective);
    endpoints_.erase(task.collective);
    const auto& c = plan_.collectives[static_cast<size_t>(task.collective)];
    if (stale_ > 0 && c.buffer == BufferKind::kWeights) {
      std::lock_guard lock(mutex_);
      auto& newest = pulledUpTo_.at(c.firstLayer);
      newest = std::max(newest, firstStep_ + task.iteration);
    }
  }
  {
    std::lock_guard lock(mutex_);
    done_[t] = 1;
  }
  cv_.notify_all();
  return true;
}

void Worker::enterMicro(const Task& task) {
  const int m = task.micro;
  STRATA_ENFORCE(m >= 0 && m < microbatches_);
  model_.useActivationSlot(m);
  if (task.phase == Phase::kFwd && !task.recompute && !microPrepared_[static_cast<size_t>(m)]) {
    prepare(task.iteration, m);
    return;
  }
  model_.setStep(microStep(task.iteration, m));
}

bool Worker::tiedCopy(int first, int last) const {
  return pipeline_ && first == last && !computes_[static_cast<size_t>(first)] &&
         net_.layers[static_cast<size_t>(first)].kind == LayerKind::kEmbedding;
}

std::span<float> Worker::paramsOf(int first, int last, bool tokensOnly) {
  return named(model_.parametersNoWait(first, last), first, last, tokensOnly);
}

std::span<float> Worker::gradsOf(int first, int last, bool tokensOnly) {
  return named(model_.gradientsNoWait(first, last), first, last, tokensOnly);
}

std::span<float> Worker::named(std::span<float> all, int first, int last, bool tokensOnly) const {
  if (!tokensOnly && !tiedCopy(first, last))
    return all;
  return all.first(static_cast<size_t>(model_.tokenTableElements(first)));
}

nn::ModelOptions Worker::modelOptions() const {
  nn::ModelOptions o;
  o.backend = backend_.get();
  o.seed = opt_.seed;
  o.dropout = opt_.dropout;
  if (owt_)
    o.slices = nn::modelParallelSlices(net_, k_, w_);
  if (tp_ > 1)
    o.tensorParallel = {tp_, w_ % tp_, plan_.scenario.options.sequenceParallel};
  return o;
}

int Worker::positions() const {
  const auto& last = net_.layers.back().outShape;
  return last.h * last.w;
}

bool Worker::involves(const Task& t) const {
  if (t.kind == TaskKind::kCompute || t.kind == TaskKind::kUpdate)
    return t.worker == w_;
  for (const auto& f : plan_.flowsOf(t))
    if (f.src == w_ || f.dst == w_)
      return true;
  return false;
}

std::vector<std::pair<int, std::pair<int64_t, int64_t>>> Worker::roundRows(int r) const {
  std::vector<std::pair<int, std::pair<int64_t, int64_t>>> rows;
  switch (plan_.scenario.strategy) {
    case Strategy::kOwtA:
      for (int v = 0; v < k_; ++v)
        rows.push_back({v, {0, b_}});
      break;
    case Strategy::kOwtB:
      rows.push_back({r, {0, b_}});
      break;
    default:
      for (int v = 0; v < k_; ++v)
        rows.push_back({v, piece(b_, k_, r)});
  }
  return rows;
}

int Worker::roundBatch(int r) const {
  int64_t n = 0;
  for (const auto& [v, rows] : roundRows(r))
    n += rows.second - rows.first;
  return static_cast<int>(n);
}

int64_t Worker::roundOffset(int r, int v) const {
  int64_t n = 0;
  for (const auto& [u, rows] : roundRows(r)) {
    if (u == v)
      return n;
    n += rows.second - rows.first;
  }
  return -1;
}

std::pair<int64_t, int64_t> Worker::ownRows(int r, int v) const {
  for (const auto& [u, rows] : roundRows(r))
    if (u == v)
      return rows;
  return {0, 0};
}

void Worker::startRound(int r) {
  const int batch = roundBatch(r);
  auto& in = model_.exchangeInput(mp_, batch);
  const auto own = ownRows(r, w_);
  const int64_t row = net_.layers[static_cast<size_t>(mp_)].inShape.elements();
  // Other workers' rows arrived in this round's staging buffer (a round
  // ahead of the compute, so they cannot land in the input in use).
  {
    std::lock_guard lock(stagingMutex_);  // the communication lane fills later rounds
    if (landed_.erase(r) > 0) {
      const auto& staged = staging_.at(r);
      STRATA_ENFORCE_OP(static_cast<int64_t>(staged.size()), <=, in.elements());
      copyOnStream(staged.data(), in.data(), static_cast<int64_t>(staged.size()));
    }
  }
  if (own.second > own.first) {
    const auto& boundary = model_.output(mp_ - 1);
    copyOnStream(boundary.data() + own.first * row, in.data() + roundOffset(r, w_) * row,
                 (own.second - own.first) * row);
  }
  // The labels of each position, as the data-parallel part reads them: for
  // token sequences the next token at each position, not one per example.
  std::vector<int32_t> labels;
  labels.reserve(static_cast<size_t>(batch) * static_cast<size_t>(positions()));
  for (const auto& [v, rows] : roundRows(r)) {
    const auto part = dataset_.labels(firstExample(step_, k_, v, b_) + rows.first,
                                      static_cast<int>(rows.second - rows.first), positions());
    labels.insert(labels.end(), part.begin(), part.end());
  }
  STRATA_ENFORCE_OP(static_cast<int64_t>(labels.size()), ==, int64_t{batch} * positions());
  model_.setLabels(labels);
}

void Worker::compute(const Task& task) {
  const int l = task.layer;
  // ps, a later step: its backprop of layer l runs after the step before's
  // job of l's key (the pull before the forward; with staleness a
  // dependency of its own), which is then done with l's gradients.
  if (task.iteration > 0 && task.phase == Phase::kBwdWeights)
    model_.zeroGradientsBeforeBackprop(l);
  if (stale_ > 0 && task.phase == Phase::kFwd && task.iteration > 0)
    stagedWeights(l, firstStep_ + task.iteration);
  if (owt_ && l == mp_ && task.phase == Phase::kFwd)
    startRound(task.round);
  if (owt_ && l > mp_ && task.phase == Phase::kFwd && model_.modelParallel(l) &&
      net_.layers[static_cast<size_t>(l)].hasWeights())
    placeOwnSlice(l, roundBatch(task.round));
  switch (task.phase) {
    case Phase::kFwd:
      if (task.recompute && plan_.scenario.options.recompute == Recompute::kSelective)
        model_.recomputeAttentionCore(l);
      else if (task.recompute)
        model_.recompute(l);
      else
        model_.forward(l);
      break;
    case Phase::kBwdData:
      // The loss of the examples just through the softmax (this worker's
      // share of them in owt-*), before its backward.
      if (net_.layers[static_cast<size_t>(l)].kind == LayerKind::kSoftmax)
        lossShares_[static_cast<size_t>(task.iteration)] += model_.loss();
      model_.backwardData(l);
      if (owt_ && k_ == 1 && l >= mp_ && model_.modelParallel(l) &&
          net_.layers[static_cast<size_t>(l)].hasWeights())
        keepOwnInputGradient(l, task.round);
      break;
    case Phase::kBwdWeights:
      model_.backwardWeights(l);
      break;
    case Phase::kUpdate:
      break;
  }
}

void Worker::keepOwnInputGradient(int l, int round) {
  const auto& partial = model_.exchangeInputGrad(l);
  auto& g = model_.outputGrad(l - 1);
  const int64_t offset =
      l == mp_ ? ownRows(round, w_).first * net_.layers[static_cast<size_t>(l)].inShape.elements()
               : 0;
  STRATA_ENFORCE_OP(offset + partial.elements(), <=, g.elements());
  copyOnStream(partial.data(), g.data() + offset, partial.elements());
}

void Worker::copyOnStream(const float* from, float* to, int64_t n) {
  STRATA_ENFORCE(n >= 0 && n <= std::numeric_limits<int>::max());
  const nn::Dims flat{1, 1, 1, static_cast<int>(n)};
  backend_->accumulate(nn::ConstTensorView{from, flat}, nn::TensorView{to, flat}, 0.0f);
}

void Worker::placeOwnSlice(int l, int batch) {
  auto& in = model_.exchangeInput(l, batch);
  backend_->copyIntoChannels(model_.output(l - 1).view(), in.view(), model_.slice(l - 1).begin);
}

void Worker::update(const Task& task) {
  if (task.part >= 0) {
    // ZeRO: this worker's chunk of the layers' parameters, as one span (the
    // chunk its reduce-scatter summed), at the run's step as a ps server.
    const auto n = static_cast<int64_t>(paramsOf(task.layer, task.lastLayer).size());
    const auto [begin, end] = piece(n, task.shards, task.part);
    model_.updateShard(task.layer, task.lastLayer, begin, end, rule_,
                       int64_t{firstStep_} + task.iteration + 1);
    return;
  }
  const bool fcPart = owt_ && task.layer >= mp_;
  for (int l = task.layer; l <= task.lastLayer; ++l)
    if (net_.layers[static_cast<size_t>(l)].hasWeights()) {
      // Adam's step: the layer's own count of updates (a per-round FC
      // update counts every round, as one worker applying that rule would).
      model_.update(l, rule_);
      // FC gradients accumulate over the rounds; after a per-round update
      // the next round starts from zero.
      if (fcPart)
        model_.zeroGradients(l);
    }
  // A tied table's copy on this stage (the embedding runs on another):
  // updated with its fc, as the embedding's stage updates the original
  // (the same summed gradient, the same step).
  for (int l = task.layer; l <= task.lastLayer; ++l)
    if (const int owner = net_.layers[static_cast<size_t>(l)].spec.tiedTo;
        owner >= 0 && tiedCopy(owner, owner))
      model_.updateShard(owner, owner, 0, model_.tokenTableElements(owner), rule_,
                         int64_t{firstStep_} + task.iteration + 1);
}

}  // namespace strata::exec::detail
