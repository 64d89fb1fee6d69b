/**
 * @file encoder.cu
 * @brief Token + position embedding forward and deterministic backward; see encoder.cuh.
 *
 * Backward scratch layout (byte offsets from `scratch`, each part 256-byte aligned):
 *   keys[0], keys[1]            B*T int32 each: the token ids, CUB's key double buffer
 *   positions[0], positions[1]  B*T int32 each: the bt indices 0..B*T-1, its value double buffer
 *   sort_temp                   kSortTempBaseBytes + B*T bytes: CUB's temporary storage
 * After the sort, whichever buffer of each pair CUB names current holds the positions ordered
 * by (token, bt) and their tokens; the number of radix passes, and so which buffer that is,
 * depends only on B*T and Vp, never on the ids.
 */
#include "kernels/gpu/encoder.cuh"

#include <cub/device/device_radix_sort.cuh>

#include "base/error.h"
#include "kernels/gpu/common.cuh"

namespace gpt2::gpu {
namespace {

constexpr int kThreads = 256;
// Elements of a token's run whose loads the backward keeps in flight together before adding
// them in order (a run is summed serially, so without this each element costs a full latency).
constexpr int kRunUnroll = 8;
constexpr size_t kScratchAlignment = 256;
// CUB's temporary storage is reserved as kSortTempBaseBytes + B*T bytes. CUB 3.0's onesweep
// sort of int32 keys and values with 32-bit offsets (its path on every architecture from sm_60
// on) needs <= 4 KiB of digit bins (<= 4 passes x 256 digits x 4 B), 1 KiB of lookback per tile
// (tiles of 7680 to 11776 items; 8832 on sm_90 and sm_100), a few counters and <= 256 B of
// rounding per part: under 8 KiB + 0.14 B*T bytes. The bound allows 8x that, and tiles down to
// 1024 items; encoder_backward checks CUB's exact figure against it on every call.
constexpr size_t kSortTempBaseBytes = 64 * 1024;

size_t round_up(size_t n, size_t multiple) { return (n + multiple - 1) / multiple * multiple; }

/// Byte offsets of the backward's scratch parts for BT = B*T positions (see the file comment).
struct BackwardScratchLayout {
  size_t keys[2];
  size_t positions[2];
  size_t sort_temp;
  size_t sort_temp_bytes;
  size_t total_bytes;
};

BackwardScratchLayout backward_scratch_layout(int64_t BT) {
  const size_t ints_bytes = round_up(static_cast<size_t>(BT) * sizeof(int), kScratchAlignment);
  BackwardScratchLayout layout;
  layout.keys[0] = 0;
  layout.keys[1] = ints_bytes;
  layout.positions[0] = 2 * ints_bytes;
  layout.positions[1] = 3 * ints_bytes;
  layout.sort_temp = 4 * ints_bytes;
  layout.sort_temp_bytes = round_up(kSortTempBaseBytes + static_cast<size_t>(BT),
                                    kScratchAlignment);
  layout.total_bytes = layout.sort_temp + layout.sort_temp_bytes;
  return layout;
}

/// Key bits the sort must look at: those of Vp - 1, at least 1 (ids are in [0, Vp)).
int token_bits(int Vp) {
  int bits = 1;
  while (bits < 31 && ((Vp - 1) >> bits) != 0) ++bits;
  return bits;
}

// ---------------------------------------------------------------------------------------------
// Kernels

/// One thread per element of out (B,T,C).
template <typename T_>
__global__ void encoder_forward_kernel(T_* out, const int* inp, const T_* wte, const T_* wpe,
                                       int64_t num_elements, int T, int C) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= num_elements) return;
  const int64_t bt = i / C;
  const int c = static_cast<int>(i % C);
  const int t = static_cast<int>(bt % T);
  const int64_t token = inp[bt];
  const float sum = to_float(wte[token * C + c]) + to_float(wpe[static_cast<int64_t>(t) * C + c]);
  out[i] = from_float<T_>(sum);
}

