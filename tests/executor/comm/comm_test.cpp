// Tests of strata::comm over the local (thread) communicator: every collective
// on 1..8 ranks, buffer sizes that K does not divide and sizes below K, several
// segment sizes; timeouts, abort and size mismatches.
//
// Inputs are unique per (rank, element): value(r, i) = r*N + i + 1. Every sum
// of them is an integer below 2^24, so float sums are exact whatever the order
// and results are compared with ==.
#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <cmath>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "../counting_ops.h"
#include "strata/exec/comm/collectives.h"
#include "strata/exec/comm/local_communicator.h"

using namespace strata;
using namespace strata::exec;

namespace {

float inputValue(int rank, std::size_t n, std::size_t i) {
  return static_cast<float>(static_cast<std::size_t>(rank) * n + i + 1);
}

// sum over r < k of (r*n + i + 1) = n k(k-1)/2 + k(i+1)
float expectedSum(int k, std::size_t n, std::size_t i) {
  const auto kk = static_cast<std::size_t>(k);
  return static_cast<float>(n * kk * (kk - 1) / 2 + kk * (i + 1));
}

std::vector<float> inputs(int rank, std::size_t n) {
  std::vector<float> v(n);
  for (std::size_t i = 0; i < n; ++i)
    v[i] = inputValue(rank, n, i);
  return v;
}

// Runs body on k local ranks; body fills its rank's output vector, compared
// on this thread afterwards (Catch2 assertions are not thread-safe).
template <class Body>
std::vector<std::vector<float>> runRanks(int k, Body body) {
  std::vector<std::vector<float>> out(static_cast<std::size_t>(k));
  runLocal(
      k, [&](Communicator& comm) { body(comm, out[static_cast<std::size_t>(comm.rank())]); },
      Seconds(20.0));
  return out;
}

// Empty when equal; otherwise names the first differing element.
template <class Expected>
std::string firstMismatch(const std::vector<float>& got, std::size_t n, Expected expected) {
  if (got.size() != n)
    return "size " + std::to_string(got.size()) + " != " + std::to_string(n);
  for (std::size_t i = 0; i < n; ++i) {
    const float want = expected(i);
    if (!(got[i] == want))
      return "element " + std::to_string(i) + ": got " + std::to_string(got[i]) + ", want " +
             std::to_string(want);
  }
  return {};
}

const std::vector<std::size_t> kSizes = {0, 1, 2, 3, 5, 7, 8, 13, 64, 100, 1000, 1031};
const std::vector<std::size_t> kSegments = {0, 1, 3, 64, kDefaultRingSegmentElems};

template <class Fn>
double secondsOf(Fn fn) {
  const auto start = std::chrono::steady_clock::now();
  fn();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace

TEST_CASE("chunkRange covers the buffer with chunks that differ by at most one") {
  for (int k = 1; k <= 8; ++k) {
    for (std::size_t n : kSizes) {
      std::size_t next = 0;
      for (int i = 0; i < k; ++i) {
        const ChunkRange c = chunkRange(n, k, i);
        INFO("n " << n << " k " << k << " chunk " << i);
        CHECK(c.offset == next);
        CHECK((c.count == n / static_cast<std::size_t>(k) ||
               c.count == n / static_cast<std::size_t>(k) + 1));
        next += c.count;
      }
      CHECK(next == n);
    }
  }
  CHECK(chunkRange(2, 5, 1).count == 1);
  CHECK(chunkRange(2, 5, 2).count == 0);
  CHECK_THROWS_AS(chunkRange(10, 0, 0), InvariantError);
  CHECK_THROWS_AS(chunkRange(10, 3, 3), InvariantError);
}

TEST_CASE("ring allreduce sums exactly on 1..8 ranks, any N, any segment") {
  const int k = GENERATE(range(1, 9));
  for (std::size_t n : kSizes) {
    for (std::size_t segment : kSegments) {
      auto out = runRanks(k, [&](Communicator& comm, std::vector<float>& mine) {
        mine = inputs(comm.rank(), n);
        allReduceRing(comm, mine, segment);
      });
      for (int r = 0; r < k; ++r) {
        INFO("K " << k << " N " << n << " segment " << segment << " rank " << r);
        CHECK(firstMismatch(out[static_cast<std::size_t>(r)], n,
                            [&](std::size_t i) { return expectedSum(k, n, i); }) == "");
      }
    }
  }
}

TEST_CASE("naive reducer allreduce sums exactly on 1..8 ranks, any N, any segment") {
  const int k = GENERATE(range(1, 9));
  for (std::size_t n : kSizes) {
    for (std::size_t segment : kSegments) {
      auto out = runRanks(k, [&](Communicator& comm, std::vector<float>& mine) {
        mine = inputs(comm.rank(), n);
        allReduceNaive(comm, mine, segment);
      });
      for (int r = 0; r < k; ++r) {
        INFO("K " << k << " N " << n << " segment " << segment << " rank " << r);
        CHECK(firstMismatch(out[static_cast<std::size_t>(r)], n,
                            [&](std::size_t i) { return expectedSum(k, n, i); }) == "");
      }
    }
  }
}

TEST_CASE("ring reduce-scatter leaves chunk `rank` summed on each rank") {
  const int k = GENERATE(range(1, 9));
  for (std::size_t n : kSizes) {
    for (std::size_t segment : kSegments) {
      auto out = runRanks(k, [&](Communicator& comm, std::vector<float>& mine) {
        std::vector<float> data = inputs(comm.rank(), n);
        reduceScatterRing(comm, data, segment);
        const ChunkRange c = chunkRange(n, k, comm.rank());
        mine.assign(data.begin() + static_cast<std::ptrdiff_t>(c.offset),
                    data.begin() + static_cast<std::ptrdiff_t>(c.offset + c.count));
      });
      for (int r = 0; r < k; ++r) {
        const ChunkRange c = chunkRange(n, k, r);
        INFO("K " << k << " N " << n << " segment " << segment << " rank " << r);
        CHECK(firstMismatch(out[static_cast<std::size_t>(r)], c.count,
                            [&](std::size_t i) { return expectedSum(k, n, c.offset + i); }) == "");
      }
    }
  }
}

TEST_CASE("ring allgather of chunks gives every rank every owner's chunk") {
  const int k = GENERATE(range(1, 9));
  for (std::size_t n : kSizes) {
    for (std::size_t segment : kSegments) {
      auto out = runRanks(k, [&](Communicator& comm, std::vector<float>& mine) {
        // Only our own chunk is meaningful on entry; the rest is poison.
        mine.assign(n, -1.0f);
        const ChunkRange c = chunkRange(n, k, comm.rank());
        for (std::size_t i = c.offset; i < c.offset + c.count; ++i)
          mine[i] = inputValue(comm.rank(), n, i);
        allGatherChunksRing(comm, mine, segment);
      });
      auto owner = [&](std::size_t i) {
        for (int r = 0; r < k; ++r) {
          const ChunkRange c = chunkRange(n, k, r);
          if (i >= c.offset && i < c.offset + c.count)
            return r;
        }
        return -1;
      };
      for (int r = 0; r < k; ++r) {
        INFO("K " << k << " N " << n << " segment " << segment << " rank " << r);
        CHECK(firstMismatch(out[static_cast<std::size_t>(r)], n,
                            [&](std::size_t i) { return inputValue(owner(i), n, i); }) == "");
      }
    }
  }
}

TEST_CASE("ring allgather of blocks concatenates every rank's block") {
  const int k = GENERATE(range(1, 9));
  for (std::size_t n : {0, 1, 3, 17, 100}) {
    auto out = runRanks(k, [&](Communicator& comm, std::vector<float>& all) {
      all.assign(n * static_cast<std::size_t>(k), -1.0f);
      std::vector<float> mine(n);
      for (std::size_t i = 0; i < n; ++i)
        mine[i] = static_cast<float>(static_cast<std::size_t>(comm.rank()) * n + i + 1);
      allGatherRing(comm, mine, all);
    });
    for (int r = 0; r < k; ++r) {
      INFO("K " << k << " n " << n << " rank " << r);
      CHECK(firstMismatch(out[static_cast<std::size_t>(r)], n * static_cast<std::size_t>(k),
                          [](std::size_t j) { return static_cast<float>(j + 1); }) == "");
    }
  }
  SECTION("in place: mine is block `rank` of all") {
    auto out = runRanks(k, [&](Communicator& comm, std::vector<float>& all) {
      all.assign(4 * static_cast<std::size_t>(k), -1.0f);
      std::span<float> block =
          std::span<float>(all).subspan(4 * static_cast<std::size_t>(comm.rank()), 4);
      for (std::size_t i = 0; i < 4; ++i)
        block[i] = static_cast<float>(4 * static_cast<std::size_t>(comm.rank()) + i + 1);
      allGatherRing(comm, block, all);
    });
    for (int r = 0; r < k; ++r)
      CHECK(firstMismatch(out[static_cast<std::size_t>(r)], 4 * static_cast<std::size_t>(k),
                          [](std::size_t j) { return static_cast<float>(j + 1); }) == "");
  }
}

TEST_CASE("broadcast from every root reaches every rank") {
  const int k = GENERATE(range(1, 9));
  for (int root = 0; root < k; ++root) {
    for (std::size_t n : {0, 1, 7, 100, 1031}) {
      auto out = runRanks(k, [&](Communicator& comm, std::vector<float>& mine) {
        mine = comm.rank() == root ? inputs(root, n) : std::vector<float>(n, -1.0f);
        broadcast(comm, mine, root);
      });
      for (int r = 0; r < k; ++r) {
        INFO("K " << k << " root " << root << " N " << n << " rank " << r);
        CHECK(firstMismatch(out[static_cast<std::size_t>(r)], n,
                            [&](std::size_t i) { return inputValue(root, n, i); }) == "");
      }
    }
  }
}

TEST_CASE("direct all-to-all delivers block j of rank i to block i of rank j") {
  const int k = GENERATE(range(1, 9));
  const auto kk = static_cast<std::size_t>(k);
  // Block j of rank r holds (r*K + j)*n + i + 1: unique per (sender, receiver, element).
  auto value = [&](std::size_t from, std::size_t to, std::size_t n, std::size_t i) {
    return static_cast<float>((from * kk + to) * n + i + 1);
  };
  for (std::size_t n : {0, 1, 3, 10}) {
    auto out = runRanks(k, [&](Communicator& comm, std::vector<float>& received) {
      const auto rank = static_cast<std::size_t>(comm.rank());
      std::vector<float> send(n * kk);
      for (std::size_t j = 0; j < kk; ++j)
        for (std::size_t i = 0; i < n; ++i)
          send[j * n + i] = value(rank, j, n, i);
      received.assign(n * kk, -1.0f);
      allToAllDirect(comm, send, received);
    });
    for (std::size_t r = 0; r < kk; ++r) {
      INFO("K " << k << " n " << n << " rank " << r);
      CHECK(firstMismatch(out[r], n * kk, [&](std::size_t x) {
              return value(x / (n ? n : 1), r, n, x % (n ? n : 1));
            }) == "");
    }
  }
}

TEST_CASE("barrier lets no rank through before all have arrived") {
  const int k = GENERATE(range(1, 9));
  std::atomic<int> arrived{0};
  std::atomic<int> early{0};
  runLocal(k, [&](Communicator& comm) {
    if (comm.rank() == k - 1)
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    arrived.fetch_add(1);
    barrier(comm);
    if (arrived.load() != k)
      early.fetch_add(1);
  });
  CHECK(early.load() == 0);
}

TEST_CASE("large buffers with many segments, and collectives back to back on shared tags") {
  for (int k : {2, 3, 4, 7}) {
    const std::size_t n = (std::size_t{1} << 18) + 3;
    auto out = runRanks(k, [&](Communicator& comm, std::vector<float>& mine) {
      mine = inputs(comm.rank(), n);
      std::vector<float> twin = mine;
      std::vector<float> third = mine;
      allReduceRing(comm, mine, 1000);   // 66+ segments per chunk
      allReduceNaive(comm, twin, 4096);  // streamed through rank 0
      allReduceRing(comm, third, 0);     // one segment per chunk
      if (twin != mine || third != mine)
        mine.assign(1, -42.0f);
    });
    for (int r = 0; r < k; ++r) {
      INFO("K " << k << " rank " << r);
      CHECK(firstMismatch(out[static_cast<std::size_t>(r)], n,
                          [&](std::size_t i) { return expectedSum(k, n, i); }) == "");
    }
  }
}

TEST_CASE("point-to-point: typed and byte forms, FIFO per (peer, tag), tags kept apart") {
  runLocal(2, [](Communicator& comm) {
    if (comm.rank() == 0) {
      const std::vector<float> a = {1, 2, 3};
      const std::vector<float> b = {4, 5};
      comm.send(1, 7, a);
      comm.send(1, 8, b);  // other tag: received first by rank 1
      comm.send(1, 7, b);
      const std::byte raw[2] = {std::byte{9}, std::byte{10}};
      comm.send(1, 0, std::span<const std::byte>(raw));
    } else {
      std::vector<float> x(2);
      comm.recv(0, 8, x);
      if (x != std::vector<float>{4, 5})
        throw std::runtime_error("tag 8 payload");
      std::vector<float> y(3);
      comm.recv(0, 7, y);
      if (y != std::vector<float>{1, 2, 3})
        throw std::runtime_error("first message on tag 7");
      comm.recv(0, 7, x);
      if (x != std::vector<float>{4, 5})
        throw std::runtime_error("second message on tag 7");
      std::byte raw[2] = {};
      comm.recv(0, 0, std::span<std::byte>(raw));
      if (raw[1] != std::byte{10})
        throw std::runtime_error("byte payload");
    }
  });
}

TEST_CASE("thousands of tags, received out of order, and sendRecv with oneself") {
  constexpr int kTags = 5000;
  runLocal(2, [](Communicator& comm) {
    if (comm.rank() == 0) {
      for (int tag = 0; tag < kTags; ++tag) {
        const std::vector<float> one = {static_cast<float>(tag)};
        comm.send(1, tag, one);
      }
    } else {
      std::vector<float> one(1);
      for (int tag = kTags - 1; tag >= 0; --tag) {
        comm.recv(0, tag, one);
        if (one[0] != static_cast<float>(tag))
          throw std::runtime_error("tag " + std::to_string(tag));
      }
    }
    const std::vector<float> mine = {static_cast<float>(comm.rank() + 10)};
    std::vector<float> back(1);
    comm.sendRecv(comm.rank(), 3, mine, comm.rank(), 3, back);
    if (back != mine)
      throw std::runtime_error("sendRecv with oneself");
  });
}

TEST_CASE("after a timeout the receive is withdrawn and a late message waits for the next one") {
  std::atomic<bool> timedOut{false};
  std::string first;
  runLocal(2, [&](Communicator& comm) {
    std::vector<float> x(2);
    if (comm.rank() == 0) {
      comm.setTimeout(Seconds(0.1));
      try {
        comm.recv(1, 4, x);
      } catch (const CommError& e) {
        first = e.what();
      }
      timedOut = true;
      comm.setTimeout(Seconds(10.0));
      comm.recv(1, 4, x);
      if (x != std::vector<float>{7, 8})
        throw std::runtime_error("late message");
    } else {
      while (!timedOut)
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
      const std::vector<float> late = {7, 8};
      comm.send(0, 4, late);
    }
  });
  CHECK(first.find("timed out") != std::string::npos);
}

TEST_CASE("a receive nobody answers times out naming peer, tag and timeout") {
  std::string message;
  const double elapsed = secondsOf([&] {
    try {
      runLocal(2, [](Communicator& comm) {
        comm.setTimeout(Seconds(0.2));
        if (comm.rank() == 0) {
          std::vector<float> x(4);
          comm.recv(1, 7, x);
        }
      });
    } catch (const CommError& e) {
      message = e.what();
    }
  });
  INFO(message);
  CHECK(message.find("worker 0: ") == 0);
  CHECK(message.find("peer 1") != std::string::npos);
  CHECK(message.find("tag 7") != std::string::npos);
  CHECK(message.find("0.2 s") != std::string::npos);
  CHECK(message.find("timed out") != std::string::npos);
  CHECK(elapsed < 2.0);
}

TEST_CASE("one failing rank ends all: runLocal rethrows 'worker 2: ...' promptly") {
  for (int k : {3, 4, 8}) {
    std::string message;
    std::atomic<int> abortedRanks{0};
    const double elapsed = secondsOf([&] {
      try {
        runLocal(k, [&](Communicator& comm) {
          std::vector<float> data(1000, 1.0f);
          if (comm.rank() == 2) {
            allReduceRing(comm, data);
            throw std::runtime_error("boom");
          }
          try {
            allReduceRing(comm, data);
            allReduceRing(comm, data);  // waits for rank 2, default 60 s timeout
          } catch (const CommError& e) {
            if (std::string(e.what()).find("worker 2: boom") != std::string::npos)
              abortedRanks.fetch_add(1);
            throw;
          }
        });
      } catch (const std::runtime_error& e) {
        message = e.what();
      }
    });
    INFO("K " << k << ": " << message);
    CHECK(message == "worker 2: boom");
    CHECK(abortedRanks.load() == k - 1);  // every other rank saw the reason
    CHECK(elapsed < 10.0);
    CHECK(elapsed < 1.0);  // abort wakes receivers at once
  }
}

TEST_CASE("runLocal keeps the kind of error it rethrows") {
  CHECK_THROWS_AS(runLocal(2,
                           [](Communicator& c) {
                             if (c.rank() == 1)
                               throw OptionError("x", "bad");
                           }),
                  UserError);
  CHECK_THROWS_AS(runLocal(2,
                           [](Communicator& c) {
                             if (c.rank() == 1)
                               STRATA_ENFORCE_OP(1, ==, 2);
                           }),
                  InvariantError);
  CHECK_THROWS_WITH(runLocal(1, [](Communicator&) { throw 42; }), "worker 0: unknown exception");
  CHECK_THROWS_AS(runLocal(0, [](Communicator&) {}), OptionError);
}

TEST_CASE("abort wakes a blocked receive within 1 s and fails later calls with the reason") {
  LocalWorld world(3);
  std::string pending;
  double waited = 0;
  std::thread receiver([&] {
    const auto start = std::chrono::steady_clock::now();
    try {
      std::vector<float> x(1);
      world.communicator(1).recv(0, 3, x);
    } catch (const CommError& e) {
      pending = e.what();
    }
    waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  const auto abortedAt = std::chrono::steady_clock::now();
  world.communicator(2).abort("disk full on rank 2");
  receiver.join();
  const double afterAbort =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - abortedAt).count();
  CHECK(pending.find("disk full on rank 2") != std::string::npos);
  CHECK(pending.find("peer 0") != std::string::npos);
  CHECK(afterAbort < 1.0);
  CHECK(waited >= 0.05);
  CHECK(world.aborted());
  CHECK(world.communicator(0).aborted());
  world.abort("second reason");  // the first one stays
  CHECK(world.abortReason() == "disk full on rank 2");
  const std::vector<float> one = {1.0f};
  CHECK_THROWS_WITH(world.communicator(0).send(1, 3, one),
                    Catch::Contains("aborted: disk full on rank 2"));
}

TEST_CASE("a receive of the wrong size names peer, tag and both sizes") {
  std::string message;
  try {
    runLocal(2, [](Communicator& comm) {
      if (comm.rank() == 0) {
        const std::vector<float> two = {1, 2};
        comm.send(1, 5, two);  // 8 bytes
      } else {
        std::vector<float> three(3);  // 12 bytes
        comm.recv(0, 5, three);
      }
    });
  } catch (const CommError& e) {
    message = e.what();
  }
  INFO(message);
  CHECK(message.find("worker 1: ") == 0);
  CHECK(message.find("peer 0") != std::string::npos);
  CHECK(message.find("tag 5") != std::string::npos);
  CHECK(message.find("expected 12 bytes") != std::string::npos);
  CHECK(message.find("8-byte message") != std::string::npos);
}

TEST_CASE("bad peers, tags and timeouts are rejected") {
  LocalWorld world(2);
  Communicator& comm = world.communicator(0);
  std::vector<float> x(1);
  CHECK_THROWS_WITH(comm.send(2, 0, std::span<const float>(x)),
                    Catch::Contains("peer 2") && Catch::Contains("out of range"));
  CHECK_THROWS_WITH(comm.recv(-1, 0, x), Catch::Contains("peer -1"));
  CHECK_THROWS_WITH(comm.recv(1, kMaxTag + 1, x), Catch::Contains("tag out of range"));
  CHECK_THROWS_AS(comm.setTimeout(Seconds(0.0)), OptionError);
  comm.setTimeout(Seconds(5.0));
  CHECK(comm.timeout() == Seconds(5.0));
  CHECK(world.communicator(1).timeout() == Seconds(Communicator::kDefaultTimeoutSeconds));
  CHECK_THROWS_AS(LocalWorld(0), OptionError);
}

TEST_CASE("agreeOnMistakes: every rank gets the same verdict, rank 0's mistake first") {
  // mistakes[r] is rank r's mistake; expected is what every rank must return.
  struct Case {
    std::vector<std::string> mistakes;
    std::string expected;
  };
  const std::vector<Case> cases = {
      {{"", "", ""}, ""},
      {{"--steps: bad", "--steps: bad", "--steps: bad"}, "--steps: bad"},
      {{"", "", "no such file 'x.yaml'"}, "rank 2: no such file 'x.yaml'"},
      {{"", "b", "c"}, "rank 1: b"},
      {{"a", "", "c"}, "a"},
      {{"only one"}, "only one"},
      {{std::string(5000, 'x'), ""}, std::string(4096, 'x')},  // cut, not refused
      {{"", std::string(5000, 'y')}, "rank 1: " + std::string(4088, 'y')},
  };
  for (const auto& c : cases) {
    const int k = static_cast<int>(c.mistakes.size());
    std::vector<std::string> verdicts(static_cast<std::size_t>(k), "unset");
    runLocal(k, [&](Communicator& comm) {
      const auto r = static_cast<std::size_t>(comm.rank());
      verdicts[r] = agreeOnMistakes(comm, c.mistakes[r]);
    });
    for (int r = 0; r < k; ++r) {
      INFO("K " << k << " rank " << r << ": " << verdicts[static_cast<std::size_t>(r)].size()
                << " bytes");
      CHECK(verdicts[static_cast<std::size_t>(r)].substr(0, 100) == c.expected.substr(0, 100));
      CHECK(verdicts[static_cast<std::size_t>(r)].size() == c.expected.size());
    }
  }
}

TEST_CASE("agreeOnMistakes: a rank that never arrives ends the others after the timeout") {
  std::string message;
  const double elapsed = secondsOf([&] {
    try {
      runLocal(
          3,
          [](Communicator& comm) {
            if (comm.rank() != 2)
              agreeOnMistakes(comm, "");
          },
          Seconds(0.3));
    } catch (const CommError& e) {
      message = e.what();
    }
  });
  // Rank 0 times out waiting for rank 2, or rank 1 for rank 0's verdict
  // first: either way every rank ends, with the agreement's receive named.
  INFO(message);
  CHECK(message.find("tag 32000 on rank") != std::string::npos);
  CHECK(message.find("timed out after 0.3 s") != std::string::npos);
  CHECK(elapsed < 5.0);
}

// ---- per-rank BufferOps: the device communicator's host-side logic ---------------

TEST_CASE("a world of per-rank BufferOps moves and sums every byte through them", "[ops]") {
  const int k = GENERATE(range(1, 9));
  for (std::size_t n : {std::size_t{0}, std::size_t{5}, std::size_t{1031}, std::size_t{70000}}) {
    for (const bool ring : {true, false}) {
      INFO((ring ? "ring" : "naive") << " K " << k << " N " << n);
      test::CountingWorld counted(k);
      std::vector<std::vector<float>> out(static_cast<std::size_t>(k));
      runLocal(
          k,
          [&](Communicator& comm) {
            auto& mine = out[static_cast<std::size_t>(comm.rank())];
            mine = inputs(comm.rank(), n);
            if (ring)
              allReduceRing(comm, mine, 1000);
            else
              allReduceNaive(comm, mine, 1000);
          },
          Seconds(20.0), counted.ops());
      for (int r = 0; r < k; ++r) {
        const auto& ops = *counted.ranks[static_cast<std::size_t>(r)];
        INFO("rank " << r);
        CHECK(firstMismatch(out[static_cast<std::size_t>(r)], n,
                            [&](std::size_t i) { return expectedSum(k, n, i); }) == "");
        // Every sum went through the rank's ops: ring reduce-scatter adds
        // every chunk but chunk rank-1 (the one it sends first); the naive
        // root adds K-1 buffers, the others none.
        const std::size_t skipped = chunkRange(n, k, (r + k - 1) % k).count;
        const std::size_t want = k == 1   ? 0
                                 : ring   ? n - skipped
                                 : r == 0 ? static_cast<std::size_t>(k - 1) * n
                                          : 0;
        CHECK(ops.addedElements == static_cast<int64_t>(want));
        // Every message byte was copied by some rank's ops (none by memcpy
        // behind their back): at least what this rank received.
        if (k > 1 && n > 0)
          CHECK(ops.copiedBytes > 0);
        // Staging and scratch went back when the world ended.
        CHECK(ops.liveBytes == 0);
      }
    }
  }
}

TEST_CASE("queued messages live in the sender's ops' memory and come out through the receiver's",
          "[ops]") {
  test::CountingWorld counted(2);
  {
    LocalWorld world(2, counted.ops());
    auto& a = world.communicator(0);
    auto& b = world.communicator(1);
    const std::vector<float> sent{1, 2, 3, 4};
    a.send(1, 7, std::span<const float>(sent));  // nobody waits: staged
    CHECK(counted.ranks[0]->allocations == 1);
    CHECK(counted.ranks[0]->copiedBytes == 16);
    CHECK(counted.ranks[1]->allocations == 0);
    std::vector<float> got(4);
    b.recv(0, 7, std::span<float>(got));
    CHECK(got == sent);
    CHECK(counted.ranks[1]->copiedBytes == 16);  // out of the staging
    CHECK(a.ops().name() == "counting");
    CHECK(&a.ops() == counted.ranks[0].get());
    CHECK(&b.ops() == counted.ranks[1].get());
  }
  CHECK(counted.ranks[0]->liveBytes == 0);  // the pool freed it with the world
  CHECK_THROWS_AS(LocalWorld(3, counted.ops()), InvariantError);  // one ops per rank
}
