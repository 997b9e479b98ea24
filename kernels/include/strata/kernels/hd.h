// STRATA_HD marks a function for both host and device: compiled by nvcc it
// runs in CUDA kernels too, compiled by the C++ compiler it is a plain inline
// function. The CPU twins and the CUDA kernels of kernels/ call the same
// STRATA_HD element functions, so the two can differ only in how they split
// the work, never in the arithmetic of one element.
#pragma once

#if defined(__CUDACC__)
#define STRATA_HD __host__ __device__
#else
#define STRATA_HD
#endif