/// One thread per position: the sort's input, keys = token ids, values = positions 0..BT-1.
__global__ void encoder_sort_init_kernel(int* keys, int* positions, const int* inp, int BT) {
  const int64_t bt = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (bt >= BT) return;
  keys[bt] = inp[bt];
  positions[bt] = static_cast<int>(bt);
}

/// Grid (BT, ceil(C / blockDim.x)): block x = index k into the sorted (token, position) pairs,
/// thread = channel. Only the block at the first index of a run of equal tokens works: it sums
/// the run's dout rows in position order and adds the sum to the token's dwte row once.
template <typename T_>
__global__ void encoder_backward_wte_kernel(T_* dwte, const T_* dout, const int* sorted_tokens,
                                            const int* sorted_positions, int BT, int C, int Vp) {
  const int c = blockIdx.y * blockDim.x + threadIdx.x;
  if (c >= C) return;
  const int64_t run_begin = blockIdx.x;
  const int token = sorted_tokens[run_begin];
  if (run_begin > 0 && sorted_tokens[run_begin - 1] == token) return;  // not the run's owner
  if (token < 0 || token >= Vp) return;  // a broken precondition: never write outside dwte
  float sum = 0.0f;
  for (int64_t chunk = run_begin; chunk < BT; chunk += kRunUnroll) {
    bool in_run[kRunUnroll];
    float values[kRunUnroll];
#pragma unroll
    for (int u = 0; u < kRunUnroll; ++u) {
      const int64_t k = chunk + u;
      // Token and position loaded together (-1 never equals a valid token), dout only in run.
      const int k_token = k < BT ? sorted_tokens[k] : -1;
      const int64_t position = k < BT ? sorted_positions[k] : 0;
      in_run[u] = k_token == token;
      values[u] = in_run[u] ? to_float(dout[position * C + c]) : 0.0f;
    }
    // in_run holds on a prefix of the chunk (the tokens are sorted): the adds are in run order.
#pragma unroll
    for (int u = 0; u < kRunUnroll; ++u)
      if (in_run[u]) sum += values[u];
    if (!in_run[kRunUnroll - 1]) break;
  }
  T_* row = dwte + static_cast<int64_t>(token) * C;
  row[c] = from_float<T_>(to_float(row[c]) + sum);
}

/// One thread per element (t, c) of dwpe's first T rows; sums over b in order.
template <typename T_>
__global__ void encoder_backward_wpe_kernel(T_* dwpe, const T_* dout, int B, int64_t TC) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= TC) return;
  float sum = 0.0f;
  for (int b = 0; b < B; ++b) sum += to_float(dout[b * TC + i]);
  dwpe[i] = from_float<T_>(to_float(dwpe[i]) + sum);
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// Launchers

template <typename T_>
void encoder_forward(T_* out, const int* inp, const T_* wte, const T_* wpe, int B, int T, int C,
                     cudaStream_t stream) {
  GPT2_CHECK(B >= 1 && T >= 1 && C >= 1, "B=", B, " T=", T, " C=", C);
  GPT2_CHECK(out != nullptr && inp != nullptr && wte != nullptr && wpe != nullptr);
  const int64_t num_elements = static_cast<int64_t>(B) * T * C;
  encoder_forward_kernel<<<grid_size(num_elements, kThreads), kThreads, 0, stream>>>(
      out, inp, wte, wpe, num_elements, T, C);
  GPT2_CUDA_CHECK_LAUNCH();
}

size_t encoder_backward_scratch_bytes(int B, int T, int Vp) {
  GPT2_CHECK(B >= 1 && T >= 1 && Vp >= 1, "B=", B, " T=", T, " Vp=", Vp);
  return backward_scratch_layout(static_cast<int64_t>(B) * T).total_bytes;
}

