// Collectives over Communicator::send/recv/sendRecv: sum of float buffers.
//
// Notation of the cost formulas (as in docs/cost-model.md): K ranks, N bytes
// per rank, c = N/K bytes in one chunk, s bytes in one segment and
// m = ceil(c / s) segments per chunk (m = 1 when unsegmented); alpha the
// latency of one message, beta a link's bandwidth per direction (B/s), gamma
// seconds per byte summed. Bytes are per rank. Every send here is a sendRecv
// or pairs with one, so both directions of a link work at once; the sum of a
// segment does not overlap that segment's transfer (the calls block), which is
// why each step pays s*gamma on top of s/beta.
//
// Layout: buffers are split into K chunks of N/K elements with the remainder
// spread over the first N mod K chunks (chunkRange), so any N works, N < K
// included (some chunks are then empty and are skipped by sender and receiver
// alike). All ranks must call the same collectives in the same order with the
// same sizes and arguments, as with MPI; a size mismatch usually surfaces as a
// CommError from recv. K = 1 returns at once. Each collective uses its own tag
// in [kFirstCollectiveTag, kMaxTag], so callers' tags never collide with them.
#pragma once

#include <cstddef>
#include <span>

#include "strata/exec/comm/communicator.h"
#ifdef STRATA_HAVE_MPI
#include "strata/exec/comm/mpi_communicator.h"
#endif

