// The executor against a one-worker reference: after N steps, K workers of b
// examples must hold the weights of one worker with batch K b (data-parallel
// and model-parallel with per-step FC update), for K = 1..8 (3 and 4 under
// ThreadSanitizer); and its measured trace.
#include "strata/exec/runtime.h"

#include <pthread.h>
#include <sched.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <chrono>
#include <cmath>
#include <mutex>
#include <set>
#include <sstream>
#include <thread>
#include <vector>

#include "../../model/helpers.h"
#include "../../trace_checker.h"
#include "../counting_ops.h"
#include "../device_like_memory.h"
#include "pipeline_kept.h"
#include "run_helpers.h"
#include "strata/exec/nn/dataset.h"
#include "strata/exec/nn/memory.h"
#include "strata/exec/nn/model.h"
#include "strata/model/error.h"
#include "strata/model/limits.h"
#include "strata/study/trace.h"

using namespace strata;
using strata::test::maxRelativeDifference;
using strata::test::presetNetwork;

namespace {

// Worker counts of the equivalence tests: from..8, so primes and sizes that do
// not divide the buffers. Under ThreadSanitizer, which runs these tests 20-50
// times slower (most of an hour for 1..8 on two cores; 15 min of CI for 3 and
// 4), 3: a ring of more than two ranks, a prime that halving-doubling folds,
// so every lane hand-off between the workers' threads runs (the comm: tests
// run the collectives themselves on 1..8 ranks under TSan). Under ASan +
// UBSan (6x slower: 68 s for the first test below, 12 s in Release) from, 3
// and 8: the smallest, a prime that divides no buffer and the largest, so
// every uneven chunk's bounds are still checked; the Release suite runs them
// all.
std::vector<int> workerCounts(int from) {
#if defined(STRATA_SANITIZED_THREAD)
  return {std::max(from, 3)};
#elif defined(STRATA_SANITIZED)
  std::vector<int> ks{from};
  for (int k : {3, 8})
    if (k > from)
      ks.push_back(k);
  return ks;
#else
  std::vector<int> ks;
  for (int k = from; k <= 8; ++k)
    ks.push_back(k);
  return ks;
#endif
}

// Runs a ps layout of `sc` for `steps` steps against one worker with batch
// K b (`ref`): its sums run in another order, so every worker's weights are
// within 1e-5 of the reference, and the same bits on every worker.
// Returns the run.
exec::RunResult checkPsAgainstOneWorker(const Network& net, const Scenario& sc, int steps,
                                        const exec::RunResult& ref) {
  std::vector<std::vector<float>> params;
  const Optimizer optimizer = sc.options.optimizer;
  const auto options = test::runOptions(steps, optimizer);
  auto run = exec::runThreads(lowerToPlan(net, sc, steps), net, options, &params);
  REQUIRE(params.size() == static_cast<size_t>(sc.workers));
  for (const auto& p : params) {
    test::checkSameWeights(p, ref.parameters, optimizer, options.learningRate);
    CHECK(p == params[0]);
  }
  CHECK(run.steps.back().loss == Approx(ref.steps.back().loss).epsilon(1e-4));
  return run;
}
// The reference of the equivalence tests: one worker with the whole batch.
exec::RunResult oneWorker(const Network& net, int batch, int steps,
                          Optimizer optimizer = Optimizer::kMomentum) {
  return exec::runThreads(lowerToPlan(net, test::runScenario(Strategy::kRing, 1, batch, optimizer)),
                          net, test::runOptions(steps, optimizer));
}
}  // namespace

TEST_CASE("data-parallel strategies equal one worker with batch K b", "[exec]") {
  // With each update rule: SGD with momentum, Adam and AdamW (whose step
  // counts and bias corrections every worker and the ps servers keep alike).
  const auto net = presetNetwork("tiny-cnn");
  const int b = 4, steps = 3;
  for (Optimizer optimizer : test::kOptimizers) {
    for (int k : workerCounts(1)) {
      const auto ref = oneWorker(net, k * b, steps, optimizer);
      for (auto s : {Strategy::kNaive, Strategy::kRing, Strategy::kPs}) {
        INFO(toString(s) << " K = " << k << " " << toString(optimizer));
        std::vector<std::vector<float>> params;
        const auto options = test::runOptions(steps, optimizer);
        const auto run = exec::runThreads(lowerToPlan(net, test::runScenario(s, k, b, optimizer)),
                                          net, options, &params);
        // Float sums in another order: 1e-5 of the largest weight.
        for (const auto& p : params)
          test::checkSameWeights(p, ref.parameters, optimizer, options.learningRate);
        CHECK(run.steps.back().loss == Approx(ref.steps.back().loss).epsilon(1e-4));
      }
    }
  }
  // Adam moves the weights: a run of 3 steps is not the initial model.
  const auto adam = oneWorker(net, b, steps, Optimizer::kAdam);
  const auto none = oneWorker(net, b, 1, Optimizer::kAdam);
  CHECK(maxRelativeDifference(adam.parameters, none.parameters) > 1e-4);
  CHECK(maxRelativeDifference(adam.parameters, oneWorker(net, b, steps).parameters) > 1e-4);
}

TEST_CASE("workers on several threads each equal one worker with batch K b", "[exec]") {
  // --threads-per-worker: each worker's kernels split over its own team (3
  // threads: batches of 4 and 5 examples do not divide). tiny-cnn through
  // conv, pool, fc and softmax; tiny-gpt through the transformer layers,
  // tiny-llama through Llama's.
  for (const char* name : {"tiny-cnn", "tiny-gpt", "tiny-llama"}) {
    const auto net = presetNetwork(name);
    const int b = 4, steps = 2;
    for (int k : {1, 2, 3}) {
      const auto ref = oneWorker(net, k * b, steps);
      INFO(name << " K = " << k);
      auto options = test::runOptions(steps);
      options.threadsPerWorker = 3;
      std::vector<std::vector<float>> params;
      const auto run = exec::runThreads(lowerToPlan(net, test::runScenario(Strategy::kRing, k, b)),
                                        net, options, &params);
      for (const auto& p : params)
        CHECK(maxRelativeDifference(p, ref.parameters) < 1e-5);
      CHECK(run.steps.back().loss == Approx(ref.steps.back().loss).epsilon(1e-4));
    }
  }
}

TEST_CASE("data-parallel strategies on tiny-gpt equal one worker with batch K b",
          "[exec][transformer]") {
  // Embedding, attention, layernorm, gelu and the tied head through every
  // data-parallel strategy: the tied fc adds into the embedding's gradient,
  // which the buckets sync after the embedding's own bwd_weights (last in
  // backprop). ps also as one multi-step plan (its later steps zero each
  // gradient where backprop first writes it).
  const auto net = presetNetwork("tiny-gpt");
  const int b = 2, steps = 3;
  for (Optimizer optimizer : test::kOptimizers) {
    for (int k : {1, 2, 3, 5}) {
      const auto ref = oneWorker(net, k * b, steps, optimizer);
      for (auto s : {Strategy::kNaive, Strategy::kRing, Strategy::kPs}) {
        for (int planSteps : {1, steps}) {
          if (planSteps > 1 && s != Strategy::kPs)
            continue;
          INFO(toString(s) << " K = " << k << " plan of " << planSteps << " steps "
                           << toString(optimizer));
          std::vector<std::vector<float>> params;
          const auto options = test::runOptions(steps, optimizer);
          const auto run =
              exec::runThreads(lowerToPlan(net, test::runScenario(s, k, b, optimizer), planSteps),
                               net, options, &params);
          for (const auto& p : params)
            test::checkSameWeights(p, ref.parameters, optimizer, options.learningRate);
          CHECK(run.steps.back().loss == Approx(ref.steps.back().loss).epsilon(1e-4));
        }
      }
    }
  }
  // The loss is the mean over the global batch's positions: near chance
  // (ln 512) at the start.
  CHECK(oneWorker(net, 4, 1).steps[0].loss == Approx(std::log(512.0)).epsilon(0.2));
}

TEST_CASE("data-parallel strategies on tiny-llama equal one worker with batch K b",
          "[exec][transformer][llama]") {
  // RMSNorm, grouped-query attention with rotary positions, SwiGLU and an
  // untied head through every data-parallel strategy, K = 1, 2, 3 and 5
  // (5 does not divide the 32 positions' anything).
  const auto net = presetNetwork("tiny-llama");
  const int b = 2, steps = 3;
  for (Optimizer optimizer : test::kOptimizers) {
    for (int k : {1, 2, 3, 5}) {
      const auto ref = oneWorker(net, k * b, steps, optimizer);
      for (auto s : {Strategy::kNaive, Strategy::kRing, Strategy::kPs}) {
        INFO(toString(s) << " K = " << k << " " << toString(optimizer));
        std::vector<std::vector<float>> params;
        const auto options = test::runOptions(steps, optimizer);
        const auto run = exec::runThreads(lowerToPlan(net, test::runScenario(s, k, b, optimizer)),
                                          net, options, &params);
        for (const auto& p : params)
          test::checkSameWeights(p, ref.parameters, optimizer, options.learningRate);
        CHECK(run.steps.back().loss == Approx(ref.steps.back().loss).epsilon(1e-4));
      }
    }
  }
  // The loss starts near chance (ln 512) and training moves the weights.
  CHECK(oneWorker(net, 4, 1).steps[0].loss == Approx(std::log(512.0)).epsilon(0.2));
  CHECK(maxRelativeDifference(oneWorker(net, 4, 3).parameters, oneWorker(net, 4, 1).parameters) >
        1e-4);
}

