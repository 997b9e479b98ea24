// The executor on GPUs (CUDA builds; skipped, exit 77, without a usable GPU):
// the device communicator's collectives on device memory, every strategy with
// K = 1..4 workers on the GPUs (round-robin, so several share one GPU when
// there are fewer) against one worker with batch K b, the GPU run against the
// CPU run, and a failing worker ending the others.
#define CATCH_CONFIG_RUNNER
#include <algorithm>
#include <catch2/catch.hpp>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <tuple>
#include <vector>

#include "../../model/helpers.h"
#include "run_helpers.h"
#include "strata/exec/comm/collectives.h"
#include "strata/exec/comm/local_communicator.h"
#include "strata/exec/device.h"
#include "strata/exec/runtime.h"
#include "strata/model/error.h"

using namespace strata;
using strata::test::maxRelativeDifference;
using strata::test::presetNetwork;

namespace {

std::vector<std::shared_ptr<exec::BufferOps>> gpuOps(int k) {
  const int gpus = exec::deviceCount(exec::Device::kCuda);
  std::vector<std::shared_ptr<exec::BufferOps>> ops;
  for (int w = 0; w < k; ++w)
    ops.push_back(exec::makeCommOps(exec::Device::kCuda, w % gpus));
  return ops;
}

}  // namespace

TEST_CASE("device communicator: ring and naive allreduce of device memory sum exactly",
          "[gpu][comm]") {
  for (int k = 1; k <= 4; ++k) {
    for (size_t n : {size_t{1}, size_t{1031}, size_t{300000}}) {
      for (const bool ring : {true, false}) {
        INFO((ring ? "ring" : "naive") << " K " << k << " N " << n);
        std::vector<std::vector<float>> out(static_cast<size_t>(k));
        exec::runLocal(
            k,
            [&](exec::Communicator& comm) {
              auto& ops = comm.ops();
              // Exact integers: every sum below 2^24.
              std::vector<float> host(n);
              for (size_t i = 0; i < n; ++i)
                host[i] = float((size_t(comm.rank()) * 7 + i) % 1024);
              auto* data = static_cast<float*>(ops.allocate(n * sizeof(float)));
              ops.copy(data, host.data(), n * sizeof(float));
              if (ring)
                exec::allReduceRing(comm, std::span<float>(data, n), 4096);
              else
                exec::allReduceNaive(comm, std::span<float>(data, n), 4096);
              ops.copy(host.data(), data, n * sizeof(float));
              ops.deallocate(data, n * sizeof(float));
              out[size_t(comm.rank())] = std::move(host);
            },
            Seconds(60.0), gpuOps(k));
        for (int r = 0; r < k; ++r) {
          size_t wrong = 0;
          for (size_t i = 0; i < n; ++i) {
            float want = 0;
            for (int q = 0; q < k; ++q)
              want += float((size_t(q) * 7 + i) % 1024);
            wrong += out[size_t(r)][i] != want;
          }
          CHECK(wrong == 0);
        }
      }
    }
  }
}

TEST_CASE("every strategy on the GPU with K = 1..4 workers equals one worker with batch K b",
          "[gpu][exec]") {
  const auto net = presetNetwork("tiny-cnn");
  const int b = 4, steps = 3;
  for (int k = 1; k <= 4; ++k) {
    const auto ref =
        exec::runThreads(lowerToPlan(net, test::runScenario(Strategy::kRing, 1, k * b)), net,
                         test::runOptions(steps, exec::Device::kCuda));
    for (auto s : {Strategy::kNaive, Strategy::kRing, Strategy::kPs, Strategy::kOwtA,
                   Strategy::kOwtB, Strategy::kOwtC}) {
      INFO(toString(s) << " K = " << k);
      std::vector<std::vector<float>> params;
      const auto run = exec::runThreads(lowerToPlan(net, test::runScenario(s, k, b)), net,
                                        test::runOptions(steps, exec::Device::kCuda), &params);
      if (!isModelParallel(s))
        for (const auto& p : params)
          CHECK(maxRelativeDifference(p, ref.parameters) < 1e-5);
      CHECK(run.steps.back().loss == Approx(ref.steps.back().loss).epsilon(1e-4));
    }
  }
}

