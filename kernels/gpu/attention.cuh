/**
 * @file attention.cuh
 * @brief Causal multi-head attention on the GPU: one interface, several kernels.
 *
 * Models call attention_forward / attention_backward with an AttentionConfig (shape, storage
 * type, kernel, determinism) and AttentionTensors; select_attention_kernel turns the user's
 * choice into a kernel for the device, and the memory plan asks attention_saved_bytes (kept per
 * layer from forward to backward) and attention_workspace_bytes (shared scratch). Adding a kernel
 * touches this dispatch (kernels/gpu/attention.cu), its own files and its test; not the models.
 *
 * Tensors (same math, names and layouts as kernels/cpu/attention.h): qkv (B,T,3C), out (B,T,C),
 * HS = C/NH, scale = 1/sqrt(HS), causal, any T >= 1. Storage bf16 or fp32 (config.bf16);
 * accumulation always fp32; lse always fp32. dqkv is overwritten (=) in full.
 *
 * Kernels:
 * - kNaive: Q, K, V permuted to (B,NH,T,HS); S = scale Q K^T by a strided-batched cuBLAS GEMM
 *   written into the saved P (B,NH,T,T); one fused causal-mask + softmax kernel turns it into P in
 *   place; O = P V by a second GEMM. Backward from the stored P: dV = P^T dO, dP = dO V^T (into
 *   a (B,NH,T,T) workspace), dS = P (dP - rowsum(P dP)) in place, dQ = scale dS K,
 *   dK = scale dS^T Q. All indexing into the T x T buffers is 64-bit.
 * - kFlashPortable (FlashAttention-2 scheme, sm_80+), no T x T buffer anywhere. bf16: mma.sync
 *   m16n8k16 tensor-core kernels; forward a block per (64 queries, b, h) with K/V tiles
 *   double-buffered by cp.async, the online softmax in registers, O and lse written; backward
 *   D = rowsum(dO O), a block per (64 keys, b, h) accumulating dK and dV in registers and adding
 *   dQ into an fp32 buffer with atomics (dQ's last bits vary run to run). fp32: exact SIMT
 *   kernels with the same tiling, deterministic (the --precision fp32 path). Head size 64/128.
 * - kFlashHopper (FlashAttention-3 scheme, sm_90a, bf16, head size 64/128): TMA, wgmma and a
 *   producer warpgroup feeding consumer warpgroups (attention_hopper_forward.cu,
 *   attention_hopper_backward.cu), heads scheduled in L2-sized groups; with deterministic = true
 *   the dQ additions happen in a fixed order, so two runs give the same bits (with false, too,
 *   below kHopperRacingFromT, where the fixed order is the faster).
 * Generation's one-query-per-sequence attention over a key/value cache is its own op family:
 * attention_decode.cuh.
 */
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "kernels/common/attention_kind.h"