TEST_CASE("ps with PullWait (steps back to back) gives stepwise ps's weights bit for bit",
          "[exec][ps]") {
  // The same pushes, sums, server updates and pulls; only when the next
  // step's forward may start differs. Five examples: chunks that do not divide.
  const auto net = presetNetwork("tiny-cnn");
  const int b = 5, steps = 4;
  for (int k : workerCounts(1)) {
    INFO("K = " << k);
    const auto sc = test::runScenario(Strategy::kPs, k, b);
    std::vector<std::vector<float>> together, stepwise;
    const auto plan = lowerToPlan(net, sc, steps);
    CHECK(plan.iterations == (k > 1 ? steps : 1));
    const auto run = exec::runThreads(plan, net, test::runOptions(steps), &together);
    exec::runThreads(lowerToPlan(net, sc, 1), net, test::runOptions(steps), &stepwise);
    REQUIRE(together.size() == stepwise.size());
    for (size_t w = 0; w < together.size(); ++w)
      CHECK(together[w] == stepwise[w]);
    CHECK(run.steps.size() == static_cast<size_t>(steps));
    CHECK(run.measured.firstStep.value() == run.steps[0].seconds);
    CHECK(run.measured.steadySteps == steps);
    for (const auto& st : run.steps)
      CHECK(st.seconds > 0);
  }
}

TEST_CASE("ps priorities change the order of the jobs, not a bit of the weights", "[exec][ps]") {
  // Rank 0 chooses each next job and every rank follows: no deadlock, and
  // each job sums and updates its own key, so the order leaves the bits.
  const auto net = presetNetwork("tiny-cnn");
  const int b = 3, steps = 3;
  for (int k : workerCounts(2)) {
    std::vector<std::vector<float>> reference;
    for (auto priority : {PsPriority::kFirstNeeded, PsPriority::kFifo, PsPriority::kLastReady}) {
      INFO("K = " << k << " " << toString(priority));
      auto sc = test::runScenario(Strategy::kPs, k, b);
      sc.options.psPriority = priority;
      std::vector<std::vector<float>> params;
      exec::runThreads(lowerToPlan(net, sc, steps), net, test::runOptions(steps), &params);
      if (reference.empty())
        reference = params;
      CHECK(params == reference);
    }
  }
}

TEST_CASE("ZeRO-1, 2 and 3 equal one worker with batch K b, every worker alike", "[exec][zero]") {
  // Each bucket's gradients reduce-scattered, each worker's update of its
  // chunk of every bucket (its optimizer state only there), the weights
  // all-gathered; ZeRO-3 per gather unit (a block's layers, or one layer),
  // with each unit's weights gathered before its forward and its backward:
  // other sums' order than one worker, so within 1e-5 of it, and the same
  // bits on every worker. Small buckets cut the chunks inside layers; K =
  // 1..8 includes primes and chunks that do not divide them.
  for (const char* name : {"tiny-cnn", "tiny-gpt"}) {
    const auto net = presetNetwork(name);
    const int b = 4, steps = 3;
    for (Optimizer optimizer : test::kOptimizers)
      for (int k : workerCounts(1)) {
        if (optimizer != Optimizer::kMomentum && k != 2 && k != 5 && k != 7)
          continue;
        const auto ref = oneWorker(net, k * b, steps, optimizer);
        for (int zero : {1, 2, 3})
          for (double bucket : {0.0, 40e3}) {
            INFO(name << " K = " << k << " ZeRO-" << zero << " bucket " << bucket << " "
                      << toString(optimizer));
            auto sc = test::runScenario(Strategy::kRing, k, b, optimizer);
            sc.options.zero = zero;
            sc.options.bucket = Bytes(bucket);
            checkPsAgainstOneWorker(net, sc, steps, ref);
          }
      }
  }
}

TEST_CASE("full and selective recomputation give the weights of none, bit for bit, K = 1..8",
          "[exec][recompute]") {
  // --recompute full: each block's forward again before its backward (the
  // Plan's recompute tasks), which writes the same outputs and saved tensors
  // (dropout's masks are counters of seed, step, layer and example) and
  // clears no gradient; selective: each attention's core again (scores,
  // softmax, context from the saved Q, K, V). So every weight is the same
  // bits as without it; with ZeRO-3, whose gathers wait for the recomputed
  // forward too.
  for (const char* name : {"tiny-gpt", "tiny-llama"}) {
    const auto net = presetNetwork(name);
    const int b = 3, steps = 3;
    for (int k : workerCounts(1))
      for (auto [s, zero] : {std::pair{Strategy::kRing, 0}, std::pair{Strategy::kNaive, 0},
                             std::pair{Strategy::kRing, 3}}) {
        INFO(name << " K = " << k << " " << toString(s) << " ZeRO-" << zero);
        auto sc = test::runScenario(s, k, b);
        sc.options.zero = zero;
        std::vector<std::vector<float>> plain;
        exec::runThreads(lowerToPlan(net, sc), net, test::runOptions(steps), &plain);
        for (Recompute r : {Recompute::kFull, Recompute::kSelective}) {
          INFO("--recompute " << toString(r));
          sc.options.recompute = r;
          const auto plan = lowerToPlan(net, sc);
          const auto recomputed = std::count_if(plan.tasks.begin(), plan.tasks.end(),
                                                [](const Task& t) { return t.recompute; });
          int rerun = 0;  // per worker: block layers (full) or attentions (selective)
          for (const auto& l : net.layers)
            rerun += r == Recompute::kFull ? l.block >= 0 : l.kind == LayerKind::kAttention;
          CHECK(recomputed == int64_t{rerun} * k);
          std::vector<std::vector<float>> again;
          exec::runThreads(plan, net, test::runOptions(steps), &again);
          REQUIRE(again.size() == plain.size());
          for (size_t w = 0; w < plain.size(); ++w)
            CHECK(again[w] == plain[w]);
        }
      }
  }
}

namespace {

// A GPT of 12 heads (tensor-parallel groups of 2, 3, 4 and 6 workers), an
// MLP of 96 that they all divide, a vocabulary of 101 (a prime: the last
// worker of every group holds fewer rows) and an untied output layer with a
// bias, so the output fc's own slice of rows and bias splits.
Network tensorParallelGpt() {
  return test::loadNetworkText("strata-tp-test", "tp-gpt", R"(
name: tp-gpt
description: a GPT for the tensor-parallel tests
input: {channels: 1, height: 12, width: 1}
layers:
  - {name: wte, kind: embedding, vocab: 101, outputs: 48, positions: 12}
  - {name: h, kind: transformer, heads: 12, hidden: 96, dropout: 0.1, repeat: 2}
  - {name: ln_f, kind: layernorm}
  - {name: head, kind: fc, outputs: 101, flatten: false, bias: true}
  - {name: loss, kind: softmax}
)");
}

}  // namespace

TEST_CASE("tensor parallelism equals one worker with batch dp b, K = dp x tp up to 8",
          "[exec][tp]") {
  // Megatron's split: attention by heads, the MLP's first fc by outputs and
  // its second by inputs, the vocabulary by rows (embedding, output fc and
  // the loss over them); the group sums partial outputs and input gradients
  // in place (the Plan's collectives), the data-parallel groups (ranks tp
  // apart) the gradients. Every worker's share within 1e-5 of one worker on
  // the global batch, with ZeRO and recomputation on top; the tied head of
  // tiny-gpt reads its embedding's rows; tiny-llama splits its grouped
  // keys and values (2 query heads and 1 key/value head a worker), rotary
  // positions and SwiGLU (each worker a share of the gate's and of the
  // value's columns).
  // With sequence parallelism (sp) the replicated layers run on T / tp
  // positions: the group all-gathers the input of each column layer and
  // reduce-scatters the output of each row layer (and the gradients the
  // other way), and sums the layernorms' weight gradients.
  struct Case {
    const char* net;
    int dp, tp, zero;
    Recompute recompute;
    bool sp = false;
  };
  const auto none = Recompute::kNone;
  std::vector<Case> cases = {{"tp-gpt", 1, 2, 0, none},
                             {"tp-gpt", 1, 3, 0, none},
                             {"tp-gpt", 1, 4, 0, none},
                             {"tp-gpt", 2, 3, 0, none},
                             {"tp-gpt", 3, 2, 1, none},
                             {"tp-gpt", 2, 2, 2, Recompute::kSelective},
                             {"tp-gpt", 2, 3, 3, Recompute::kFull},
                             {"tiny-gpt", 1, 2, 0, none},
                             {"tiny-gpt", 2, 2, 3, none},
                             {"tiny-gpt", 1, 4, 0, Recompute::kFull},
                             {"tiny-llama", 1, 2, 0, none},
                             {"tp-gpt", 1, 2, 0, none, true},
                             {"tp-gpt", 1, 3, 0, none, true},
                             {"tp-gpt", 2, 3, 1, none, true},
                             {"tp-gpt", 3, 2, 3, Recompute::kFull, true},
                             {"tiny-gpt", 2, 2, 0, Recompute::kSelective, true},
                             {"tiny-llama", 1, 2, 0, none, true}};
#ifndef STRATA_SANITIZED_THREAD
  for (Case c : std::vector<Case>{{"tp-gpt", 1, 6, 0, none},
                                  {"tp-gpt", 4, 2, 0, none},
                                  {"tp-gpt", 2, 4, 1, none},
                                  {"tiny-gpt", 2, 4, 0, Recompute::kSelective},
                                  {"tiny-llama", 2, 2, 1, Recompute::kSelective},
                                  {"tiny-llama", 3, 2, 3, Recompute::kFull},
                                  {"tp-gpt", 1, 4, 2, none, true},
                                  {"tp-gpt", 1, 6, 0, Recompute::kSelective, true},
                                  {"tiny-gpt", 2, 4, 3, none, true},
                                  {"tiny-llama", 2, 2, 2, Recompute::kFull, true}})
    cases.push_back(c);
#endif
  const int b = 2, steps = 3;
  for (const Case& c : cases)
    for (Optimizer optimizer : test::kOptimizers) {
      if (optimizer != Optimizer::kMomentum && c.dp * c.tp != 6)
        continue;
      const auto net = std::string(c.net) == "tp-gpt" ? tensorParallelGpt() : presetNetwork(c.net);
      INFO(c.net << " dp " << c.dp << " x tp " << c.tp << (c.sp ? " with sp" : "") << ", ZeRO-"
                 << c.zero << ", --recompute " << toString(c.recompute) << ", "
                 << toString(optimizer));
      const auto ref = oneWorker(net, c.dp * b, steps, optimizer);
      auto sc = test::runScenario(Strategy::kRing, c.dp * c.tp, b, optimizer);
      sc.options.tp = c.tp;
      sc.options.sequenceParallel = c.sp;
      sc.options.zero = c.zero;
      sc.options.recompute = c.recompute;
      std::vector<std::vector<float>> params;
      const auto options = test::runOptions(steps, optimizer);
      const auto run = exec::runThreads(lowerToPlan(net, sc), net, options, &params);
      REQUIRE(params.size() == static_cast<size_t>(c.dp * c.tp));
      test::checkSharesAgainstOneWorker(net, c.tp, params, ref.parameters, optimizer,
                                        options.learningRate);
      CHECK(run.steps.back().loss == Approx(ref.steps.back().loss).epsilon(1e-4));
      // The global batch is dp x b examples (a group shares its rows), not K x b.
      CHECK(run.measured.throughput * run.measured.step.value() == Approx(c.dp * b));
    }
}

