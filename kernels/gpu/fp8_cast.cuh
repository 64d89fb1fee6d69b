/**
 * @file fp8_cast.cuh
 * @brief FP8 operands for Hopper's FP8 GEMMs: a tensor cast to E4M3 or E5M2 in both row orders
 *        and its amax, in one pass (issue 22). CPU twin: cpu::fp8_cast_transpose (fp8.h).
 *
 * fp8_cast_transpose(in (rows, cols) bf16 or fp32, scale, format, out, out_t, amax):
 *   out (rows, cols) and out_t (cols, rows) (either may be null) = the code of in * (*scale),
 *   converted as __nv_cvt_float_to_fp8(x, __NV_SATFINITE, format) converts (round to nearest
 *   even, saturating to the largest finite); *amax = max(*amax, max |in| over the finite
 *   elements): zero it before a fresh reduction. scale and amax are device pointers, so that a
 *   delayed scale updated on the device needs no host round trip. 128 x 128 tiles through
 *   shared memory, so both outputs are written in whole rows. Any rows, cols >= 0.
 *
 * A gradient's cast may fold in what would otherwise be passes of their own (Fp8CastFusion):
 *  - gelu_input: the tensor cast is d = gelu'(gelu_input) * in, rounded to T_, where `in` is
 *    the gradient of a GELU's output and gelu_input (rows, cols) the GELU's input: the very
 *    values gpu::gelu_backward(d, gelu_input, in) writes, so the codes and the amax are those
 *    of gelu_backward then the plain cast, bit for bit.
 *  - gelu_forward: the tensor cast is gelu(in) rounded to T_, `in` a GELU's input (fc's
 *    pre-GELU values): the GELU's output as codes with no pass of its own. Its gelu is
 *    gelu_by_exp2 (gelu_device.cuh), within a few ulps of gelu_forward's tanhf form before the
 *    rounding, so a code may differ from the unfused path's by one step. Neither gelu_input nor
 *    column_partials with it.
 *  - column_partials (ceil(rows / kFp8CastTileRows), cols) fp32: per tile of kFp8CastTileRows
 *    rows, the column sums of the cast tensor (before the scale; in a fixed order, so the same
 *    bits every run), a bias gradient's partials for launch_add_column_partials (common.cuh).
 * fp8_cast_transpose_group: the same for a list of tensors (Fp8CastJob), each as if cast alone.
 */
#pragma once

#include <cstdint>

#include <cuda_runtime.h>

#include "kernels/cpu/fp8.h"

namespace gpt2::gpu {

constexpr int kFp8CastTileRows = 128;

/// An FP8 operand written by the op that produces it (a LayerNorm, the cross-entropy): its codes
/// in either order or both (null: not wanted), their format, the scale they are cast with and
/// the amax they raise (device pointers).
struct Fp8Destination {
  uint8_t* rows = nullptr;
  uint8_t* transposed = nullptr;
  cpu::Fp8Format format = cpu::Fp8Format::kE4M3;
  const float* scale = nullptr;
  float* amax = nullptr;
};

template <typename T_>
struct Fp8CastFusion {
  const T_* gelu_input = nullptr;
  float* column_partials = nullptr;
  bool gelu_forward = false;
};

template <typename T_>
void fp8_cast_transpose(const T_* in, int64_t rows, int64_t cols, const float* scale,
                        cpu::Fp8Format format, uint8_t* out, uint8_t* out_t, float* amax,
                        cudaStream_t stream, const Fp8CastFusion<T_>& fusion = {});

/// out_t (cols, rows) = in (rows, cols) transposed: FP8 codes (bytes) that their producer wrote
/// in one order (the LayerNorm to codes, layernorm_fp8.cuh) wanted in the other too, through
/// the cast's 128 x 128 code tiles. Any rows, cols >= 0.
void fp8_transpose(const uint8_t* in, int64_t rows, int64_t cols, uint8_t* out_t,
                   cudaStream_t stream);


/// One tensor of a grouped cast: fp8_cast_transpose's arguments.
template <typename T_>
struct Fp8CastJob {
  const T_* in = nullptr;
  int64_t rows = 0, cols = 0;
  const float* scale = nullptr;
  uint8_t* out = nullptr;
  uint8_t* out_t = nullptr;
  float* amax = nullptr;
  Fp8CastFusion<T_> fusion = {};
};

/// fp8_cast_transpose of every job, several tensors a launch (up to kFp8CastJobsPerLaunch):
/// many small tensors, such as a model's weights, without a launch and a tail each.
constexpr int kFp8CastJobsPerLaunch = 16;
template <typename T_>
void fp8_cast_transpose_group(const Fp8CastJob<T_>* jobs, int count, cpu::Fp8Format format,
                              cudaStream_t stream);

}  // namespace gpt2::gpu
