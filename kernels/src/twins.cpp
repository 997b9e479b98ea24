// The CPU twins of kernels.h (being written).
#include "strata/kernels/kernels.h"