TEST_CASE("gradient accumulation over M micro-batches equals one worker with batch dp M b",
          "[exec][pipeline]") {
  // --microbatches M without --pp: each worker runs its M micro-batches'
  // forward and backward in turn (the plan's 1f1b order on one stage), the
  // gradients adding up in place, and synchronises them once, beside the
  // last backward; the loss is the mean over dp M b examples. Every worker
  // within 1e-5 of one worker on the whole batch, with tensor parallelism,
  // ZeRO-1 and recomputation on top; K = 1..8 and M = 2, 3.
  const int b = 2, steps = 2;
  for (const char* name : {"tiny-cnn", "tiny-gpt"}) {
    const auto net = presetNetwork(name);
    for (int k : workerCounts(1))
      for (int m : {2, 3}) {
        if (k > 4 && m == 3)
          continue;
        INFO(name << " K = " << k << " M = " << m);
        const auto ref = oneWorker(net, k * m * b, steps);
        auto sc = test::runScenario(Strategy::kRing, k, b, Optimizer::kMomentum);
        sc.options.microbatches = m;
        const auto run = checkPsAgainstOneWorker(net, sc, steps, ref);
        CHECK(run.measured.throughput * run.measured.step.value() == Approx(k * m * b));
      }
  }
  struct Case {
    int dp, tp, zero;
    Recompute recompute;
    bool sp;
  };
  for (const Case c :
       {Case{2, 2, 0, Recompute::kNone, false}, Case{1, 2, 1, Recompute::kFull, true},
        Case{3, 2, 1, Recompute::kSelective, false}}) {
    const auto net = tensorParallelGpt();
    INFO("dp " << c.dp << " x tp " << c.tp << " ZeRO-" << c.zero << " " << toString(c.recompute)
               << " sp " << c.sp);
    const int m = 3;
    const auto ref = oneWorker(net, c.dp * m * b, steps);
    auto sc = test::runScenario(Strategy::kRing, c.dp * c.tp, b, Optimizer::kMomentum);
    sc.options.tp = c.tp;
    sc.options.sequenceParallel = c.sp;
    sc.options.zero = c.zero;
    sc.options.recompute = c.recompute;
    sc.options.microbatches = m;
    std::vector<std::vector<float>> params;
    const auto options = test::runOptions(steps, Optimizer::kMomentum);
    const auto run = exec::runThreads(lowerToPlan(net, sc), net, options, &params);
    test::checkSharesAgainstOneWorker(net, c.tp, params, ref.parameters, Optimizer::kMomentum,
                                      options.learningRate);
    CHECK(run.steps.back().loss == Approx(ref.steps.back().loss).epsilon(1e-4));
  }
}

namespace {

// Each worker of a pipeline holds the whole model but runs and updates only
// its stage's layers (and, on the stage of an fc tied to an embedding on
// another, the copy of that embedding's token table): those elements of
// every worker, at its tensor-parallel share, within 1e-5 of one worker's
// (`ref`), and every element of the model held by some worker.
void checkStagesAgainstOneWorker(const Network& net, const Plan& plan,
                                 const std::vector<std::vector<float>>& params,
                                 const std::vector<float>& ref, Optimizer optimizer, float lr) {
  const int tp = std::max(1, plan.scenario.options.tp);
  REQUIRE(params.size() == static_cast<size_t>(plan.scenario.workers));
  std::vector<char> held(ref.size(), 0);
  for (size_t w = 0; w < params.size(); ++w) {
    nn::ModelOptions o;
    o.tensorParallel = {tp, static_cast<int>(w % size_t(tp))};
    o.initializeParameters = false;
    const nn::Model share(net, o);
    const auto kept = test::keptByRank(net, plan, static_cast<int>(w));
    REQUIRE(params[w].size() == kept.size());
    std::vector<float> whole = ref;
    for (size_t i = 0; i < kept.size(); ++i)
      if (kept[i]) {
        const auto j = static_cast<size_t>(share.wholeParameterIndex(static_cast<int64_t>(i)));
        REQUIRE(j < ref.size());
        whole[j] = params[w][i];
        held[j] = 1;
      }
    INFO("worker " << w);
    test::checkSameWeights(whole, ref, optimizer, lr);
  }
  CHECK(std::count(held.begin(), held.end(), 0) == 0);
}

}  // namespace

TEST_CASE("a pipeline's stages together equal one worker with batch dp M b", "[exec][pipeline]") {
  // --pp P: each stage's workers run its layers in the schedule's order
  // (gpipe, 1f1b, interleaved), every micro-batch in its own activation
  // slot, the boundary tensors and their gradients sent between stages as
  // the Plan's p2p transfers say, the gradients accumulated over the M
  // micro-batches and synchronised over the replicas, a tied table's two
  // copies summed. After 2 steps every stage's weights within 1e-5 of one
  // worker with batch dp M b, and the same loss. K = dp tp P from 2 to 8,
  // primes included; with tensor and sequence parallelism, ZeRO-1,
  // recomputation, Adam; ranks tp,pp,dp and (--placement) tp,dp,pp.
  struct Case {
    const char* net;
    int dp, tp, pp, m;
    PipelineSchedule schedule;
    int v;
    int zero;
    Recompute recompute;
    bool sp;
    Optimizer optimizer;
    Placement placement = Placement::kTpPpDp;
    AllreduceAlgorithm sync = AllreduceAlgorithm::kRing;
  };
  const auto k1f1b = PipelineSchedule::k1f1b, gpipe = PipelineSchedule::kGpipe,
             interleaved = PipelineSchedule::kInterleaved;
  const auto none = Recompute::kNone;
  const auto momentum = Optimizer::kMomentum, adam = Optimizer::kAdam;
  const Case cases[] = {
      {"tiny-gpt", 1, 1, 2, 3, k1f1b, 1, 0, none, false, momentum},
      {"tiny-gpt", 1, 1, 3, 4, k1f1b, 1, 0, none, false, adam},
      {"tiny-gpt", 1, 1, 5, 5, gpipe, 1, 0, none, false, momentum},
      {"tiny-cnn", 1, 1, 7, 3, k1f1b, 1, 0, none, false, momentum},
      {"tiny-cnn", 2, 1, 4, 3, gpipe, 1, 0, none, false, momentum},
      {"tiny-cnn", 3, 1, 2, 2, k1f1b, 1, 0, none, false, momentum},
      {"tiny-gpt", 1, 1, 2, 4, interleaved, 2, 0, none, false, adam},
      {"tiny-llama", 3, 1, 2, 2, interleaved, 2, 0, none, false, momentum},
      {"tiny-gpt", 2, 1, 2, 3, k1f1b, 1, 0, none, false, adam},
      {"tiny-llama", 2, 1, 3, 3, k1f1b, 1, 1, none, false, adam},
      {"tiny-gpt", 1, 1, 3, 3, k1f1b, 1, 0, Recompute::kSelective, false, momentum},
      {"tp-gpt", 2, 2, 2, 3, k1f1b, 1, 1, Recompute::kFull, true, adam},
      {"tp-gpt", 1, 2, 3, 2, k1f1b, 1, 0, none, false, momentum},
      // A stage's replicas side by side, the stages outermost.
      {"tiny-gpt", 2, 1, 2, 3, k1f1b, 1, 0, none, false, adam, Placement::kTpDpPp},
      {"tiny-cnn", 3, 1, 2, 2, gpipe, 1, 0, none, false, momentum, Placement::kTpDpPp},
      {"tiny-llama", 2, 1, 3, 3, k1f1b, 1, 1, none, false, adam, Placement::kTpDpPp},
      {"tp-gpt", 2, 2, 2, 3, k1f1b, 1, 1, Recompute::kFull, true, adam, Placement::kTpDpPp},
      // The data-parallel groups' double binary trees (--allreduce tree).
      {"tiny-gpt", 3, 1, 2, 3, k1f1b, 1, 0, none, false, adam, Placement::kTpPpDp,
       AllreduceAlgorithm::kTree},
      {"tp-gpt", 2, 2, 2, 3, k1f1b, 1, 0, none, true, momentum, Placement::kTpDpPp,
       AllreduceAlgorithm::kTree},
      {"tp-gpt", 3, 2, 1, 2, k1f1b, 1, 0, none, false, momentum, Placement::kTpPpDp,
       AllreduceAlgorithm::kTree},
  };
  const int b = 2, steps = 2;
  for (const Case& c : cases) {
    const auto net = std::string(c.net) == "tp-gpt" ? tensorParallelGpt() : presetNetwork(c.net);
    INFO(c.net << " dp " << c.dp << " x tp " << c.tp << " x pp " << c.pp << ", M " << c.m << " "
               << toString(c.schedule) << " V " << c.v << ", ZeRO-" << c.zero << ", --recompute "
               << toString(c.recompute) << ", sp " << c.sp << ", " << toString(c.optimizer)
               << ", ranks " << toString(c.placement) << ", allreduce " << toString(c.sync));
    const auto ref = oneWorker(net, c.dp * c.m * b, steps, c.optimizer);
    auto sc = test::runScenario(Strategy::kRing, c.dp * c.tp * c.pp, b, c.optimizer);
    sc.options.tp = c.tp;
    sc.options.pp = c.pp;
    sc.options.microbatches = c.m;
    sc.options.schedule = c.schedule;
    sc.options.virtualStages = c.v;
    sc.options.zero = c.zero;
    sc.options.recompute = c.recompute;
    sc.options.sequenceParallel = c.sp;
    sc.options.placement = c.placement;
    sc.options.gradientSync = c.sync;
    const Plan plan = lowerToPlan(net, sc);
    // The gradient syncs run as the option says.
    const bool trees = std::any_of(plan.collectives.begin(), plan.collectives.end(),
                                   [](const Collective& x) { return x.algorithm == "tree"; });
    CHECK(trees == (c.sync == AllreduceAlgorithm::kTree));
    // The first layer runs on stage 0: ranks (d pp + 0) tp + i, or with
    // tp,dp,pp the first tp dp ranks.
    for (const auto& t : plan.tasks)
      if (t.kind == TaskKind::kCompute && t.layer == 0)
        CHECK((c.placement == Placement::kTpDpPp ? t.worker / (c.tp * c.dp)
                                                 : t.worker / c.tp % c.pp) == 0);
    std::vector<std::vector<float>> params;
    const auto options = test::runOptions(steps, c.optimizer);
    const auto run = exec::runThreads(plan, net, options, &params);
    checkStagesAgainstOneWorker(net, plan, params, ref.parameters, c.optimizer,
                                options.learningRate);
    // The loss is the last stage's, over the global batch of dp M b.
    CHECK(run.steps.back().loss == Approx(ref.steps.back().loss).epsilon(1e-4));
    CHECK(run.measured.throughput * run.measured.step.value() == Approx(c.dp * c.m * b));
  }
  {
    // Stages where the user cuts (--stage-starts): the embedding alone,
    // then a block each (the last with the head); Adam.
    const auto net = presetNetwork("tiny-gpt");
    const auto ref = oneWorker(net, 4 * b, steps, Optimizer::kAdam);
    auto sc = test::runScenario(Strategy::kRing, 3, b, Optimizer::kAdam);
    sc.options.pp = 3;
    sc.options.microbatches = 4;
    sc.options.stageStarts = {"h.1", "h.2"};
    const Plan plan = lowerToPlan(net, sc);
    for (const auto& t : plan.tasks)
      if (t.kind == TaskKind::kCompute && t.layer == 0)
        CHECK(t.worker == 0);
    std::vector<std::vector<float>> params;
    const auto options = test::runOptions(steps, Optimizer::kAdam);
    const auto run = exec::runThreads(plan, net, options, &params);
    checkStagesAgainstOneWorker(net, plan, params, ref.parameters, Optimizer::kAdam,
                                options.learningRate);
    CHECK(run.steps.back().loss == Approx(ref.steps.back().loss).epsilon(1e-4));
  }
  // ZeRO with a table tied across stages is refused, naming --zero.
  auto sc = test::runScenario(Strategy::kRing, 4, b, Optimizer::kMomentum);
  sc.options.pp = 2;
  sc.options.zero = 1;
  const auto net = presetNetwork("tiny-gpt");
  CHECK_THROWS_WITH(exec::runThreads(lowerToPlan(net, sc), net, test::runOptions(1)),
                    Catch::Contains("the executor runs ZeRO with --pp only on networks without "
                                    "tied tables; 'tiny-gpt' shares"));
}

