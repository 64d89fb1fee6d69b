// Moved to base/error.h (the base layer). This forwarding header remains only for the files
// edited on another branch that still include this path: kernels/gpu/attention*,
// bench/attention_bench.cpp and bench/sweep.cpp. Switch them to "base/error.h", then delete it.
#pragma once

#include "base/error.h"
