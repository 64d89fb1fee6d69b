/**
 * @file tensor_map.cuh
 * @brief Host-side construction of TMA tensor maps (CUtensorMap) for the Hopper kernels.
 *
 * A tensor map describes a strided tensor in global memory and the box (tile) one bulk tensor
 * copy moves; kernels receive it by value as a `const __grid_constant__ CUtensorMap`. Built with
 * the driver's cuTensorMapEncodeTiled, reached through the runtime's driver entry point (no link
 * against libcuda). Elements outside the tensor are zero-filled on load.
 */
#pragma once

#include <cstdint>

#include <cuda.h>

namespace gpt2::gpu {

/// A 3-D bf16 tensor, dim0 contiguous (dims[i] elements, strides in bytes for dims 1 and 2),
/// loaded in boxes of box0 x box1 x 1 with the 128-byte swizzle (box0 * 2 <= 128 bytes).
/// Preconditions (checked): base 16-byte aligned, strides multiples of 16 bytes.
CUtensorMap make_tensor_map_bf16_3d(const void* base, const uint64_t (&dims)[3],
                                    uint64_t stride1_bytes, uint64_t stride2_bytes,
                                    uint32_t box0, uint32_t box1);

}  // namespace gpt2::gpu
