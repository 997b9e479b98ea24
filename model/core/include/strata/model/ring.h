#pragma once

// The ring's conventions, stated once for the cost model (cost/collectives),
// the Plan (plan/Plan::flowsOf, which the executor's interpreter follows) and
// the executor's own collectives (executor/comm): who is next, and which chunk
// travels at each step.

namespace strata {

// The rank after `rank` in its ring when ranks form rings of `span`
// consecutive ranks, each ring visiting every `stride`-th of them (span K,
// stride 1: the flat ring; span G, stride 1: the ring inside each node of G;
// span K, stride G: one ring per rail, across nodes).
inline int ringNext(int rank, int span, int stride) {
  const int base = rank - rank % span;
  return base + (rank - base + stride) % span;
}

// A buffer reduced over a ring of n positions is split into n chunks, and a
// ring allreduce is a reduce-scatter (steps 0..n-2) then an allgather (steps
// 0..n-2):
//   reduce-scatter step i: position p sends chunk (p - i - 1) mod n to the
//     next position and adds the chunk it receives, (p - i - 2) mod n, into
//     its own; afterwards position p holds the whole sum of chunk p;
//   allgather step i: position p sends chunk (p - i) mod n and stores the
//     chunk it receives, (p - i - 1) mod n.
// K = 4, reduce-scatter step 0: r0 sends chunk 3, r1 chunk 0, r2 chunk 1,
// r3 chunk 2; after step 2, r0 holds chunk 0 summed over all four.
inline int ringWrap(int i, int n) {
  return ((i % n) + n) % n;
}
inline int ringReduceScatterSends(int position, int step, int n) {
  return ringWrap(position - step - 1, n);
}
inline int ringReduceScatterReceives(int position, int step, int n) {
  return ringWrap(position - step - 2, n);
}
inline int ringAllGatherSends(int position, int step, int n) {
  return ringWrap(position - step, n);
}
inline int ringAllGatherReceives(int position, int step, int n) {
  return ringWrap(position - step - 1, n);
}

}  // namespace strata
