/**
 * @file row_copy.cuh
 * @brief gpu::copy_rows: a RowCopy (kernels/common/row_copy.h) on the device, fp32 or bf16.
 *
 * The positions arrays are device memory. With add = false, widths, strides, columns and
 * pointers that are whole 16-byte packs move 16 bytes per thread; otherwise one element per
 * thread (add sums in fp32 and rounds once to the storage type).
 */
#pragma once

#include <cuda_runtime.h>

#include "kernels/common/row_copy.h"

namespace gpt2::gpu {

template <typename T_>
void copy_rows(T_* dst, const T_* src, const RowCopy& copy, cudaStream_t stream);

}  // namespace gpt2::gpu
