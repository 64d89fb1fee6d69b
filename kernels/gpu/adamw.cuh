/**
 * @file adamw.cuh
 * @brief AdamW parameter update on the GPU. CPU twin: kernels/cpu/adamw.h (same math).
 *
 *   g = grads * grad_scale; m = beta1 m + (1 - beta1) g; v = beta2 v + (1 - beta2) g^2
 *   p -= lr * (m_hat / (sqrt(v_hat) + eps) + weight_decay * p),  m_hat = m / (1 - beta1^t),
 *   v_hat = v / (1 - beta2^t), t >= 1 (bias corrections computed on the host in double).
 * N elements; m, v fp32, updated in place. All math in fp32.
 *   T_ = float: master must be nullptr; params are the fp32 weights, updated directly.
 *   T_ = __nv_bfloat16: master holds the fp32 weights; p is read from and written to master,
 *     then params = master rounded to bf16 (round-to-nearest-even).
 * Grads are G_: the parameters' type, or fp32 (the reduced gradient shard of data parallel).
 * Parallel scheme: adamw_update one thread per element (grid-stride); elementwise, deterministic.
 *
 * adamw_update_segments is the same update over many runs of elements in one launch (every
 * tensor of the model, or a data-parallel rank's shard cut at tensor boundaries): segment s
 * updates params [param_offset, +count) from grads, master, m, v [state_offset, +count), with
 * weight decay or without. Each element gets exactly the arithmetic of adamw_update, so the
 * two give the same bits. The table is uploaded once (upload_adamw_segments) into a device
 * buffer of adamw_segment_table_bytes; threads walk the concatenation of the segments and find
 * theirs by binary search once, then by stepping forward. When every segment's offsets and
 * count are multiples of 4 and the arrays are aligned to 4 elements, each thread updates 4
 * elements at a time (16-byte accesses of m, v and master: the update is bound by memory,
 * about 28 bytes a parameter); the arithmetic, and so the bits, are the same.
 *
 * Given a device `control` (AdamWDeviceControl, written by step_scalars.cuh's clip decision on
 * the same stream), adamw_update_segments takes the gradient scale from it instead of
 * grad_scale, and control->skip != 0 leaves params, master, m and v untouched: the decision
 * needs no host round trip.
 *
 * A segment with an amax (a device float the caller zeroed) gets *amax raised to the largest
 * finite |params| of the segment as the update leaves them (bf16: the rounded values), or, on
 * a skipped step, as they are: the amax an FP8 cast of those weights would gather, without a
 * pass of its own over them (--precision fp8's weights, model/cuda_fp8_linears.cuh). Per
 * thread while its segment lasts, then a warp's threads of one segment together, one atomicMax
 * on the float's bits (non-negative floats order as their bits do): the max is the same in any
 * order.
 */
#pragma once

#include <cstdint>
#include <vector>

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "kernels/common/adamw_hyper.h"

namespace gpt2::gpu {

/// One run of elements that AdamW updates alike (see the file comment).
struct AdamWSegment {
  int64_t param_offset = 0;  // first element in params
  int64_t state_offset = 0;  // first element in grads, master, m and v
  int64_t count = 0;
  bool decays = true;  // false: weight_decay is 0 for this segment
  float* amax = nullptr;  // device; set: raised to the segment's largest finite |params| (below)
};

/// An update's gradient scale and go-ahead, decided on the device (see the file comment).
struct AdamWDeviceControl {
  float grad_scale = 1.0f;
  int skip = 0;  // nonzero: no update this step (a non-finite loss or gradient norm)
};

/// A segment table on the device, as upload_adamw_segments left it.
struct AdamWSegmentTable {
  const void* entries = nullptr;  // device memory of adamw_segment_table_bytes(num_segments)
  int num_segments = 0;
  int64_t total = 0;  // elements over every segment
  bool packable = false;  // every offset and count a multiple of 4: the packed path (below)
  bool has_amax = false;  // some segment has an amax
};

size_t adamw_segment_table_bytes(size_t num_segments);

/// Copies `segments` (count >= 0 each; none may overlap in params or in state) into `device`
/// (adamw_segment_table_bytes(segments.size()) bytes) and synchronizes `stream`.
AdamWSegmentTable upload_adamw_segments(void* device, const std::vector<AdamWSegment>& segments,
                                        cudaStream_t stream);

template <typename T_, typename G_ = T_>
void adamw_update_segments(T_* params, float* master, const G_* grads, float* m, float* v,
                           const AdamWSegmentTable& table, const AdamWHyper& hyper, int t,
                           float grad_scale, cudaStream_t stream,
                           const AdamWDeviceControl* control = nullptr);

template <typename T_, typename G_ = T_>
void adamw_update(T_* params, float* master, const G_* grads, float* m, float* v, int64_t N,
                  const AdamWHyper& hyper, int t, float grad_scale, cudaStream_t stream);

}  // namespace gpt2::gpu