namespace gpt2::gpu {

class Context;

enum class AttentionKernel { kNaive, kFlashPortable, kFlashHopper };

const char* to_string(AttentionKernel kernel);  // "naive" | "flash-portable" | "flash-hopper"

/// The Hopper forward's block shapes (attention_hopper_forward.cu). kAuto picks by head size and
/// T (attention_hopper_forward_shape); tests and the benchmark force each.
enum class HopperForwardShape {
  kAuto,
  kRows128,       // 128 query rows: a producer and two consumer warpgroups, one block per SM
  kRows64,        // 64 rows: a producer and one consumer, two blocks per SM
  kRows64NoProducer,  // 64 rows, one warpgroup issuing its own copies: three blocks per SM at
                      // head size 64, two at 128
};

const char* to_string(HopperForwardShape shape);  // "auto" | "fwd128" | "fwd64" | "fwd64w1"

/// The query rows one call computes: up to two ranges [begin, end) of positions, in order
/// (context parallelism: a rank's two chunks of the whole sequence, model/context_parallel.h);
/// count 0: all T. Each begin is a multiple of kQueryRowsGranule, each end one too or T. Rows
/// outside the ranges: out, lse and dQ unspecified; the backward needs dout = 0 on them, and
/// its dK and dV are then the gradients through the computed rows alone. The Hopper kernels
/// skip the other rows' work; the portable ones compute every row (the same values in the
/// ranges).
struct QueryRows {
  int count = 0;
  int begin[2] = {0, 0};
  int end[2] = {0, 0};
};
constexpr int kQueryRowsGranule = 128;

/// The shortest T at which the Hopper backward's racing dQ order beats the fixed order. Below
/// it the fixed order is faster (H100, B·T = 16K: 7-19% at T = 512 and 1024, session
/// fifteen; at 2K +3% at head size 64 and +1% at 128, session seventeen, where at 4K the two
/// were level at 64 and racing 3% ahead at 128; bench/NOTES.md): its first key block stores
/// the dQ tiles rather than adding into a zeroed accumulator, and its head groups are smaller.
/// So racing mode takes it there, bit-identical.
constexpr int kHopperRacingFromT = 2049;

/// The shortest T at which the deterministic Hopper backward converts dQ to bf16 inside its main
/// kernel at head size 64 (no third launch). Below it one converter warp falls behind tiles that
/// finish fast (H100, B·T = 16K: -8% at T = 512, +4-5% at 1024; bench/NOTES.md). The same bits
/// either way.
constexpr int kHopperConvertsDqFromT = 1024;

/// The longest T at which the Hopper forward's shapes with a producer run persistent (a work
/// queue over as many blocks as the SMs hold); a block an item above. H100, the persistent
/// kernel against a block an item: head size 64 +5% at 2K, +1% at 4K (session seventeen), -1% at
/// 8K and -2.4% at 16K even with its early scores (session twenty-three); head size 128 +5% at
/// 2K, and now +1.9-2.9% at 8K and -0.2 to +1.8% at 16K, level at 32K (session twenty-three,
/// three machines; session seventeen read -0.6% and -2.5% before the later two-consumer loop).
/// bench/NOTES.md has both.
constexpr int hopper_forward_persistent_max_t(int head_size) {
  return head_size == 128 ? 16384 : 4096;
}

/// The longest T at which the Hopper backward at head size 128 writes dK and dV through shared
/// memory (16-byte row pieces) rather than from registers: H100, +12-15% at 512-1K, +6% at
/// 2K (session seventeen); with the loop of session eighteen +4% at 4K in both modes, mixed at
/// 8K (-3% / +5%), level at 16K (bench/NOTES.md). The same bits either way; head size 64 stages
/// at every T (+2-12%).
constexpr int kHopperStagesGradsMaxT = 4096;

/// One attention call's shape and options. B and T may change between calls (sampling runs
/// shorter sequences) as long as the workspace was sized for the largest.
struct AttentionConfig {
  int B = 1, T = 1, C = 64, NH = 1;
  bool bf16 = true;  // storage type; fp32 otherwise
  AttentionKernel kernel = AttentionKernel::kFlashPortable;
  bool deterministic = true;  // Hopper backward: fixed-order dQ (the portable bf16 one races)
  // Hopper backward with deterministic = false: the racing dQ order from this T up; below it the
  // fixed order runs instead, the faster one there (kHopperRacingFromT). Tests set 1 to check
  // the racing kernel on small shapes.
  int backward_racing_from_t = kHopperRacingFromT;
  // Hopper backward, fixed order at head size 64: dQ to bf16 in the main kernel from this T up
  // (kHopperConvertsDqFromT). Tests set 1 to check the conversion on small shapes.
  int backward_converts_dq_from_t = kHopperConvertsDqFromT;
  // Hopper backward at head size 128: dK and dV through shared memory up to this T; -1: the
  // default (kHopperStagesGradsMaxT, or GPT2_HOPPER_BACKWARD_STAGES_GRADS_MAX_T when set).
  // Tests set 0 or a large T to check both stores on small shapes.
  int backward_stages_grads_max_t = -1;
  // Hopper backward: most blocks of its persistent grid (0: one per SM). Tests set a few, so
  // that small shapes give every block many work items.
  int backward_max_blocks = 0;
  // Hopper forward (the shapes with a producer, persistent): most blocks of its grid (0: as
  // many as the SMs hold), for tests too.
  int forward_max_blocks = 0;
  // Hopper forward: persistent up to this T, a block an item above; -1: the default
  // (hopper_forward_persistent_max_t(head size), or GPT2_HOPPER_FORWARD_PERSISTENT_MAX_T when
  // set). Tests set
  // it to check both kernels on small shapes.
  int forward_persistent_max_t = -1;
  HopperForwardShape forward_shape = HopperForwardShape::kAuto;
  QueryRows rows;  // all of them unless set
  // false: forward calls only (inference): the workspace holds what the forward uses and
  // nothing of the backward's (attention_backward refuses such a config).
  bool backward = true;
};

/// Throws gpt2::Error unless `rows` keeps QueryRows' rules for a sequence of T.
void check_query_rows(const QueryRows& rows, int T);

/// The tensors of one call (storage type per config.bf16). Forward reads qkv and writes out and
/// saved; backward reads qkv, out, saved and dout and writes dqkv. saved holds what backward
/// needs: P (B,NH,T,T) for naive, lse (B,NH,T) fp32 for flash.
struct AttentionTensors {
  const void* qkv = nullptr;
  void* out = nullptr;
  void* saved = nullptr;
  const void* dout = nullptr;
  void* dqkv = nullptr;
  void* workspace = nullptr;  // attention_workspace_bytes(config), shared by forward/backward
};

/// The kernel for the user's choice on the current device; throws UsageError when the choice
/// cannot run (e.g. hopper on a GPU that is not sm_90, fp32 storage, unsupported head size).
AttentionKernel select_attention_kernel(AttentionKind kind, FlashKernelChoice choice, bool bf16,
                                        int head_size);

/// Whether the Hopper kernels run (bf16, head_size) on the current device; if not, why.
bool attention_hopper_supported(bool bf16, int head_size, std::string* why_not);

size_t attention_saved_bytes(const AttentionConfig& config);
/// The workspace the config's calls use: the forward's and, with config.backward, the
/// backward's (naive: permuted Q, K, V and O, and for the backward dO, dQ, dK, dV and dP/dS of
/// (B,NH,T,T); flash: the backward's only).
size_t attention_workspace_bytes(const AttentionConfig& config);
/// Names for the memory plan.
std::string attention_saved_name(const AttentionConfig& config);
std::string attention_workspace_name(const AttentionConfig& config);

void attention_forward(const AttentionConfig& config, const AttentionTensors& tensors,
                       const Context& ctx);
void attention_backward(const AttentionConfig& config, const AttentionTensors& tensors,
                        const Context& ctx);

// ---------------------------------------------------------------------------------------------
// The kernels' own entry points (used by the dispatch, the kernel tests and the benchmark).

template <typename T_>
void attention_naive_forward(T_* out, T_* probs, const T_* qkv, int B, int T, int C, int NH,
                             T_* scratch, const Context& ctx);

template <typename T_>
void attention_naive_backward(T_* dqkv, const T_* dout, const T_* qkv, const T_* probs, int B,
                              int T, int C, int NH, T_* scratch, T_* dprobs_scratch,
                              const Context& ctx);

/// Elements of scratch the naive forward (backward=false) or backward needs.
size_t attention_naive_scratch_elems(int B, int T, int C, bool backward);

template <typename T_>
void attention_flash_forward(T_* out, float* lse, const T_* qkv, int B, int T, int C, int NH,
                             cudaStream_t stream);

template <typename T_>
void attention_flash_backward(T_* dqkv, const T_* dout, const T_* qkv, const T_* out,
                              const float* lse, int B, int T, int C, int NH, float* scratch,
                              cudaStream_t stream);

/// Floats of scratch attention_flash_backward needs: D (B,NH,T) and the fp32 dQ (B,T,C).
size_t attention_flash_scratch_floats(int B, int T, int C, int NH);

}  // namespace gpt2::gpu