TEST_CASE("sequence parallelism draws one worker's dropout masks at each worker's positions",
          "[exec][tp]") {
  // dp = 1: every worker of the group holds the global batch's rows, so
  // with dropout on (tp-gpt's blocks: 0.1 after attention and after the
  // MLP) the masks are one worker's only if each worker's T / t positions
  // draw the whole layer's elements there. Without sequence parallelism
  // too (every replicated layer whole on each worker).
  const auto net = tensorParallelGpt();
  const int b = 4, steps = 3;
  auto options = test::runOptions(steps);
  options.dropout = true;
  const auto ref =
      exec::runThreads(lowerToPlan(net, test::runScenario(Strategy::kRing, 1, b)), net, options);
  for (int tp : {2, 3, 4})
    for (bool sp : {false, true}) {
      INFO("tp " << tp << (sp ? " with sp" : ""));
      auto sc = test::runScenario(Strategy::kRing, tp, b);
      sc.options.tp = tp;
      sc.options.sequenceParallel = sp;
      std::vector<std::vector<float>> params;
      const auto run = exec::runThreads(lowerToPlan(net, sc), net, options, &params);
      test::checkSharesAgainstOneWorker(net, tp, params, ref.parameters, Optimizer::kMomentum,
                                        options.learningRate);
      CHECK(run.steps.back().loss == Approx(ref.steps.back().loss).epsilon(1e-4));
    }
}

TEST_CASE("a tensor-parallel run refuses what it cannot split, naming the layer or option",
          "[exec][tp][errors]") {
  // Heads that the group does not divide; positions that sequence
  // parallelism cannot split.
  const auto net = presetNetwork("tiny-gpt");  // T 32
  auto sc = test::runScenario(Strategy::kRing, 3, 2);
  sc.options.tp = 3;
  CHECK_THROWS_WITH(exec::runThreads(lowerToPlan(net, sc), net, test::runOptions(1)),
                    Catch::Contains("4 heads") && Catch::Contains("3 workers"));
  sc.options.tp = 2;
  sc.workers = 2;
  sc.options.sequenceParallel = true;
  CHECK_NOTHROW(exec::checkRunnable(net, sc, exec::Device::kCpu));
  nn::ModelOptions mo;
  mo.tensorParallel = {4, 0, true};
  const auto odd = test::loadNetworkText("strata-tp-test", "odd-positions", R"(
name: odd-positions
input: {channels: 1, height: 10, width: 1}
layers:
  - {name: wte, kind: embedding, vocab: 64, outputs: 32, positions: 10}
  - {name: h, kind: transformer, heads: 4, hidden: 64, repeat: 1}
  - {name: ln_f, kind: layernorm}
  - {name: head, kind: fc, outputs: 64, flatten: false, bias: false, tied: wte}
  - {name: loss, kind: softmax}
)");
  CHECK_THROWS_WITH(nn::Model(odd, mo),
                    Catch::Contains("10 positions") && Catch::Contains("4 workers"));
}

TEST_CASE("two-level ps (nodes of G workers) equals one worker with batch K b, every worker alike",
          "[exec][ps]") {
  // Level 1 sums into each node's leader, level 2 across the leaders (the
  // servers), then back: other sums' order than one level, so to 1e-5 of the
  // one-worker run, and bit for bit the same on every worker. G = 3 leaves a
  // smaller last node for most K.
  // Adam on K = 2, 5, 7: the leaders keep the moments of their shards.
  const auto net = presetNetwork("tiny-cnn");
  const int b = 4, steps = 3;
  for (Optimizer optimizer : test::kOptimizers) {
    for (int k : workerCounts(2)) {
      if (optimizer != Optimizer::kMomentum && k != 2 && k != 5 && k != 7)
        continue;
      const auto ref = oneWorker(net, k * b, steps, optimizer);
      for (int g : {2, 3}) {
        INFO("K = " << k << " G = " << g << " " << toString(optimizer));
        auto sc = test::runScenario(Strategy::kPs, k, b, optimizer);
        sc.options.psNode = g;
        checkPsAgainstOneWorker(net, sc, steps, ref);
      }
    }
  }
}

TEST_CASE("ps on N dedicated servers equals one worker with batch K b, every worker alike",
          "[exec][ps][servers]") {
  // Ranks K..K+N-1 are the servers: worker w pushes chunk j of N of each key
  // to server j, which sums the K chunks from zero, updates its chunk (its
  // own weights and momentum) and sends it back to every worker. Sums in
  // another order than one worker, so to 1e-5; every worker bit for bit
  // alike. N = 3 and 5: more servers than some K, chunks that do not
  // divide the keys.
  // Adam on K = 2, 5, 7: each server keeps the moments of its chunk.
  const auto net = presetNetwork("tiny-cnn");
  const int b = 4, steps = 3;
  for (Optimizer optimizer : test::kOptimizers) {
    for (int k : workerCounts(2)) {
      if (optimizer != Optimizer::kMomentum && k != 2 && k != 5 && k != 7)
        continue;
      const auto ref = oneWorker(net, k * b, steps, optimizer);
      for (int n : {1, 3, 5}) {
        INFO("K = " << k << " N = " << n << " " << toString(optimizer));
        auto sc = test::runScenario(Strategy::kPs, k, b, optimizer);
        sc.options.psServers = n;
        REQUIRE(lowerToPlan(net, sc, steps).servers == n);
        const auto run = checkPsAgainstOneWorker(net, sc, steps, ref);
        // The workers' figures only: a step's push is the whole gradient, its
        // pull the whole model.
        REQUIRE(run.measured.workers.size() == static_cast<size_t>(k));
        for (const auto& w : run.measured.workers) {
          CHECK(w.sent.value() == Approx(double(net.totalParams()) * sizeof(float)).epsilon(1e-9));
          CHECK(w.received.value() == w.sent.value());
        }
      }
    }
  }
}

