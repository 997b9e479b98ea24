// The CUDA kernels of kernels.h (being written).
#include "strata/kernels/kernels.h"
