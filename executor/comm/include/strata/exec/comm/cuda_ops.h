// BufferOps for a rank whose buffers live on a GPU (built with CUDA only).
//
// Each rank gets its own non-blocking stream on its GPU. copy() is a
// cudaMemcpyAsync with cudaMemcpyDefault on that stream (device to device on
// one GPU, peer to peer between GPUs that reach each other, through the host
// otherwise), add() the reduce-add kernel of kernels/ on that stream; both
// wait for the stream before returning, so a message is in place (and its
// sum done) when send/recv return, as on the host, and the next transfer of
// the Plan may read it. Messages in flight are staged in device memory
// (cudaMalloc) of the sender's GPU. Sums between device and host memory never
// touch device memory from the host: host data is copied to the GPU and
// summed there, device data summed into host memory is first copied to pinned
// host staging (cudaMallocHost, grow-only) and summed by the host. A rank's
// ops are driven by one thread at a time (the rank's communication lane), as
// its Communicator.
//
// Several ranks may share one GPU (K workers on fewer GPUs): each has its own
// stream, so their copies and sums run concurrently on the GPU's copy engines
// and SMs, as cuda-convnet2 ran its GPUs.
#pragma once

#include <memory>

#include "strata/exec/comm/buffer_ops.h"

namespace strata::exec {

// The ops of one rank on CUDA device `device` (an ordinal this process sees).
// Enables peer access from `device` to every GPU that allows it. Throws
// RunFailure naming the CUDA call when the device cannot be used.
std::shared_ptr<BufferOps> makeCudaOps(int device);

// How many CUDA devices this process sees; 0 when there is none (or no
// driver).
int cudaVisibleDeviceCount();

}  // namespace strata::exec
