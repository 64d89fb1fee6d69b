/**
 * @file fp8_scale.cuh
 * @brief Delayed FP8 scaling on the device (issue 22): each tensor's scale, its inverse and its
 *        amax history, updated once per optimizer step without a host round trip. CPU twin:
 *        cpu::Fp8Scale (kernels/cpu/fp8.h); the two give the same bits.
 *
 * An Fp8ScaleState per tensor (16-byte aligned, so that `inverse` can be a cuBLASLt scale
 * pointer, matmul_fp8.cuh): the casts multiply by `scale` and atomically raise `amax`
 * (fp8_cast.cuh); the GEMMs multiply by `inverse`. fp8_update_scales(states, n, update, H)
 * then, for every tensor: history[update % H] = amax, amax = 0, and from the largest finite
 * value m > 0 among history[0, H) the next scale fp8_max / m / 2^margin, rounded down to a
 * power of two (exact scaling), kept only when finite and non-zero (cpu::Fp8Scale::record with
 * a history of H; a slot never written holds 0 and so never counts). H = 1 is current scaling:
 * the scale from the amax just recorded. Optionally it counts the tensors whose cast saturated
 * since the last update (cpu::Fp8Scale::saturates: amax * scale > fp8_max, before the update):
 * how many, added to *saturated, and which, 1 added to saturated_by_state[i] for state i. One
 * thread per tensor; graph-capturable.
 */
#pragma once

#include <cstdint>

#include <cuda_runtime.h>

#include "kernels/cpu/fp8.h"

namespace gpt2::gpu {

constexpr int kFp8History = 16;

/// The largest margin a model takes: 2^8 of headroom already leaves E4M3 5 of its 17.8 binades.
constexpr int kFp8MaxMargin = 8;

/// The delayed scales' settings (Transformer Engine's amax_history_len and margin, the margin
/// given apart for the E4M3 inputs and the E5M2 gradients: the gradients' amaxes jump between
/// steps more often, and E5M2's 31 binades lose less to headroom than E4M3's 17.8).
struct Fp8DelayedScaling {
  int history = kFp8History;  // the amaxes a scale looks back over, 1 to kFp8History
  int margin = 0;             // the inputs' scales 2^margin smaller still: headroom to grow
  int gradient_margin = 0;    // the same for the block linears' output gradients (E5M2)
};

struct alignas(16) Fp8ScaleState {
  float inverse = 1.0f;  // 1 / scale: what a GEMM multiplies by (first: 16-byte aligned)
  float scale = 1.0f;    // what a cast multiplies by
  float amax = 0.0f;     // since the last update: the casts' largest finite |x|
  float fp8_max = 0.0f;  // the format's largest finite value (448 or 57344)
  float history[kFp8History] = {};
};
static_assert(sizeof(Fp8ScaleState) % 16 == 0, "states must stay 16-byte aligned in an array");

/// A fresh state for a tensor of `format` cast with `scale` until its first update.
Fp8ScaleState fp8_initial_state(cpu::Fp8Format format, float scale);

/// A tensor known to hold values of magnitude at most `bound` (a scalar of the launch, so a
/// graph replays it): its scale from that bound as from an amax with a history of 1, that is
/// cpu::Fp8Scale(format, 1).record(|bound|), the bits of fp8_update_scales after an amax of
/// |bound|. Its history is left holding |bound| and its amax 0.
void fp8_scale_from_bound(Fp8ScaleState* state, float bound, cudaStream_t stream);

/// The update above, the `update`-th (0, 1, ...) of these states, history H in [1, 16]; with
/// `saturated` (device memory), the count of states whose cast saturated added to it, and with
/// `saturated_by_state` (count entries), 1 added to each of theirs.
void fp8_update_scales(Fp8ScaleState* states, int count, int64_t update, int history,
                       int margin, cudaStream_t stream, uint32_t* saturated = nullptr,
                       uint32_t* saturated_by_state = nullptr);

}  // namespace gpt2::gpu
