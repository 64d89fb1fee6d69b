/**
 * @file attention_hopper.cuh
 * @brief Launchers of the Hopper (sm_90a) flash-attention kernels. Internal to kernels/gpu:
 * models reach them through the attention dispatch (attention.cuh).
 *
 * bf16 only, head size 64 or 128, causal, any B, T >= 1, NH. Same tensors and contracts as
 * the portable flash kernels: forward writes out (B,T,C) and lse (B,NH,T) fp32; backward
 * overwrites dqkv (B,T,3C) in full. The backward needs attention_hopper_workspace_bytes() of
 * device workspace: the log2-domain lse and D = rowsum(dO * O) padded to whole query tiles, the
 * fp32 dQ accumulator and the per-tile semaphores ordering the dQ writes. With
 * deterministic = true the dQ additions happen in a fixed order (bit-identical runs); with
 * false they race (faster, last bits vary). The backward, and the forward's shapes with a
 * producer at T <= 1024 (or with max_blocks > 0), are persistent, their blocks taking work
 * items from a counter in the same workspace (attention_hopper_work_counter), which each zeroes
 * on its stream before its launch: a forward and a backward sharing a workspace must not run at
 * once. Otherwise the forward runs a block an item and leaves the workspace alone.
 * max_blocks > 0 caps the persistent grids below what the SMs hold (for tests).
 */
#pragma once

#include <cstddef>

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "kernels/gpu/attention.cuh"

namespace gpt2::gpu {

/// True when this build carries sm_90a code for the Hopper kernels.
bool attention_hopper_compiled();

/// workspace: attention_hopper_workspace_bytes(B, T, C, NH) (or more) of device memory, or
/// kHopperForwardWorkspaceBytes, of which the forward uses the work counter only, and only when
/// persistent (a shape with a producer at T <= persistent_max_t, or max_blocks > 0); otherwise
/// none, and it may be null.
/// persistent_max_t: -1 for the default (hopper_forward_persistent_max_t, or the environment's
/// GPT2_HOPPER_FORWARD_PERSISTENT_MAX_T when set).
/// shape: the forward's block shape; kAuto picks attention_hopper_forward_shape(T, head size).
/// rows: the query rows computed (attention.cuh's QueryRows; count 0: all).
void attention_hopper_forward(__nv_bfloat16* out, float* lse, const __nv_bfloat16* qkv, int B,
                              int T, int C, int NH, void* workspace, HopperForwardShape shape,
                              cudaStream_t stream, const QueryRows& rows = {},
                              int max_blocks = 0, int persistent_max_t = -1);

/// Profiling build only (-DGPT2_FORWARD_PHASES): the persistent forward's SM cycles per phase,
/// summed over its consumer warpgroups (the producer's: kPhaseProducerQEmpty), since the last
/// read; kPhaseItems counts items. Reading clears them.
enum ForwardPhase {
  kPhaseItems,
  kPhaseQWait,            // the consumers' wait for the next item's Q tile and unit
  kPhaseFirstTile,        // the diagonal tile: K wait, S, mask, softmax, P
  kPhaseLoop,             // the other key tiles
  kPhaseLastPv,           // the last P V: V wait, turn, issue, wait
  kPhaseEpilogue,         // normalize and store O, lse
  kPhaseConsumerTotal,    // each consumer warpgroup from its start to its exit
  kPhaseProducerQEmpty,   // the producer's wait for the consumers to give Q back
  kForwardPhases
};
#if defined(GPT2_FORWARD_PHASES)
void attention_hopper_forward_phases(unsigned long long (&phases)[kForwardPhases]);
#endif

/// The forward's block shape for a T and head size when the caller leaves it to the kernel.
HopperForwardShape attention_hopper_forward_shape(int T, int head_size);

/// deterministic: the dQ additions in a fixed order (the same bits on every run).
/// converts_dq_from_t: deterministic at head size 64, dQ goes to bf16 inside the main kernel
/// from this T up, else in a third launch (the same bits).
/// stages_grads_max_t: at head size 128, dK and dV go out through shared memory up to this T,
/// from registers above (the same bits; at head size 64 always through shared memory); -1 for
/// the default (kHopperStagesGradsMaxT, or the environment's
/// GPT2_HOPPER_BACKWARD_STAGES_GRADS_MAX_T when set).
void attention_hopper_backward(__nv_bfloat16* dqkv, const __nv_bfloat16* dout,
                               const __nv_bfloat16* qkv, const __nv_bfloat16* out,
                               const float* lse, int B, int T, int C, int NH, void* workspace,
                               bool deterministic, int max_blocks, cudaStream_t stream,
                               const QueryRows& rows = {},
                               int converts_dq_from_t = kHopperConvertsDqFromT,
                               int stages_grads_max_t = -1);

size_t attention_hopper_workspace_bytes(int B, int T, int C, int NH);

/// The work counter in a workspace laid out for (B, T, C, NH): one int, which the persistent
/// forward and the backward's main kernel each zero before their launch.
int* attention_hopper_work_counter(void* workspace, int B, int T, int C, int NH);

/// A tuning knob of the Hopper launchers for the benchmark's A/B on one build: the whole
/// number >= 0 in environment variable `name` (read once by the caller), or default_value when
/// it is unset; anything else is an error naming the variable.
int attention_hopper_env_knob(const char* name, int default_value);

/// What of that workspace the forward uses: the work counter, at its start (16 bytes, so that
/// the backward's arrays after it keep their alignment). A forward-only workspace is this.
constexpr size_t kHopperForwardWorkspaceBytes = 16;

}  // namespace gpt2::gpu