namespace strata::exec {

inline constexpr int kTagAllreduceNaive = kFirstCollectiveTag + 1;
inline constexpr int kTagReduceScatter = kFirstCollectiveTag + 2;
inline constexpr int kTagAllGather = kFirstCollectiveTag + 3;
inline constexpr int kTagBroadcast = kFirstCollectiveTag + 4;
inline constexpr int kTagAllToAll = kFirstCollectiveTag + 5;
inline constexpr int kTagBarrier = kFirstCollectiveTag + 6;

// Segment sizes in elements; 0 means "one segment per chunk" (unsegmented).
// Chosen with comm_bench --segment_sweep (2-core VM, Open MPI 4.1 shared
// memory and threads, 16 and 64 MiB): 64 Ki floats = 256 KiB is best or
// within noise of best everywhere, e.g. mpirun -np 2 at 16 MiB, busbw GB/s by
// segment: 16 KiB 6.0, 64 KiB 10.4, 256 KiB 12.0, 1 MiB 11.7, 4 MiB 10.7,
// unsegmented 9.8. Smaller segments pay the per-message cost (a few us) too
// often; larger ones no longer stay in L2 (1 MiB here) between landing and
// being summed.
inline constexpr std::size_t kDefaultRingSegmentElems = std::size_t{1} << 16;
inline constexpr std::size_t kDefaultNaiveSegmentElems = std::size_t{1} << 16;

// Elements [offset, offset + count) of chunk `index` when `n` elements are split
// into `parts` chunks: n / parts each, one more for the first n % parts.
struct ChunkRange {
  std::size_t offset = 0;
  std::size_t count = 0;
};
// Requires parts >= 1 and 0 <= index < parts (InvariantError otherwise).
ChunkRange chunkRange(std::size_t n, int parts, int index);

// ---------------------------------------------------------------------------
// Naive reducer allreduce (rank 0 reduces), streamed segment by segment.
//
//          rank 1   rank 2  ...  rank K-1
//             \       |          /        step 1: every rank r > 0 sends
//              v      v         v                 segment j to rank 0
//                   rank 0                step 2: rank 0 adds the K-1 segments
//              ^      ^         ^                 into its own segment j
//             /       |          \        step 3: rank 0 sends the summed
//          rank 1   rank 2  ...  rank K-1         segment j back to every rank
//
//   Streamed: rank 0 sends summed segment j-1 to rank r while it receives
//   segment j from r (one sendRecv), and rank r sends segment j while it
//   receives summed segment j-1, so the root's link is busy in both
//   directions and the gather of j overlaps the scatter of j-1.
//
// Cost: rank 0 sends and receives (K-1)N, every other rank N.
//   T = (m+1)(K-1)(alpha + s/beta) + m(K-1) s gamma,  m = ceil(N / s)
//   unsegmented (m = 1): 2(K-1)(alpha + N/beta) + (K-1) N gamma
// Linear in K: the root's link carries everything (the Baidu argument).
//
// On return every rank's `data` holds the element-wise sum over ranks.
// segmentElems: elements per streamed segment; 0 = whole buffer at once.
void allReduceNaive(Communicator& comm, std::span<float> data,
                    std::size_t segmentElems = kDefaultNaiveSegmentElems);

// ---------------------------------------------------------------------------
// Ring allreduce = ring reduce-scatter, then ring allgather of the chunks
// (Baidu 2017, Patarasuk & Yuan 2009). Right = rank+1, left = rank-1 (mod K).
//
//   reduce-scatter, step i = 0..K-2: send chunk (rank-i-1) to the right,
//   receive chunk (rank-i-2) from the left and add it in. K = 4:
//
//              rank 0    rank 1    rank 2    rank 3
//     step 0:  c3 ->     c0 ->     c1 ->     c2 ->
//     step 1:  c2 ->     c3 ->     c0 ->     c1 ->
//     step 2:  c1 ->     c2 ->     c3 ->     c0 ->
//     now:     c0 done   c1 done   c2 done   c3 done   (sum of all K)
//
//   allgather, step i = 0..K-2: send chunk (rank-i) to the right, receive
//   chunk (rank-i-1) from the left and store it:
//
//     step 0:  c0 ->     c1 ->     c2 ->     c3 ->
//     step 1:  c3 ->     c0 ->     c1 ->     c2 ->
//     step 2:  c2 ->     c3 ->     c0 ->     c1 ->
//
//   Each step moves its chunk in m segments, one sendRecv each; a segment is
//   summed as soon as it lands, while it is still in cache, instead of a
//   whole chunk streaming through memory twice.
//
// Cost: every rank sends and receives 2(K-1)c = 2(K-1)/K N and sums (K-1)c.
//   T = 2(K-1) m (alpha + s/beta) + (K-1) m s gamma
//     = 2(K-1) m alpha + 2(K-1)/K N/beta + (K-1)/K N gamma
// Nearly independent of K; allreduce busbw = algbw * 2(K-1)/K -> beta.
//
// On return every rank's `data` holds the element-wise sum over ranks.
// segmentElems: elements per segment; 0 = one segment per chunk.
void allReduceRing(Communicator& comm, std::span<float> data,
                   std::size_t segmentElems = kDefaultRingSegmentElems);

// ---------------------------------------------------------------------------
// Ring reduce-scatter: the first half of allReduceRing (diagram above).
//   step i = 0..K-2: send chunk (rank-i-1) to the right, receive chunk
//   (rank-i-2) from the left and add it into our copy.
//
// Cost: sends and receives (K-1)c, sums (K-1)c.
//   T = (K-1) m (alpha + s/beta + s gamma); unsegmented (K-1)(alpha + c/beta + c gamma)
//
// On return chunk `rank` (chunkRange(data.size(), K, rank)) of `data` holds
// the sum over ranks of that chunk; the other chunks hold partial sums.
void reduceScatterRing(Communicator& comm, std::span<float> data,
                       std::size_t segmentElems = kDefaultRingSegmentElems);

// ---------------------------------------------------------------------------
// Ring allgather of chunks, in place: the second half of allReduceRing.
//   step i = 0..K-2: send chunk (rank-i) to the right, receive chunk
//   (rank-i-1) from the left.
//
// Cost: sends and receives (K-1)c. T = (K-1) m (alpha + s/beta).
//
// On entry chunk `rank` of `data` (chunkRange) is this rank's contribution;
// on return every chunk holds its owner's contribution, on every rank.
void allGatherChunksRing(Communicator& comm, std::span<float> data,
                         std::size_t segmentElems = kDefaultRingSegmentElems);

// ---------------------------------------------------------------------------
// Ring allgather of equal blocks: rank r contributes `mine` (n elements) and
// every rank ends with all = [block of rank 0 | block of rank 1 | ...].
//   step 0: copy mine into block `rank` of all
//   step i = 1..K-1: send block (rank-i+1) to the right, receive block
//   (rank-i) from the left. K = 3:
//
//              rank 0    rank 1    rank 2
//     step 1:  b0 ->     b1 ->     b2 ->
//     step 2:  b2 ->     b0 ->     b1 ->
//
// Cost: sends and receives (K-1)n. T = (K-1)(alpha + n/beta).
//
// Requires all.size() == K * mine.size() and that they do not overlap.
void allGatherRing(Communicator& comm, std::span<const float> mine, std::span<float> all);

// ---------------------------------------------------------------------------
// Flat broadcast from `root`: the root sends the whole buffer to each other
// rank in turn (rank root+1, root+2, ...), as the cost model's broadcast.
//
//               root
//           /    |     \        step i = 1..K-1: root sends to rank (root+i)
//          v     v      v
//      root+1  root+2 ... root+K-1
//
// Cost: the root sends (K-1)N, every other rank receives N.
//   T = (K-1)(alpha + N/beta), limited by the root's link.
//
// Requires 0 <= root < K. On return every rank's `data` equals the root's.
void broadcast(Communicator& comm, std::span<float> data, int root);

// ---------------------------------------------------------------------------
// Direct all-to-all: block j of `send` goes to rank j, block j of `recv` comes
// from rank j (blocks of n = send.size() / K elements). Pairwise rounds keep
// every rank sending to a distinct rank and receiving from another:
//   step 0: copy block `rank` of send into block `rank` of recv
//   step i = 1..K-1: send block (rank+i) to rank (rank+i), receive block
//   (rank-i) from rank (rank-i). K = 4:
//
//              rank 0    rank 1    rank 2    rank 3
//     step 1:  b1 -> 1   b2 -> 2   b3 -> 3   b0 -> 0
//     step 2:  b2 -> 2   b3 -> 3   b0 -> 0   b1 -> 1
//     step 3:  b3 -> 3   b0 -> 0   b1 -> 1   b2 -> 2
//
// Cost: sends and receives (K-1)n. T = (K-1)(alpha + n/beta) on one link per
// rank (the model's alpha + (K-1)n/beta, with one alpha per round here).
//
// Requires send.size() == recv.size(), divisible by K, no overlap.
void allToAllDirect(Communicator& comm, std::span<const float> send, std::span<float> recv);

// ---------------------------------------------------------------------------
// Dissemination barrier: round k = 0..ceil(log2 K)-1: send a one-byte token to
// rank (rank + 2^k), receive one from rank (rank - 2^k). No rank leaves before
// every rank has entered. T = ceil(log2 K) alpha.
void barrier(Communicator& comm);

#ifdef STRATA_HAVE_MPI
// MPI_Allreduce(MPI_IN_PLACE, data, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD): the
// baseline the bench compares allReduceRing against. Not interruptible by
// abort() or the timeout (it is MPI's own blocking call). Throws CommError when
// MPI fails or data.size() exceeds INT_MAX.
void mpiAllreduceBaseline(MpiCommunicator& comm, std::span<float> data);
#endif

}  // namespace strata::exec