TEST_CASE("ZeRO-1, 2 and 3 on the GPU with K = 1..4 workers equal one worker with batch K b",
          "[gpu][exec][zero]") {
  // As runtime_test's case on the CPU: reduce-scattered buckets, each
  // worker's update of its chunks (momentum and Adam: their states there
  // only), the weights all-gathered. Small buckets cut chunks inside layers.
  // On an H100 (2026-11-27) alexnet-owt's ZeRO-1 run ended 0.01 from ring's
  // loss, ZeRO-2's 1e-4: this case settles whether that is more than the
  // order of sums.
  const auto net = presetNetwork("tiny-cnn");
  const int b = 4, steps = 3;
  for (Optimizer optimizer : {Optimizer::kMomentum, Optimizer::kAdam})
    for (int k = 1; k <= 4; ++k) {
      auto one = test::runScenario(Strategy::kRing, 1, k * b, optimizer);
      const auto ref = exec::runThreads(lowerToPlan(net, one), net,
                                        test::runOptions(steps, exec::Device::kCuda));
      for (int zero : {1, 2, 3})
        for (double bucket : {0.0, 40e3}) {
          INFO("K = " << k << " ZeRO-" << zero << " bucket " << bucket << " "
                      << toString(optimizer));
          auto sc = test::runScenario(Strategy::kRing, k, b, optimizer);
          sc.options.zero = zero;
          sc.options.bucket = Bytes(bucket);
          std::vector<std::vector<float>> params;
          const auto run = exec::runThreads(lowerToPlan(net, sc), net,
                                            test::runOptions(steps, exec::Device::kCuda), &params);
          for (const auto& p : params) {
            CHECK(maxRelativeDifference(p, ref.parameters) < 1e-5);
            CHECK(p == params.front());  // every worker the same bits
          }
          CHECK(run.steps.back().loss == Approx(ref.steps.back().loss).epsilon(1e-4));
        }
    }
}

TEST_CASE("tensor parallelism on the GPU equals one worker with batch dp b", "[gpu][exec][tp]") {
  // As runtime_test's case on the CPU: tiny-gpt (heads, MLP columns and
  // rows, the vocabulary's rows of the embedding and its tied head) over
  // groups of 2 and 4 workers sharing the GPU, ZeRO-3 on top at dp 2;
  // attention_plan.h's inner width and the embedding's token rows run on
  // the device here; with sequence parallelism (sp) the layers between on
  // T / tp positions and the position chunks' 2-D copies (PositionChunks).
  const auto net = presetNetwork("tiny-gpt");
  const int b = 2, steps = 3;
  for (auto [dp, tp, zero, sp] :
       {std::tuple{1, 2, 0, false}, std::tuple{2, 2, 3, false}, std::tuple{1, 4, 0, false},
        std::tuple{1, 2, 0, true}, std::tuple{2, 2, 1, true}}) {
    INFO("dp " << dp << " x tp " << tp << (sp ? " with sp" : "") << ", ZeRO-" << zero);
    const auto options = test::runOptions(steps, exec::Device::kCuda);
    const auto ref = exec::runThreads(
        lowerToPlan(net, test::runScenario(Strategy::kRing, 1, dp * b)), net, options);
    auto sc = test::runScenario(Strategy::kRing, dp * tp, b);
    sc.options.tp = tp;
    sc.options.zero = zero;
    sc.options.sequenceParallel = sp;
    std::vector<std::vector<float>> params;
    const auto run = exec::runThreads(lowerToPlan(net, sc), net, options, &params);
    test::checkSharesAgainstOneWorker(net, tp, params, ref.parameters, Optimizer::kMomentum,
                                      options.learningRate);
    CHECK(run.steps.back().loss == Approx(ref.steps.back().loss).epsilon(1e-4));
  }
}

TEST_CASE("full and selective recomputation on the GPU give the weights of none", "[gpu][exec]") {
  // As runtime_test's case on the CPU (there bit for bit): tiny-gpt, ring,
  // K = 1..3; here within 1e-6 of the largest weight, should a rerun pick
  // another cuBLAS algorithm.
  const auto net = presetNetwork("tiny-gpt");
  const int b = 2, steps = 2;
  for (int k = 1; k <= 3; ++k) {
    auto sc = test::runScenario(Strategy::kRing, k, b);
    const auto plain =
        exec::runThreads(lowerToPlan(net, sc), net, test::runOptions(steps, exec::Device::kCuda));
    for (Recompute r : {Recompute::kFull, Recompute::kSelective}) {
      INFO("K = " << k << " --recompute " << toString(r));
      sc.options.recompute = r;
      const auto again =
          exec::runThreads(lowerToPlan(net, sc), net, test::runOptions(steps, exec::Device::kCuda));
      CHECK(maxRelativeDifference(again.parameters, plain.parameters) < 1e-6);
      CHECK(again.steps.back().loss == Approx(plain.steps.back().loss).epsilon(1e-6));
    }
  }
}

