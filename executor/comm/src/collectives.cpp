#include "strata/exec/comm/collectives.h"

#include <algorithm>
#include <vector>

#include "strata/model/ring.h"

namespace strata::exec {

static_assert(kFirstReservedTag < kFirstCollectiveTag &&
                  kTagAllreduceNaive >= kFirstCollectiveTag && kTagBarrier <= kMaxTag,
              "collective tags must stay inside [kFirstCollectiveTag, kMaxTag]");

namespace {

int wrap(int i, int k) {
  return ((i % k) + k) % k;
}

std::span<float> chunkOf(std::span<float> data, int parts, int index) {
  const ChunkRange range = chunkRange(data.size(), parts, index);
  return data.subspan(range.offset, range.count);
}

// Segments of `count` elements at `segmentElems` each (0 = one segment).
std::size_t segmentsOf(std::size_t count, std::size_t segmentElems) {
  if (count == 0)
    return 0;
  if (segmentElems == 0)
    return 1;
  return (count + segmentElems - 1) / segmentElems;
}

template <class T>
std::span<T> segmentOf(std::span<T> chunk, std::size_t segmentElems, std::size_t j) {
  if (segmentElems == 0)
    return chunk;
  const std::size_t offset = j * segmentElems;
  return chunk.subspan(offset, std::min(segmentElems, chunk.size() - offset));
}

enum class Arrival { kStore, kSum };

// One ring step: sends `out` to `to` and receives `in` from `from`, segment by
// segment, each segment one sendRecv. Received segments are stored into `in`
// or summed into it. The two chunks may differ by one element (and so by one
// segment): the extra segment goes as a lone send or recv, which the peer
// matches because it computes the same chunk sizes.
void ringStep(Communicator& comm, int tag, int to, std::span<const float> out, int from,
              std::span<float> in, std::size_t segmentElems, Arrival arrival) {
  const std::size_t outSegments = segmentsOf(out.size(), segmentElems);
  const std::size_t inSegments = segmentsOf(in.size(), segmentElems);
  const std::size_t longest = segmentElems == 0 ? in.size() : std::min(segmentElems, in.size());
  const std::span<float> landing =
      arrival == Arrival::kSum ? comm.scratch(longest) : std::span<float>();
  for (std::size_t j = 0; j < std::max(outSegments, inSegments); ++j) {
    const bool sending = j < outSegments;
    const bool receiving = j < inSegments;
    std::span<float> target;
    if (receiving) {
      target = segmentOf(in, segmentElems, j);
    }
    std::span<float> into = arrival == Arrival::kSum ? landing.subspan(0, target.size()) : target;
    if (sending && receiving)
      comm.sendRecv(to, tag, segmentOf(out, segmentElems, j), from, tag, into);
    else if (sending)
      comm.send(to, tag, segmentOf(out, segmentElems, j));
    else
      comm.recv(from, tag, into);
    if (receiving && arrival == Arrival::kSum)
      comm.ops().add(target, into);
  }
}

}  // namespace

ChunkRange chunkRange(std::size_t n, int parts, int index) {
  STRATA_ENFORCE_OP(parts, >=, 1);
  STRATA_ENFORCE_OP(index, >=, 0);
  STRATA_ENFORCE_OP(index, <, parts);
  const auto k = static_cast<std::size_t>(parts);
  const auto i = static_cast<std::size_t>(index);
  const std::size_t base = n / k;
  const std::size_t extra = n % k;
  return ChunkRange{i * base + std::min(i, extra), base + (i < extra ? 1 : 0)};
}

// ---- naive reducer -------------------------------------------------------------

void allReduceNaive(Communicator& comm, std::span<float> data, std::size_t segmentElems) {
  constexpr int kRoot = 0;
  const int k = comm.size();
  if (k == 1 || data.empty())
    return;
  const std::size_t m = segmentsOf(data.size(), segmentElems);
  const int tag = kTagAllreduceNaive;

  if (comm.rank() == kRoot) {
    const std::size_t longest =
        segmentElems == 0 ? data.size() : std::min(segmentElems, data.size());
    const std::span<float> landing = comm.scratch(longest);
    // Round j receives segment j from everyone and returns summed segment j-1.
    for (std::size_t j = 0; j <= m; ++j) {
      for (int r = 1; r < k; ++r) {
        const bool gathering = j < m;
        const bool scattering = j >= 1;
        std::span<float> incoming;
        if (gathering)
          incoming = landing.subspan(0, segmentOf(data, segmentElems, j).size());
        // step 1 (segment j) and step 3 (segment j-1) at once with rank r
        if (gathering && scattering)
          comm.sendRecv(r, tag, segmentOf(data, segmentElems, j - 1), r, tag, incoming);
        else if (gathering)
          comm.recv(r, tag, incoming);
        else
          comm.send(r, tag, segmentOf(data, segmentElems, j - 1));
        // step 2: add rank r's segment j into ours
        if (gathering)
          comm.ops().add(segmentOf(data, segmentElems, j), incoming);
      }
    }
  } else {
    for (std::size_t j = 0; j <= m; ++j) {
      // step 1: send segment j to the root; step 3: receive summed segment j-1
      if (j == 0)
        comm.send(kRoot, tag, segmentOf(data, segmentElems, j));
      else if (j < m)
        comm.sendRecv(kRoot, tag, segmentOf(data, segmentElems, j), kRoot, tag,
                      segmentOf(data, segmentElems, j - 1));
      else
        comm.recv(kRoot, tag, segmentOf(data, segmentElems, j - 1));
    }
  }
}

// ---- ring ----------------------------------------------------------------------

void reduceScatterRing(Communicator& comm, std::span<float> data, std::size_t segmentElems) {
  const int k = comm.size();
  const int rank = comm.rank();
  if (k == 1)
    return;
  const int right = wrap(rank + 1, k);
  const int left = wrap(rank - 1, k);
  for (int i = 0; i < k - 1; ++i) {
    // the chunk numbering of ring.h, as the Plan's rings
    ringStep(comm, kTagReduceScatter, right, chunkOf(data, k, ringReduceScatterSends(rank, i, k)),
             left, chunkOf(data, k, ringReduceScatterReceives(rank, i, k)), segmentElems,
             Arrival::kSum);
  }
}

void allGatherChunksRing(Communicator& comm, std::span<float> data, std::size_t segmentElems) {
  const int k = comm.size();
  const int rank = comm.rank();
  if (k == 1)
    return;
  const int right = wrap(rank + 1, k);
  const int left = wrap(rank - 1, k);
  for (int i = 0; i < k - 1; ++i) {
    ringStep(comm, kTagAllGather, right, chunkOf(data, k, ringAllGatherSends(rank, i, k)), left,
             chunkOf(data, k, ringAllGatherReceives(rank, i, k)), segmentElems, Arrival::kStore);
  }
}

void allReduceRing(Communicator& comm, std::span<float> data, std::size_t segmentElems) {
  // reduce-scatter, steps 0..K-2: afterwards chunk `rank` holds the full sum
  reduceScatterRing(comm, data, segmentElems);
  // allgather, steps 0..K-2: every summed chunk travels once around the ring
  allGatherChunksRing(comm, data, segmentElems);
}

void allGatherRing(Communicator& comm, std::span<const float> mine, std::span<float> all) {
  const int k = comm.size();
  const int rank = comm.rank();
  STRATA_ENFORCE_OP(all.size(), ==, mine.size() * static_cast<std::size_t>(k));
  const std::size_t n = mine.size();
  auto block = [&](int index) { return all.subspan(static_cast<std::size_t>(index) * n, n); };
  // step 0: our own contribution into block `rank` (nothing to do in place)
  if (block(rank).data() != mine.data())
    comm.ops().copy(block(rank).data(), mine.data(), mine.size_bytes());
  if (k == 1 || n == 0)
    return;
  const int right = wrap(rank + 1, k);
  const int left = wrap(rank - 1, k);
  for (int i = 1; i < k; ++i) {
    // step i: send block (rank - i + 1) to the right, receive block (rank - i)
    // from the left
    comm.sendRecv(right, kTagAllGather, std::span<const float>(block(wrap(rank - i + 1, k))), left,
                  kTagAllGather, block(wrap(rank - i, k)));
  }
}

// ---- broadcast -----------------------------------------------------------------

void broadcast(Communicator& comm, std::span<float> data, int root) {
  const int k = comm.size();
  STRATA_ENFORCE_OP(root, >=, 0);
  STRATA_ENFORCE_OP(root, <, k);
  if (k == 1 || data.empty())
    return;
  if (comm.rank() != root) {
    comm.recv(root, kTagBroadcast, data);
    return;
  }
  for (int i = 1; i < k; ++i) {
    // step i: the root sends the whole buffer to rank (root + i)
    comm.send(wrap(root + i, k), kTagBroadcast, std::span<const float>(data));
  }
}

// ---- all-to-all ----------------------------------------------------------------

void allToAllDirect(Communicator& comm, std::span<const float> send, std::span<float> recv) {
  const int k = comm.size();
  const int rank = comm.rank();
  STRATA_ENFORCE_OP(send.size(), ==, recv.size());
  STRATA_ENFORCE_OP(send.size() % static_cast<std::size_t>(k), ==, std::size_t{0});
  const std::size_t n = send.size() / static_cast<std::size_t>(k);
  auto at = [n](auto buffer, int index) {
    return buffer.subspan(static_cast<std::size_t>(index) * n, n);
  };
  // step 0: our block for ourselves
  comm.ops().copy(at(recv, rank).data(), at(send, rank).data(), n * sizeof(float));
  if (n == 0)
    return;
  for (int i = 1; i < k; ++i) {
    // step i: send block (rank + i) to rank (rank + i), receive block
    // (rank - i) from rank (rank - i)
    const int to = wrap(rank + i, k);
    const int from = wrap(rank - i, k);
    comm.sendRecv(to, kTagAllToAll, at(send, to), from, kTagAllToAll, at(recv, from));
  }
}

// ---- barrier -------------------------------------------------------------------

void barrier(Communicator& comm) {
  const int k = comm.size();
  const int rank = comm.rank();
  // A one-byte token, not an empty message: a communicator may skip empty
  // messages altogether (NCCL's does), and then nothing would wait.
  const std::byte token{1};
  std::byte got{0};
  for (int distance = 1; distance < k; distance *= 2) {
    // round log2(distance): signal rank + distance, wait for rank - distance
    comm.sendRecv(wrap(rank + distance, k), kTagBarrier, std::span<const std::byte>(&token, 1),
                  wrap(rank - distance, k), kTagBarrier, std::span<std::byte>(&got, 1));
  }
}

}  // namespace strata::exec