TEST_CASE("ps on dedicated servers with staleness S: the sharded servers' delayed SGD",
          "[exec][ps][servers][staleness]") {
  // Adam too: the servers' own weights keep Adam's moments beside them.
  const auto net = presetNetwork("tiny-cnn");
  const int b = 5, steps = 6;
  for (Optimizer optimizer : {Optimizer::kMomentum, Optimizer::kAdam}) {
    const auto options = test::runOptions(steps, optimizer);
    for (int k : {2, 3}) {
      for (int stale : {1, 2}) {
        INFO("K = " << k << " S = " << stale << " " << toString(optimizer));
        auto sc = test::runScenario(Strategy::kPs, k, b, optimizer);
        sc.options.staleness = stale;
        std::vector<std::vector<float>> sharded, served, again;
        exec::runThreads(lowerToPlan(net, sc, steps), net, options, &sharded);
        sc.options.psServers = 2;
        const auto plan = lowerToPlan(net, sc, steps);
        const auto run = exec::runThreads(plan, net, options, &served);
        exec::runThreads(plan, net, options, &again);
        CHECK(served == again);
        for (const auto& p : served) {
          CHECK(p == served[0]);
          test::checkSameWeights(p, sharded[0], optimizer, options.learningRate);
        }
        CHECK(run.stalenessSeen <= stale);
      }
    }
  }
}

TEST_CASE("ps with staleness S: delayed SGD, the same bits every run, never more than S ahead",
          "[exec][ps][staleness]") {
  // tiny-gpt: its tied output layer writes the embedding's gradient, which
  // must wait for the step before's push of the embedding's key.
  for (const char* name : {"tiny-cnn", "tiny-gpt"}) {
    INFO(name);
    const auto net = presetNetwork(name);
    const int b = name == std::string("tiny-gpt") ? 2 : 5, steps = 6;
    for (int k : {2, 3, 5}) {
      std::vector<std::vector<float>> sync;
      exec::runThreads(lowerToPlan(net, test::runScenario(Strategy::kPs, k, b), steps), net,
                       test::runOptions(steps), &sync);
      for (int stale : {1, 2}) {
        INFO("K = " << k << " S = " << stale);
        auto sc = test::runScenario(Strategy::kPs, k, b);
        sc.options.staleness = stale;
        const auto plan = lowerToPlan(net, sc, steps);
        std::vector<std::vector<float>> first, second;
        const auto run = exec::runThreads(plan, net, test::runOptions(steps), &first);
        exec::runThreads(plan, net, test::runOptions(steps), &second);
        // Step s uses step s-1-S's weights whatever the timing: reproducible,
        // and every worker ends with the same weights.
        CHECK(first == second);
        for (const auto& p : first)
          CHECK(p == first[0]);
        CHECK(first[0] != sync[0]);  // not synchronous SGD
        CHECK(run.stalenessSeen >= 0);
        CHECK(run.stalenessSeen <= stale);
        for (const auto& st : run.steps)
          CHECK(std::isfinite(st.loss));
      }
    }
  }
}

TEST_CASE("ps with staleness S >= steps - 1 never uses a pull: the weights stay the initial ones",
          "[exec][ps][staleness]") {
  // Step s's forward uses the pull of step s - 1 - S; with S = steps - 1 that
  // is before step 0 for every step: the model keeps its initial weights
  // while the servers train theirs.
  const auto net = presetNetwork("tiny-cnn");
  const int steps = 3;
  auto sc = test::runScenario(Strategy::kPs, 3, 4);
  sc.options.staleness = steps - 1;
  const auto opt = test::runOptions(steps);
  std::vector<std::vector<float>> params;
  exec::runThreads(lowerToPlan(net, sc, steps), net, opt, &params);
  nn::ModelOptions mo;
  mo.seed = opt.seed;
  nn::Model initial(net, mo);
  const auto p0 = initial.allParameters();
  for (const auto& p : params)
    CHECK(p == std::vector<float>(p0.begin(), p0.end()));
}

namespace {

// The cores the calling thread may run on.
std::vector<int> thisThreadCores() {
  cpu_set_t set;
  CPU_ZERO(&set);
  REQUIRE(pthread_getaffinity_np(pthread_self(), sizeof(set), &set) == 0);
  std::vector<int> ids;
  for (int c = 0; c < CPU_SETSIZE; ++c)
    if (CPU_ISSET(c, &set))
      ids.push_back(c);
  return ids;
}

// The host's copies and sums, noting the cores of every thread that calls
// them (a worker's communication lane: its sends, receives and sums).
class AffinityOps final : public exec::BufferOps {
 public:
  std::string name() const override { return "affinity"; }
  void copy(void* dst, const void* src, std::size_t bytes) override {
    note();
    exec::hostOps().copy(dst, src, bytes);
  }
  void add(std::span<float> dst, std::span<const float> src) override {
    note();
    exec::hostOps().add(dst, src);
  }
  void* allocate(std::size_t bytes) override { return exec::hostOps().allocate(bytes); }
  void deallocate(void* p, std::size_t bytes) noexcept override {
    exec::hostOps().deallocate(p, bytes);
  }
  std::set<std::vector<int>> seen() {
    std::lock_guard lock(mutex_);
    return seen_;
  }

 private:
  void note() {
    auto cores = thisThreadCores();
    std::lock_guard lock(mutex_);
    seen_.insert(std::move(cores));
  }
  std::mutex mutex_;
  std::set<std::vector<int>> seen_;
};

}  // namespace

TEST_CASE("workers run as threads are bound to cores of their own when they fit, bit for bit",
          "[exec][binding]") {
  // --bind-to: each worker's compute thread (which builds its backend) and
  // communication thread (which copies and sums its messages) on its own
  // core, or wherever the process may run; the weights the same bits.
  const auto ids = exec::usableCoreIds();
  if (ids.size() < 2) {
    WARN("one usable core: nothing to bind two workers to");
    return;
  }
  const auto net = presetNetwork("tiny-cnn");
  auto run = [&](int k, exec::CoreBinding binding, std::vector<std::vector<float>>* params,
                 std::vector<std::set<std::vector<int>>>& compute,
                 std::vector<std::set<std::vector<int>>>& comm) {
    const auto plan = lowerToPlan(net, test::runScenario(Strategy::kRing, k, 4));
    auto o = test::runOptions(2);
    o.threadsPerWorker = 1;
    o.binding = binding;
    std::vector<std::shared_ptr<AffinityOps>> ops;
    for (int w = 0; w < k; ++w)
      ops.push_back(std::make_shared<AffinityOps>());
    std::mutex m;
    compute.assign(static_cast<size_t>(k), {});
    o.backend = [&](int rank) {
      {
        std::lock_guard lock(m);
        compute[static_cast<size_t>(rank)].insert(thisThreadCores());
      }
      return exec::makeBackend(exec::Device::kCpu, "--device", 0, 1);
    };
    o.commOps = [&](int w) { return ops[static_cast<size_t>(w)]; };
    exec::runThreads(plan, net, o, params);
    comm.clear();
    for (const auto& x : ops)
      comm.push_back(x->seen());
  };
  std::vector<std::set<std::vector<int>>> compute, comm;
  std::vector<std::vector<float>> reference;
  for (auto binding :
       {exec::CoreBinding::kNone, exec::CoreBinding::kAuto, exec::CoreBinding::kCore}) {
    INFO("--bind-to " << exec::toString(binding));
    std::vector<std::vector<float>> params;
    run(2, binding, &params, compute, comm);
    for (size_t r = 0; r < 2; ++r) {
      const std::set<std::vector<int>> expected{
          binding == exec::CoreBinding::kNone ? ids : std::vector<int>{ids[r]}};
      CHECK(compute[r] == expected);
      CHECK(comm[r] == expected);
    }
    if (reference.empty())
      reference = params;
    else
      CHECK(params == reference);
  }
  // More workers than cores: auto leaves them where they were, core is
  // refused before anything runs.
  const int over = static_cast<int>(ids.size()) + 1;
  run(over, exec::CoreBinding::kAuto, nullptr, compute, comm);
  for (int r = 0; r < over; ++r)
    CHECK(compute[static_cast<size_t>(r)] == std::set<std::vector<int>>{ids});
  REQUIRE_THROWS_WITH(run(over, exec::CoreBinding::kCore, nullptr, compute, comm),
                      Catch::Contains("--bind-to: core needs " + std::to_string(over) + " cores (" +
                                      std::to_string(over) +
                                      " workers x 1 thread each), but this process may "
                                      "use " +
                                      std::to_string(ids.size())));
}

TEST_CASE(
    "with per-worker BufferOps (the device communicator's path) every strategy gives the "
    "host run's weights bit for bit, every sum through the ops",
    "[exec][ops]") {
  const auto net = presetNetwork("tiny-cnn");
  const int b = 5, steps = 3;  // 5: owt-c's round slices do not divide by most K
  for (int k : workerCounts(1)) {
    for (auto s : {Strategy::kNaive, Strategy::kRing, Strategy::kPs, Strategy::kOwtA,
                   Strategy::kOwtB, Strategy::kOwtC}) {
      INFO(toString(s) << " K = " << k);
      const auto plan = lowerToPlan(net, test::runScenario(s, k, b));
      std::vector<std::vector<float>> host, counted;
      exec::runThreads(plan, net, test::runOptions(steps), &host);
      test::CountingWorld world(k);
      auto o = test::runOptions(steps);
      o.commOps = [&](int w) { return world.ranks[static_cast<size_t>(w)]; };
      exec::runThreads(plan, net, o, &counted);
      CHECK(counted == host);
      int64_t added = 0, copied = 0, live = 0;
      for (const auto& ops : world.ranks) {
        added += ops->addedElements;
        copied += ops->copiedBytes;
        live += ops->liveBytes;
      }
      // K > 1 exchanges gradients and sums them (owt: at least the FC
      // activation gradients coming back): all through the workers' ops.
      CHECK((k == 1 || added > 0));
      CHECK((k == 1 || copied > 0));
      CHECK(live == 0);
    }
  }
}

