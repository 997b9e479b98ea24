// The collectives on real MPI ranks (run by ctest under mpirun -np 2, 3, 4).
// Same inputs and closed forms as comm_test.cpp: value(r, i) = r*N + i + 1, so
// every float sum is exact. Prints each failed check with its rank and exits
// non-zero when any rank saw one.
#include <mpi.h>

#include <cstdio>
#include <string>
#include <vector>

#include "strata/exec/comm/collectives.h"
#include "strata/exec/comm/mpi_communicator.h"

using namespace strata;
using namespace strata::exec;

namespace {

int checks = 0;
int failures = 0;
int myRank = 0;

void check(bool ok, const std::string& what) {
  ++checks;
  if (!ok) {
    ++failures;
    std::fprintf(stderr, "rank %d: FAILED: %s\n", myRank, what.c_str());
  }
}

float inputValue(int rank, std::size_t n, std::size_t i) {
  return static_cast<float>(static_cast<std::size_t>(rank) * n + i + 1);
}

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

template <class Expected>
bool equals(const std::vector<float>& got, std::size_t offset, std::size_t count,
            Expected expected) {
  for (std::size_t i = 0; i < count; ++i) {
    if (!(got[offset + i] == expected(offset + i)))
      return false;
  }
  return true;
}

std::string label(const char* what, std::size_t n, std::size_t segment) {
  return std::string(what) + " N " + std::to_string(n) + " segment " + std::to_string(segment);
}

template <class Fn>
std::string errorOf(Fn fn) {
  try {
    fn();
  } catch (const CommError& e) {
    return e.what();
  }
  return "(no error)";
}

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

void testCollectives(Communicator& comm) {
  const int k = comm.size();
  const int rank = comm.rank();
  const std::vector<std::size_t> sizes = {0, 1, 2, 3, 5, 7, 64, 1000, 4099};
  const std::vector<std::size_t> segments = {0, 1, 7, 256, kDefaultRingSegmentElems};
  for (std::size_t n : sizes) {
    for (std::size_t segment : segments) {
      auto sum = [&](std::size_t i) { return expectedSum(k, n, i); };
      std::vector<float> v = inputs(rank, n);
      allReduceRing(comm, v, segment);
      check(equals(v, 0, n, sum), label("allReduceRing", n, segment));

      v = inputs(rank, n);
      allReduceNaive(comm, v, segment);
      check(equals(v, 0, n, sum), label("allReduceNaive", n, segment));

      v = inputs(rank, n);
      reduceScatterRing(comm, v, segment);
      const ChunkRange mine = chunkRange(n, k, rank);
      check(equals(v, mine.offset, mine.count, sum), label("reduceScatterRing", n, segment));

      v.assign(n, -1.0f);
      for (std::size_t i = mine.offset; i < mine.offset + mine.count; ++i)
        v[i] = inputValue(rank, n, i);
      allGatherChunksRing(comm, v, segment);
      bool gathered = true;
      for (int r = 0; r < k; ++r) {
        const ChunkRange c = chunkRange(n, k, r);
        gathered = gathered &&
                   equals(v, c.offset, c.count, [&](std::size_t i) { return inputValue(r, n, i); });
      }
      check(gathered, label("allGatherChunksRing", n, segment));
    }
    for (int root = 0; root < k; ++root) {
      std::vector<float> v = rank == root ? inputs(root, n) : std::vector<float>(n, -1.0f);
      broadcast(comm, v, root);
      check(equals(v, 0, n, [&](std::size_t i) { return inputValue(root, n, i); }),
            label("broadcast", n, 0) + " root " + std::to_string(root));
    }
  }

  const auto kk = static_cast<std::size_t>(k);
  for (std::size_t n : {0, 1, 3, 100}) {
    std::vector<float> all(n * kk, -1.0f);
    std::vector<float> mine(n);
    for (std::size_t i = 0; i < n; ++i)
      mine[i] = static_cast<float>(static_cast<std::size_t>(rank) * n + i + 1);
    allGatherRing(comm, mine, all);
    check(equals(all, 0, n * kk, [](std::size_t j) { return static_cast<float>(j + 1); }),
          label("allGatherRing", n, 0));

    auto value = [&](std::size_t from, std::size_t to, std::size_t i) {
      return static_cast<float>((from * kk + to) * n + i + 1);
    };
    std::vector<float> send(n * kk);
    for (std::size_t j = 0; j < kk; ++j)
      for (std::size_t i = 0; i < n; ++i)
        send[j * n + i] = value(static_cast<std::size_t>(rank), j, i);
    std::vector<float> received(n * kk, -1.0f);
    allToAllDirect(comm, send, received);
    check(
        equals(received, 0, n * kk,
               [&](std::size_t x) { return value(x / n, static_cast<std::size_t>(rank), x % n); }),
        label("allToAllDirect", n, 0));
  }

  {
    const std::size_t n = (std::size_t{1} << 18) + 3;
    std::vector<float> v = inputs(rank, n);
    std::vector<float> baseline = v;
    allReduceRing(comm, v);
    mpiAllreduceBaseline(dynamic_cast<MpiCommunicator&>(comm), baseline);
    check(equals(v, 0, n, [&](std::size_t i) { return expectedSum(k, n, i); }),
          label("allReduceRing (large)", n, kDefaultRingSegmentElems));
    check(v == baseline, "allReduceRing equals MPI_Allreduce");
  }
  barrier(comm);
}

void testErrors(Communicator& comm) {
  const int rank = comm.rank();
  // A smaller message than expected, then a larger one: both name peer, tag, sizes.
  if (rank == 0) {
    const std::vector<float> two = {1, 2};
    const std::vector<float> four = {1, 2, 3, 4};
    comm.send(1, 5, two);
    comm.send(1, 6, four);
  } else if (rank == 1) {
    std::vector<float> three(3);
    const std::string smaller = errorOf([&] { comm.recv(0, 5, three); });
    check(contains(smaller, "peer 0") && contains(smaller, "tag 5") &&
              contains(smaller, "expected 12 bytes") && contains(smaller, "8-byte message"),
          "smaller message: " + smaller);
    const std::string larger = errorOf([&] { comm.recv(0, 6, three); });
    check(contains(larger, "peer 0") && contains(larger, "tag 6") &&
              contains(larger, "expected 12 bytes") && contains(larger, "larger"),
          "larger message: " + larger);
  }
  barrier(comm);
  // A receive nobody answers times out.
  if (rank == 0) {
    comm.setTimeout(Seconds(0.3));
    std::vector<float> x(4);
    const double start = MPI_Wtime();
    const std::string timeout = errorOf([&] { comm.recv(1, 9, x); });
    const double waited = MPI_Wtime() - start;
    check(contains(timeout, "peer 1") && contains(timeout, "tag 9") && contains(timeout, "0.3 s") &&
              contains(timeout, "timed out"),
          "timeout: " + timeout);
    check(waited >= 0.25 && waited < 2.0, "timeout after " + std::to_string(waited) + " s");
    comm.setTimeout(Seconds(Communicator::kDefaultTimeoutSeconds));
  }
  barrier(comm);
}

}  // namespace

int main(int argc, char** argv) {
  MpiSession session(argc, argv);
  MpiCommunicator comm;
  myRank = comm.rank();
  comm.setTimeout(Seconds(30.0));
  runOrAbort(comm, [](Communicator& c) {
    testCollectives(c);
    testErrors(c);
  });
  int totalFailures = 0;
  checkMpi(MPI_Allreduce(&failures, &totalFailures, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD),
           "MPI_Allreduce");
  if (comm.rank() == 0)
    std::printf("comm_mpi_test: %d ranks, %d checks per rank, %d failures\n", comm.size(), checks,
                totalFailures);
  return totalFailures == 0 ? 0 : 1;
}