TEST_CASE("the GPU run gives the CPU run's weights", "[gpu][exec]") {
  // With each update rule (Adam's kernel: kernels/src/optimizer.cu).
  const auto net = presetNetwork("tiny-cnn");
  for (Optimizer optimizer : test::kOptimizers) {
    for (auto s : {Strategy::kRing, Strategy::kOwtC, Strategy::kPs}) {
      if (s == Strategy::kPs && optimizer == Optimizer::kMomentum)
        continue;
      INFO(toString(s) << " " << toString(optimizer));
      const auto plan = lowerToPlan(net, test::runScenario(s, 3, 4, optimizer));
      const auto cpuOptions = test::runOptions(3, optimizer, exec::Device::kCpu);
      std::vector<std::vector<float>> cpu, gpu;
      exec::runThreads(plan, net, cpuOptions, &cpu);
      exec::runThreads(plan, net, test::runOptions(3, optimizer, exec::Device::kCuda), &gpu);
      REQUIRE(cpu.size() == gpu.size());
      for (size_t r = 0; r < cpu.size(); ++r)
        test::checkSameWeights(gpu[r], cpu[r], optimizer, cpuOptions.learningRate, 1e-4);
    }
  }
}

// --element bf16 through the executor: every worker's backend computes its
// GEMMs and convolutions in bf16 (fp32 master weights); K workers of a ring
// still hold equal weights (the same summed gradients, the same fp32 update),
// and the weights stay within bf16's tolerance of the fp32 run's (normwise,
// as nn_cuda_test's bf16 step: 5e-2 after 3 steps of learning rate 0.01).
TEST_CASE("a bf16 run: workers agree, weights within bf16's tolerance of fp32's", "[gpu][bf16]") {
  const auto net = presetNetwork("tiny-cnn");
  auto sc = test::runScenario(Strategy::kRing, 2, 4);
  const auto fp32Plan = lowerToPlan(net, sc);
  sc.options.element = ElementType::kBf16;
  const auto bf16Plan = lowerToPlan(net, sc);
  std::vector<std::vector<float>> fp32, bf16;
  exec::runThreads(fp32Plan, net, test::runOptions(3, exec::Device::kCuda), &fp32);
  const auto run = exec::runThreads(bf16Plan, net, test::runOptions(3, exec::Device::kCuda), &bf16);
  REQUIRE(bf16.size() == 2);
  CHECK(bf16[0] == bf16[1]);
  double diff = 0, norm = 0;
  for (size_t i = 0; i < fp32[0].size(); ++i) {
    diff += (double(bf16[0][i]) - double(fp32[0][i])) * (double(bf16[0][i]) - double(fp32[0][i]));
    norm += double(fp32[0][i]) * double(fp32[0][i]);
  }
  CHECK(std::sqrt(diff / norm) < 5e-2);
  CHECK(std::isfinite(run.steps.back().loss));
}

TEST_CASE("a worker that throws on the GPU ends every worker with its error within 10 s",
          "[gpu][faults]") {
  const auto net = presetNetwork("tiny-cnn");
  const auto plan = lowerToPlan(net, test::runScenario(Strategy::kRing, 4, 4));
  auto o = test::runOptions(5, exec::Device::kCuda);
  o.failRank = 2;
  o.failStep = 1;
  const auto start = std::chrono::steady_clock::now();
  CHECK_THROWS_WITH(exec::runThreads(plan, net, o),
                    Catch::Contains("worker 2") && Catch::Contains("injected fault"));
  CHECK(std::chrono::steady_clock::now() - start < std::chrono::seconds(10));
}

// Lists tests without a device; runs them only where a GPU is usable, else
// exits 77 (skipped).
TEST_CASE("a run that cannot fit in the GPU's free memory is refused before it starts",
          "[gpu][exec][memory]") {
  // gpt3-xl (1.3 billion parameters) with 512 sequences per worker: far
  // more than any GPU's memory; the refusal names the GPU and GiB.
  const auto net = presetNetwork("gpt3-xl");
  auto sc = test::runScenario(Strategy::kRing, 2, 512);
  try {
    exec::checkThreadRun(net, sc, exec::Device::kCuda);
    FAIL("no refusal");
  } catch (const OptionError& e) {
    const std::string what = e.what();
    INFO(what);
    CHECK(what.find("--batch") != std::string::npos);
    CHECK(what.find("GiB of device memory on GPU 0 (") != std::string::npos);
    CHECK(what.find("GiB free there now") != std::string::npos);
  }
}

int main(int argc, char** argv) {
  Catch::Session session;
  if (const int rc = session.applyCommandLine(argc, argv); rc != 0)
    return rc;
  const Catch::ConfigData& config = session.configData();
  const bool listing = config.listTests || config.listTestNamesOnly || config.listTags ||
                       config.listReporters || config.showHelp;
  if (!listing) {
    try {
      exec::checkDevice(exec::Device::kCuda, "--device");
    } catch (const UserError& e) {
      std::printf("exec cuda: skipped: %s\n", e.what());
      return 77;
    }
  }
  return session.run();
}