namespace {
// Gathers the K ranks' parameters into the one-worker layout: data-parallel
// layers from rank 0, model-parallel fc layers as the concatenation of every
// rank's row slice.
std::vector<float> assembled(const Network& net, const std::vector<std::vector<float>>& perRank,
                             int k) {
  std::vector<float> out;
  std::vector<size_t> at(perRank.size(), 0);
  for (size_t l = 0; l < net.layers.size(); ++l) {
    const auto& layer = net.layers[l];
    if (!layer.hasWeights())
      continue;
    const bool sliced =
        static_cast<int>(l) >= net.modelParallelFrom && layer.kind == LayerKind::kFc;
    if (!sliced) {
      for (size_t r = 0; r < perRank.size(); ++r) {
        if (r == 0)
          out.insert(out.end(), perRank[r].begin() + long(at[r]),
                     perRank[r].begin() + long(at[r] + size_t(layer.params)));
        at[r] += size_t(layer.params);
      }
      continue;
    }
    // weights rows then bias entries of every slice.
    const int outputs = layer.outShape.c;
    // Inputs per row: the flattened input, or a per-position fc's channels.
    const int64_t in = layer.spec.flatten ? layer.inShape.elements() : layer.inShape.c;
    std::vector<float> weights, bias;
    for (int r = 0; r < k; ++r) {
      const int rows = nn::evenSlice(outputs, k, r).size();
      const auto& p = perRank[static_cast<size_t>(r)];
      const size_t base = at[static_cast<size_t>(r)];
      weights.insert(weights.end(), p.begin() + long(base),
                     p.begin() + long(base + size_t(rows * in)));
      if (layer.spec.bias)
        bias.insert(bias.end(), p.begin() + long(base + size_t(rows * in)),
                    p.begin() + long(base + size_t(rows * in + rows)));
      at[static_cast<size_t>(r)] += size_t(rows * in + (layer.spec.bias ? rows : 0));
    }
    out.insert(out.end(), weights.begin(), weights.end());
    out.insert(out.end(), bias.begin(), bias.end());
  }
  return out;
}
}  // namespace

TEST_CASE("owt-a/b/c with per-step FC update equal one worker with batch K b", "[exec][owt]") {
  // Adam and AdamW through owt-b (the sliced fc layers keep the moments of
  // their rows only), SGD with momentum through all three.
  const auto net = presetNetwork("tiny-cnn");
  const int steps = 3;
  for (Optimizer optimizer : test::kOptimizers) {
    for (int k : workerCounts(1)) {
      for (int b : {4, 5}) {  // 5 does not divide by most K (owt-c's round slices)
        const auto ref = oneWorker(net, k * b, steps, optimizer);
        for (auto s : {Strategy::kOwtA, Strategy::kOwtB, Strategy::kOwtC}) {
          if (optimizer != Optimizer::kMomentum && s != Strategy::kOwtB)
            continue;
          INFO(toString(s) << " K = " << k << " b = " << b << " " << toString(optimizer));
          std::vector<std::vector<float>> params;
          const auto options = test::runOptions(steps, optimizer);
          const auto run = exec::runThreads(lowerToPlan(net, test::runScenario(s, k, b, optimizer)),
                                            net, options, &params);
          test::checkSameWeights(assembled(net, params, k), ref.parameters, optimizer,
                                 options.learningRate);
          CHECK(run.steps.back().loss == Approx(ref.steps.back().loss).epsilon(1e-4));
        }
      }
    }
  }
}

TEST_CASE("owt-a/b/c on tiny-llama (its untied output layer model-parallel) equal one worker",
          "[exec][owt][llama]") {
  // The Llama blocks run data-parallel and the 512-way output layer and the
  // loss model-parallel: owt's activation exchange over positions of tokens.
  const auto net = presetNetwork("tiny-llama");
  REQUIRE(net.modelParallelFrom == net.find("lm_head"));
  const int steps = 2;
  for (int k : {1, 2, 3}) {
    for (int b : {2, 3}) {
      const auto ref = oneWorker(net, k * b, steps);
      for (auto s : {Strategy::kOwtA, Strategy::kOwtB, Strategy::kOwtC}) {
        INFO(toString(s) << " K = " << k << " b = " << b);
        std::vector<std::vector<float>> params;
        const auto options = test::runOptions(steps);
        const auto run =
            exec::runThreads(lowerToPlan(net, test::runScenario(s, k, b)), net, options, &params);
        test::checkSameWeights(assembled(net, params, k), ref.parameters, Optimizer::kMomentum,
                               options.learningRate);
        CHECK(run.steps.back().loss == Approx(ref.steps.back().loss).epsilon(1e-4));
      }
    }
  }
}

TEST_CASE("owt-b with per-round FC updates equals a sequential emulation of that rule",
          "[exec][owt]") {
  // One worker, batch K b, rows of worker r at [r b, (r+1) b): conv forward on
  // everything; then for each round r the FC layers run forward and backward
  // on rows of round r and update (gradient normalised by the global batch, as
  // in the executor); then conv backward on everything and the conv update.
  // Adam too: each round's FC update is one Adam step of those layers (their
  // own step counts), the conv layers one per step.
  const auto net = presetNetwork("tiny-cnn");
  const int steps = 3, b = 4;
  const int mp = net.modelParallelFrom;
  const int layers = static_cast<int>(net.layers.size());
  for (Optimizer optimizer : {Optimizer::kMomentum, Optimizer::kAdam})
    for (int k : {1, 2, 3, 5}) {
      INFO("K = " << k << " " << toString(optimizer));
      const auto opt = test::runOptions(steps, optimizer);
      const nn::UpdateRule rule{optimizer, opt.learningRate, opt.momentum, opt.weightDecay,
                                opt.beta1, opt.beta2,        opt.eps};
      auto sc = test::runScenario(Strategy::kOwtB, k, b, optimizer);
      sc.options.fcUpdate = FcUpdate::kRound;
      std::vector<std::vector<float>> params;
      exec::runThreads(lowerToPlan(net, sc), net, opt, &params);

      nn::ModelOptions mo;
      mo.seed = opt.seed;
      mo.dropout = false;
      nn::Model model(net, mo);
      model.setLossNormalizer(double(k) * b);
      const auto data = nn::SyntheticDataset::forNetwork(net, opt.seed);
      for (int s = 0; s < steps; ++s) {
        model.setStep(static_cast<uint64_t>(s));
        model.zeroGradients();
        auto& x = model.input(k * b);
        std::vector<int32_t> labels(static_cast<size_t>(k * b));
        data.fill(int64_t(s) * k * b, x.view(), labels);
        model.setLabels(labels);
        for (int l = 0; l < mp; ++l)
          model.forward(l);
        for (int r = 0; r < k; ++r) {
          const nn::ExampleRange rows{r * b, (r + 1) * b};
          for (int l = mp; l < layers; ++l)
            model.forward(l, rows);
          for (int l = layers - 1; l >= mp; --l) {
            if (net.layers[static_cast<size_t>(l)].hasWeights())
              model.backwardWeights(l, rows);
            model.backwardData(l, rows);
          }
          for (int l = mp; l < layers; ++l)
            if (net.layers[static_cast<size_t>(l)].hasWeights()) {
              model.update(l, rule);
              model.zeroGradients(l);
            }
        }
        for (int l = mp - 1; l >= 0; --l) {
          if (net.layers[static_cast<size_t>(l)].hasWeights())
            model.backwardWeights(l);
          if (!net.layers[static_cast<size_t>(l)].readsNetworkInput())
            model.backwardData(l);
        }
        for (int l = 0; l < mp; ++l)
          if (net.layers[static_cast<size_t>(l)].hasWeights())
            model.update(l, rule);
      }
      const auto p = model.allParameters();
      test::checkSameWeights(assembled(net, params, k), std::vector<float>(p.begin(), p.end()),
                             optimizer, opt.learningRate);
    }
}

TEST_CASE("a worker that throws ends every worker with its error, promptly", "[exec][faults]") {
  const auto net = presetNetwork("tiny-cnn");
  const auto plan = lowerToPlan(net, test::runScenario(Strategy::kRing, 4, 4));
  auto o = test::runOptions(5);
  o.failRank = 2;
  o.failStep = 1;
  const auto start = std::chrono::steady_clock::now();
  CHECK_THROWS_WITH(exec::runThreads(plan, net, o),
                    Catch::Contains("worker 2") && Catch::Contains("injected fault"));
  CHECK(std::chrono::steady_clock::now() - start < std::chrono::seconds(10));
}

TEST_CASE("after its first step a run allocates no more buffers: scratch and staging are kept",
          "[exec][memory]") {
  // A buffer per step or per message was, on a GPU with managed memory, a
  // cudaMallocManaged and a device-wide cudaFree (4 MB ring segments took
  // 0.7 ms instead of 30 us on an H100), and is still an allocation and a
  // wait for the stream (CudaDeviceMemory::allocate). So 2 steps and 10
  // steps of the same run allocate alike.
  const auto net = presetNetwork("tiny-cnn");
  for (int k : {1, 2, 3, 5}) {
    for (auto s : {Strategy::kNaive, Strategy::kRing, Strategy::kPs, Strategy::kOwtA,
                   Strategy::kOwtB, Strategy::kOwtC}) {
      INFO(toString(s) << " K = " << k);
      const auto plan = lowerToPlan(net, test::runScenario(s, k, 5));
      const auto allocations = [&](int steps) {
        const uint64_t before = nn::hostAllocations();
        exec::runThreads(plan, net, test::runOptions(steps));
        return nn::hostAllocations() - before;
      };
      const uint64_t two = allocations(2), ten = allocations(10);
      CHECK(two > 0);  // the model's buffers, at least
      if (s != Strategy::kPs) {
        CHECK(ten == two);
      } else {
        // A ps rank's jobs run in arrival order, so a source's scratch meets
        // the keys' sizes in an order that varies from run to run and grows
        // a varying number of times (K = 3: 99 to 111 buffers in all); a
        // buffer per transfer would add dozens every step.
        CHECK(ten <= two + two / 2);
      }
    }
  }
}