template <typename T_>
void encoder_backward(T_* dwte, T_* dwpe, const T_* dout, const int* inp, int B, int T, int C,
                      int Vp, void* scratch, cudaStream_t stream) {
  GPT2_CHECK(B >= 1 && T >= 1 && C >= 1 && Vp >= 1, "B=", B, " T=", T, " C=", C, " Vp=", Vp);
  GPT2_CHECK(dwte != nullptr && dwpe != nullptr && dout != nullptr && inp != nullptr);
  GPT2_CHECK(scratch != nullptr);
  GPT2_CHECK(reinterpret_cast<uintptr_t>(scratch) % kScratchAlignment == 0,
             "encoder_backward scratch must be ", kScratchAlignment, "-byte aligned");
  const int64_t BT = static_cast<int64_t>(B) * T;
  GPT2_CHECK(BT <= INT32_MAX, "B*T = ", BT, " does not fit the int positions");
  GPT2_CHECK(C <= 65535LL * kThreads, "C = ", C, " exceeds the grid's y dimension");
  const int num_positions = static_cast<int>(BT);

  const BackwardScratchLayout layout = backward_scratch_layout(BT);
  char* scratch_bytes = static_cast<char*>(scratch);
  int* keys[2] = {reinterpret_cast<int*>(scratch_bytes + layout.keys[0]),
                  reinterpret_cast<int*>(scratch_bytes + layout.keys[1])};
  int* positions[2] = {reinterpret_cast<int*>(scratch_bytes + layout.positions[0]),
                       reinterpret_cast<int*>(scratch_bytes + layout.positions[1])};
  encoder_sort_init_kernel<<<grid_size(BT, kThreads), kThreads, 0, stream>>>(
      keys[0], positions[0], inp, num_positions);
  GPT2_CUDA_CHECK_LAUNCH();

  // Stable LSD radix sort over the bits of Vp - 1: positions end up by (token, bt).
  const int end_bit = token_bits(Vp);
  cub::DoubleBuffer<int> sort_keys(keys[0], keys[1]);
  cub::DoubleBuffer<int> sort_positions(positions[0], positions[1]);
  size_t sort_temp_needed = 0;
  GPT2_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(nullptr, sort_temp_needed, sort_keys,
                                                  sort_positions, num_positions, 0, end_bit,
                                                  stream));
  GPT2_CHECK(sort_temp_needed <= layout.sort_temp_bytes, "CUB's radix sort of ", BT,
             " positions needs ", sort_temp_needed, " bytes of temporary storage, but "
             "encoder_backward_scratch_bytes reserves ", layout.sort_temp_bytes,
             " (kSortTempBaseBytes + B*T): raise the bound in kernels/gpu/encoder.cu");
  size_t sort_temp_bytes = layout.sort_temp_bytes;
  GPT2_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(scratch_bytes + layout.sort_temp,
                                                  sort_temp_bytes, sort_keys, sort_positions,
                                                  num_positions, 0, end_bit, stream));
  GPT2_CUDA_CHECK_LAUNCH();

  const dim3 wte_grid(static_cast<unsigned int>(num_positions),
                      static_cast<unsigned int>(ceil_div(C, kThreads)));
  encoder_backward_wte_kernel<<<wte_grid, kThreads, 0, stream>>>(
      dwte, dout, sort_keys.Current(), sort_positions.Current(), num_positions, C, Vp);
  GPT2_CUDA_CHECK_LAUNCH();

  const int64_t TC = static_cast<int64_t>(T) * C;
  encoder_backward_wpe_kernel<<<grid_size(TC, kThreads), kThreads, 0, stream>>>(dwpe, dout, B,
                                                                                TC);
  GPT2_CUDA_CHECK_LAUNCH();
}

template void encoder_forward<float>(float*, const int*, const float*, const float*, int, int,
                                     int, cudaStream_t);
template void encoder_forward<__nv_bfloat16>(__nv_bfloat16*, const int*, const __nv_bfloat16*,
                                             const __nv_bfloat16*, int, int, int, cudaStream_t);
template void encoder_backward<float>(float*, float*, const float*, const int*, int, int, int,
                                      int, void*, cudaStream_t);
template void encoder_backward<__nv_bfloat16>(__nv_bfloat16*, __nv_bfloat16*,
                                              const __nv_bfloat16*, const int*, int, int, int,
                                              int, void*, cudaStream_t);

}  // namespace gpt2::gpu