TEST_CASE("with per-worker BufferOps a worker that throws still ends every worker promptly",
          "[exec][faults][ops]") {
  const auto net = presetNetwork("tiny-cnn");
  const auto plan = lowerToPlan(net, test::runScenario(Strategy::kNaive, 5, 4));
  test::CountingWorld world(5);
  auto o = test::runOptions(5);
  o.commOps = [&](int w) { return world.ranks[static_cast<size_t>(w)]; };
  o.failRank = 3;
  o.failStep = 2;
  const auto start = std::chrono::steady_clock::now();
  CHECK_THROWS_WITH(exec::runThreads(plan, net, o),
                    Catch::Contains("worker 3") && Catch::Contains("injected fault"));
  CHECK(std::chrono::steady_clock::now() - start < std::chrono::seconds(10));
  for (const auto& ops : world.ranks)
    CHECK(ops->liveBytes == 0);  // staging freed on the way out
}

TEST_CASE("every conv-gradient sync algorithm of owt gives the one-worker weights", "[exec][owt]") {
  // Halving-doubling included: K = 3, 5, 6, 7 fold extra ranks in and out.
  const auto net = presetNetwork("tiny-cnn");
  const int b = 4, steps = 3;
  for (int k : workerCounts(2)) {
    const auto ref = oneWorker(net, k * b, steps);
    for (auto a : {AllreduceAlgorithm::kHalvingDoubling, AllreduceAlgorithm::kRing,
                   AllreduceAlgorithm::kNaive}) {
      INFO(toString(a) << " K = " << k);
      auto sc = test::runScenario(Strategy::kOwtA, k, b);
      sc.options.convSync = a;
      std::vector<std::vector<float>> params;
      exec::runThreads(lowerToPlan(net, sc), net, test::runOptions(steps), &params);
      CHECK(maxRelativeDifference(assembled(net, params, k), ref.parameters) < 1e-5);
    }
  }
}

TEST_CASE("every gradient allreduce the executor runs gives the one-worker weights",
          "[exec][scale]") {
  // The double binary tree (K = 2..8: mirrored for even K, shifted for odd),
  // halving-doubling (folds for 3, 5, 6, 7) and the direct all-to-all, as the
  // ring strategy's gradient allreduce; every worker within 1e-5 of one
  // worker with batch K b.
  const auto net = presetNetwork("tiny-cnn");
  const int b = 4, steps = 3;
  for (int k : workerCounts(2)) {
    const auto ref = oneWorker(net, k * b, steps);
    for (auto a : {AllreduceAlgorithm::kTree, AllreduceAlgorithm::kHalvingDoubling,
                   AllreduceAlgorithm::kDirect}) {
      INFO(toString(a) << " K = " << k);
      auto sc = test::runScenario(Strategy::kRing, k, b);
      sc.options.gradientSync = a;
      std::vector<std::vector<float>> params;
      const auto run =
          exec::runThreads(lowerToPlan(net, sc), net, test::runOptions(steps), &params);
      REQUIRE(params.size() == static_cast<size_t>(k));
      for (const auto& p : params)
        CHECK(maxRelativeDifference(p, ref.parameters) < 1e-5);
      CHECK(run.steps.back().loss == Approx(ref.steps.back().loss).epsilon(1e-4));
    }
  }
  // Element types: the CPU computes in fp32 only; CUDA runs tf32 and bf16,
  // not fp16 (no loss scaling), each refused naming --element and the device.
  {
    auto sc = test::runScenario(Strategy::kRing, 2, b);
    sc.options.element = ElementType::kBf16;
    CHECK_THROWS_WITH(exec::checkRunnable(net, sc),
                      Catch::StartsWith("--element: bf16 with --device cpu: the CPU executor "
                                        "computes in fp32 only"));
    CHECK_NOTHROW(exec::checkRunnable(net, sc, exec::Device::kCuda));
    sc.options.element = ElementType::kTf32;
    CHECK_NOTHROW(exec::checkRunnable(net, sc, exec::Device::kCuda));
    sc.options.element = ElementType::kFp16;
    CHECK_THROWS_WITH(exec::checkRunnable(net, sc, exec::Device::kCuda),
                      Catch::Contains("fp16 with --device cuda") &&
                          Catch::Contains("loss scaling") && Catch::Contains("--element bf16"));
    CHECK_THROWS_AS(exec::makeBackend(exec::Device::kCpu, "--device", 0, 1, ElementType::kBf16),
                    OptionError);
  }
  // Hierarchical and auto need nodes and a cluster: refused, naming --allreduce.
  for (auto a : {AllreduceAlgorithm::kHierarchical, AllreduceAlgorithm::kAuto}) {
    auto sc = test::runScenario(Strategy::kRing, 4, b);
    sc.options.gradientSync = a;
    CHECK_THROWS_WITH(exec::checkRunnable(net, sc),
                      Catch::StartsWith("--allreduce: the executor runs one level of workers"));
  }
}

TEST_CASE("measured traces keep every slice under Perfetto's import rules", "[exec][trace]") {
  // Real clocks: slices of one lane overlap (owt-b's broadcasts), receives
  // start before their sends, times fall anywhere within a nanosecond.
  const auto net = presetNetwork("tiny-cnn");
  for (auto s : {Strategy::kRing, Strategy::kOwtB}) {
    INFO(toString(s));
    const int k = 3;
    const auto plan = lowerToPlan(net, test::runScenario(s, k, 4));
    const auto r = exec::runThreads(plan, net, test::runOptions(2));
    REQUIRE_FALSE(r.timeline.slices.empty());
    std::ostringstream os;
    writeTrace(os, plan, net, r.measured, r.timeline);
    const auto check = test::checkTrace(os.str());
    for (const auto& p : check.problems)
      INFO(p);
    CHECK(check.ok());
    CHECK(check.slices == r.timeline.slices.size());  // nothing dropped
    CHECK(check.pids == std::set<int64_t>{1, 2, 3});
    CHECK(check.processNames.at(1) == "worker 0");
    CHECK(check.otherData.at("engine") == "executor");
    CHECK(check.flows > 0);
    // Some ranks: worker 1 alone has no arrows (their other ends are left out).
    TraceOptions one;
    one.ranks = {1};
    std::ostringstream os1;
    writeTrace(os1, plan, net, r.measured, r.timeline, one);
    const auto check1 = test::checkTrace(os1.str());
    CHECK(check1.ok());
    CHECK(check1.pids == std::set<int64_t>{2});
    CHECK(check1.flows == 0);
  }
}

TEST_CASE("run refuses more thread workers than its limit, before starting any", "[exec][limits]") {
  const auto net = presetNetwork("tiny-cnn");
  auto errorOf = [&](const Scenario& sc) {
    try {
      exec::checkThreadRun(net, sc);
    } catch (const OptionError& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  const Limits saved = limits();
  CHECK(errorOf(test::runScenario(Strategy::kRing, 64, 8)).empty());
  // The user's case: `run -k 1000` started 1,855 threads and 5.9 GB.
  const auto cores = std::max(1u, std::thread::hardware_concurrency());
  if (cores <= 32)
    CHECK_THAT(errorOf(test::runScenario(Strategy::kRing, 1000, 8)),
               Catch::StartsWith("--workers: 1000 workers would start 2000 threads in this "
                                 "process, over the limit of 64 workers") &&
                   Catch::EndsWith("raise the limit with --max-workers N (--allow-large lifts "
                                   "every limit)"));
  Limits l;
  l.maxThreadWorkers = 3;
  setLimits(l);
  const auto message = errorOf(test::runScenario(Strategy::kRing, 4, 8));
  std::string fromRun;
  try {
    exec::runThreads(lowerToPlan(net, test::runScenario(Strategy::kRing, 4, 8)), net,
                     test::runOptions(1));
  } catch (const OptionError& e) {
    fromRun = e.what();
  }
  setLimits(saved);
  CHECK_THAT(message, Catch::Contains("over the limit of 3 workers"));
  CHECK(fromRun == message);
}

TEST_CASE("a ps run's dedicated servers count against the thread limit", "[exec][limits]") {
  // `run -s ps --ps-servers 1024` started 1,026 threads pairs (4.35 GB).
  const auto net = presetNetwork("tiny-cnn");
  Scenario sc = test::runScenario(Strategy::kPs, 2, 8);
  const Limits saved = limits();
  Limits l;
  l.maxThreadWorkers = 8;
  setLimits(l);
  std::string message;
  sc.options.psServers = 6;  // 2 workers + 6 servers: at the limit
  CHECK_NOTHROW(exec::checkThreadRun(net, sc));
  sc.options.psServers = 7;
  try {
    exec::checkThreadRun(net, sc);
  } catch (const OptionError& e) {
    message = e.what();
  }
  setLimits(saved);
  CHECK_THAT(message, Catch::StartsWith("--ps-servers: 2 workers and 7 ps servers would start 18 "
                                        "threads in this process (two each), over the limit of "
                                        "8 workers and servers"));
}

TEST_CASE("run refuses a batch that cannot fit in this machine's memory", "[exec][limits]") {
  const auto net = presetNetwork("alexnet-owt");
  // 8 workers x 1,000,000 examples: activations alone are terabytes.
  const auto sc = test::runScenario(Strategy::kRing, 8, 1'000'000);
  CHECK(exec::runMemoryLowerBound(net, sc) > 1e13);
  try {
    exec::checkThreadRun(net, sc);
    FAIL("no error");
  } catch (const OptionError& e) {
    CHECK_THAT(e.what(), Catch::StartsWith("--batch: 8 workers x 1000000 examples of alexnet-owt "
                                           "need at least ") &&
                             Catch::Contains("more than the ") && Catch::Contains(" available (") &&
                             Catch::Contains(availableMemory().what));
  }
  // Parameters, gradients and momentum of one worker at least.
  CHECK(exec::runMemoryLowerBound(net, test::runScenario(Strategy::kRing, 1, 1)) >
        3 * 4 * double(net.totalParams()));
}

TEST_CASE("learning rate and momentum must be finite and in range", "[exec][errors]") {
  const auto net = presetNetwork("tiny-cnn");
  const auto plan = lowerToPlan(net, test::runScenario(Strategy::kRing, 1, 2));
  auto errorOf = [&](float lr, float momentum) {
    auto o = test::runOptions(1);
    o.learningRate = lr;
    o.momentum = momentum;
    try {
      exec::runThreads(plan, net, o);
    } catch (const OptionError& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  CHECK(errorOf(HUGE_VALF, 0.9f) == "--lr: must be in (0, 1000000], got inf");
  CHECK(errorOf(std::nanf(""), 0.9f) == "--lr: must be in (0, 1000000], got nan");
  CHECK(errorOf(0.01f, std::nanf("")) == "--momentum: must be in [0, 1), got nan");
  CHECK(errorOf(0.01f, 0.9f).empty());
}

// The GPU path without a GPU: every rank's buffers in memory that says the
// host may not address it (device_like_memory.h), so a host-span accessor
// left on any strategy's path (Model::allParameters, softmaxStats, Tensor::at,
// a std::fill on a gradient span, ...) throws InvariantError and fails the
// run. The run must hold the bits of the same run on host memory.
TEST_CASE("every strategy runs on memory the host cannot address, bit for bit as on host memory",
          "[exec][memory]") {
  struct Case {
    const char* network;
    Strategy strategy;
    int psServers = 0;
    FcUpdate fcUpdate = FcUpdate::kStep;
  };
  std::vector<Case> cases;
  for (Strategy s : kAllStrategies)
    cases.push_back({"tiny-cnn", s});
  cases.push_back({"tiny-cnn", Strategy::kOwtB, 0, FcUpdate::kRound});
  cases.push_back({"tiny-cnn", Strategy::kPs, 1});
  // A language model: token ids as the input, a label per position.
  for (Strategy s : {Strategy::kNaive, Strategy::kRing, Strategy::kPs})
    cases.push_back({"tiny-gpt", s});
  const int b = 3, steps = 2;
  for (const Case& c : cases) {
    const auto net = presetNetwork(c.network);
    for (int k = 1; k <= 4; ++k) {
      if (c.psServers > 0 && k == 1)
        continue;  // dedicated servers serve two workers or more
      INFO(c.network << " " << toString(c.strategy) << " K = " << k << " servers " << c.psServers);
      auto sc = test::runScenario(c.strategy, k, b);
      sc.options.psServers = c.psServers;
      sc.options.fcUpdate = c.fcUpdate;
      const Plan plan = lowerToPlan(net, sc, steps);
      std::vector<std::vector<float>> host, device;
      const auto onHost = exec::runThreads(plan, net, test::runOptions(steps), &host);
      test::DeviceLikeMemory memory;
      auto options = test::runOptions(steps);
      options.backend = [&](int) { return test::deviceLikeBackend(memory); };
      const auto onDevice = exec::runThreads(plan, net, options, &device);
      CHECK(device == host);
      REQUIRE(onDevice.steps.size() == onHost.steps.size());
      for (size_t i = 0; i < onHost.steps.size(); ++i)
        CHECK(onDevice.steps[i].loss == onHost.steps[i].loss);
      // The host met the buffers only through the copies.
      CHECK(memory.uploads > 0);
      CHECK(memory.downloads > 0);
    }
  }
}

TEST_CASE("a GPU run is sized against the memory free on its GPU, not its total",
          "[exec][limits][memory]") {
  constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;
  const exec::GpuMemory gpu{1, "NVIDIA H100 80GB HBM3", 10 * kGiB, 80 * kGiB};
  // 2 x 4 GiB fit in 10 GiB free; 2 x 5 GiB fill it exactly, which fits.
  CHECK(exec::gpuMemoryShortfall(gpu, 4 * kGiB, 2, "alexnet", 128).empty());
  CHECK(exec::gpuMemoryShortfall(gpu, 5 * kGiB, 2, "alexnet", 128).empty());
  // 3 x 4 GiB = 12 GiB do not, though the GPU has 80 GiB in all.
  const std::string why = exec::gpuMemoryShortfall(gpu, 4 * kGiB, 3, "alexnet", 128);
  CHECK_THAT(why, Catch::Contains("3 workers x 128 examples of alexnet need at least 12.00 GiB "
                                  "of device memory on GPU 1 (NVIDIA H100 80GB HBM3)"));
  CHECK_THAT(why, Catch::Contains("more than the 10.00 GiB free there now (of 80.00 GiB"));
  CHECK_THAT(why, Catch::Contains("--batch"));
  CHECK_THAT(exec::gpuMemoryShortfall(gpu, 10.5 * kGiB, 1, "gpt3-xl", 8),
             Catch::StartsWith("1 worker x 8 examples of gpt3-xl need at least 10.50 GiB"));

  // One worker's device memory: runMemoryLowerBound's one-worker bound less
  // its host copy of the parameters, whatever K and the ps servers are.
  const auto net = presetNetwork("tiny-cnn");
  auto sc = test::runScenario(Strategy::kPs, 4, 16);
  sc.options.psServers = 1;
  auto one = test::runScenario(Strategy::kPs, 1, 16);
  const double expected =
      exec::runMemoryLowerBound(net, one) - double(net.totalParams()) * sizeof(float);
  CHECK(exec::gpuWorkerMemoryLowerBound(net, sc) == expected);
  CHECK(exec::gpuWorkerMemoryLowerBound(net, one) == expected);
  // Three copies of the parameters and 2 b outputs: more than those alone.
  double outputs = 0;
  for (const auto& l : net.layers)
    outputs += double(l.outShape.elements());
  CHECK(expected > (3 * double(net.totalParams()) + 2 * 16 * outputs) * sizeof(float));
}

TEST_CASE("a bf16 GPU run counts the backend's bf16 scratch in its device memory",
          "[exec][limits][memory]") {
  // tiny-cnn at b = 4, by hand: conv1 3x32x32 -> 16x32x32 (432 weights,
  // reads the input: no dx), conv2 16x16x16 -> 32x16x16 (4608 weights),
  // fc3 2048 -> 128 (262144 weights), fc4 128 -> 10. Slot 0 (x, or dy of a
  // backward data): conv2's dy 4 x 8192 = 32768; slot 1 (weights, or dy of
  // a backward weights): fc3's 262144 weights; slot 2 (a conv's result):
  // conv1's y 4 x 16384 = 65536. 360448 bf16 elements: 720896 bytes.
  const auto net = presetNetwork("tiny-cnn");
  auto sc = test::runScenario(Strategy::kRing, 2, 4);
  CHECK(exec::bf16ScratchBytes(net, sc) == 0);  // fp32: no scratch
  sc.options.element = ElementType::kTf32;
  CHECK(exec::bf16ScratchBytes(net, sc) == 0);
  sc.options.element = ElementType::kBf16;
  CHECK(exec::bf16ScratchBytes(net, sc) == 720896);
  auto fp32 = sc;
  fp32.options.element = ElementType::kFp32;
  CHECK(exec::gpuWorkerMemoryLowerBound(net, sc) ==
        exec::gpuWorkerMemoryLowerBound(net, fp32) + 720896);
  // owt-a at K = 2: fc3 (the model-parallel part's first layer) holds 64 of
  // its 128 rows, 131072 weights: slot 1 is that, 32768 + 131072 + 65536 =
  // 229376 elements, 458752 bytes.
  REQUIRE(net.modelParallelFrom == net.find("fc3"));
  sc.strategy = Strategy::kOwtA;
  CHECK(exec::bf16ScratchBytes(net, sc) == 458752);
}

TEST_CASE("a bf16 GPU run counts attention's bf16 scratch (the scores) too",
          "[exec][limits][memory]") {
  // tiny-gpt at b = 2 (f = 64, T = 32, 4 heads, vocabulary 512), by hand.
  // Slot 0: the tied lm_head's dy, 2 x 32 x 512 = 32768 (attention's QKV
  // is 3 x 2 x 64 x 32 = 12288). Slot 1: lm_head's weights (the token
  // table, 512 x 64) and its dy, 32768 (attention's Wqkv and Wo, 4 x 64^2 =
  // 16384). Slot 2: attention's scores, 2 x 4 x 32^2 = 8192. 73728 bf16
  // elements: 147456 bytes (131072 without the scores).
  const auto net = presetNetwork("tiny-gpt");
  auto sc = test::runScenario(Strategy::kRing, 1, 2);
  sc.options.element = ElementType::kBf16;
  CHECK(exec::bf16ScratchBytes(net, sc) == 147456);
}

TEST_CASE("on memory the host cannot address a run also stops allocating after its first step",
          "[exec][memory]") {
  // Device memory's allocate waits for the stream, so an allocation per step
  // (a host copy made through a fresh buffer, say) would cost the step its
  // asynchrony. The device-like memory allocates from host memory, so
  // hostAllocations() counts its buffers too.
  const auto net = presetNetwork("tiny-cnn");
  for (int k : {1, 3}) {
    for (auto s :
         {Strategy::kNaive, Strategy::kRing, Strategy::kOwtA, Strategy::kOwtB, Strategy::kOwtC}) {
      INFO(toString(s) << " K = " << k);
      const auto plan = lowerToPlan(net, test::runScenario(s, k, 5));
      test::DeviceLikeMemory memory;
      const auto allocations = [&](int steps) {
        auto options = test::runOptions(steps);
        options.backend = [&](int) { return test::deviceLikeBackend(memory); };
        const uint64_t before = nn::hostAllocations();
        exec::runThreads(plan, net, options);
        return nn::hostAllocations() - before;
      };
      const uint64_t two = allocations(2), six = allocations(6);
      CHECK(two > 0);
      CHECK(six == two);
    }
  }
}
