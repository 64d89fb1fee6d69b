/**
 * @file adamw.cu
 * @brief AdamW update with optional fp32 master weights, per buffer or over a segment table;
 *        see adamw.cuh.
 */
#include "kernels/gpu/adamw.cuh"

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <type_traits>

#include "base/error.h"
#include "kernels/gpu/common.cuh"

namespace gpt2::gpu {
namespace {

constexpr int kThreads = 256;
constexpr int64_t kMaxBlocks = 65536;  // grid-stride beyond this
constexpr int kAdamWPack = 4;          // elements a thread updates at once on the packed path
constexpr int kUnitsPerThread = 8;     // adamw_segments_kernel: units (packs or elements) a thread

struct AdamWStep {
  float lr, beta1, beta2, eps, weight_decay;
  float bias_correction1;  // 1 - beta1^t
  float bias_correction2;  // 1 - beta2^t
  float grad_scale;
};

/// A segment on the device: AdamWSegment plus where it starts in the concatenation.
struct SegmentEntry {
  int64_t param_offset;
  int64_t state_offset;
  int64_t begin;  // sum of the counts of the segments before it
  int64_t count;
  int64_t decays;  // 0 or 1 (int64 keeps the entry 8-byte aligned without padding)
  float* amax;     // null: none (AdamWSegment::amax)
};

/// |x| when finite, else 0: what an amax counts.
template <typename T_>
__device__ __forceinline__ float finite_magnitude(T_ x) {
  const float magnitude = fabsf(to_float(x));
  return magnitude <= FLT_MAX ? magnitude : 0.0f;  // false for inf and NaN
}

/// *amax = max(*amax, largest), largest >= 0; skipped when the stored value is as large.
__device__ __forceinline__ void raise_amax(float* amax, float largest) {
  if (amax != nullptr && largest > *reinterpret_cast<volatile float*>(amax))
    atomicMax(reinterpret_cast<unsigned int*>(amax), __float_as_uint(largest));
}

/// One element's update: g, m, v and the fp32 weight p in, the new m, v and p out. Every
/// rounding is spelled out (no contraction left to the compiler), so that each path that calls
/// it (element by element, or a pack at a time) gives the same bits.
__device__ __forceinline__ void adamw_math(float g, float& m, float& v, float& p,
                                           float weight_decay, const AdamWStep& s) {
  g = __fmul_rn(g, s.grad_scale);
  m = __fmaf_rn(s.beta1, m, __fmul_rn(1.0f - s.beta1, g));
  v = __fmaf_rn(s.beta2, v, __fmul_rn(__fmul_rn(1.0f - s.beta2, g), g));
  const float m_hat = __fdiv_rn(m, s.bias_correction1);
  const float v_hat = __fdiv_rn(v, s.bias_correction2);
  const float update = __fadd_rn(__fdiv_rn(m_hat, __fadd_rn(__fsqrt_rn(v_hat), s.eps)),
                                 __fmul_rn(weight_decay, p));
  p = __fsub_rn(p, __fmul_rn(s.lr, update));
}

/// Element i of the state (state_index) and of the parameters (param_index): the one update.
/// Returns the finite magnitude of the parameter it stores.
template <typename T_, typename G_>
__device__ __forceinline__ float adamw_element(T_* params, float* master, const G_* grads, float* m,
                                               float* v, int64_t param_index, int64_t state_index,
                                               float weight_decay, const AdamWStep& s) {
  float m_new = m[state_index], v_new = v[state_index];
  float p = master ? master[state_index] : to_float(params[param_index]);
  adamw_math(to_float(grads[state_index]), m_new, v_new, p, weight_decay, s);
  m[state_index] = m_new;
  v[state_index] = v_new;
  if (master) master[state_index] = p;
  const T_ rounded = from_float<T_>(p);
  params[param_index] = rounded;
  return finite_magnitude(rounded);
}

/// kPack elements of a type in one access (their first one's address a multiple of its size).
template <typename V_, int kPack>
struct alignas(sizeof(V_) * kPack) Pack {
  V_ values[kPack];
};

/// The kPack elements from param_index and state_index on (both multiples of kPack): the update of
/// adamw_element on each, every array read and written kPack elements an access. Returns the
/// largest finite magnitude of the parameters it stores.
template <typename T_, typename G_>
__device__ __forceinline__ float adamw_pack(T_* params, float* master, const G_* grads, float* m,
                                           float* v, int64_t param_index, int64_t state_index,
                                           float weight_decay, const AdamWStep& s) {
  constexpr int kPack = kAdamWPack;
  const Pack<G_, kPack> g = *reinterpret_cast<const Pack<G_, kPack>*>(grads + state_index);
  Pack<float, kPack> m_new = *reinterpret_cast<const Pack<float, kPack>*>(m + state_index);
  Pack<float, kPack> v_new = *reinterpret_cast<const Pack<float, kPack>*>(v + state_index);
  Pack<float, kPack> p;
  if (master) {
    p = *reinterpret_cast<const Pack<float, kPack>*>(master + state_index);
  } else {
    const Pack<T_, kPack> stored = *reinterpret_cast<const Pack<T_, kPack>*>(params + param_index);
#pragma unroll
    for (int j = 0; j < kPack; ++j) p.values[j] = to_float(stored.values[j]);
  }
  Pack<T_, kPack> rounded;
  float largest = 0.0f;
#pragma unroll
  for (int j = 0; j < kPack; ++j) {
    adamw_math(to_float(g.values[j]), m_new.values[j], v_new.values[j], p.values[j],
               weight_decay, s);
    rounded.values[j] = from_float<T_>(p.values[j]);
  }
  *reinterpret_cast<Pack<float, kPack>*>(m + state_index) = m_new;
  *reinterpret_cast<Pack<float, kPack>*>(v + state_index) = v_new;
  if (master) *reinterpret_cast<Pack<float, kPack>*>(master + state_index) = p;
  *reinterpret_cast<Pack<T_, kPack>*>(params + param_index) = rounded;
#pragma unroll
  for (int j = 0; j < kPack; ++j) largest = fmaxf(largest, finite_magnitude(rounded.values[j]));
  return largest;
}

/// The largest finite magnitude of the kUnit parameters from param_index on, as they are.
template <int kUnit, typename T_>
__device__ __forceinline__ float params_largest(const T_* params, int64_t param_index) {
  float largest = 0.0f;
#pragma unroll
  for (int j = 0; j < kUnit; ++j)
    largest = fmaxf(largest, finite_magnitude(params[param_index + j]));
  return largest;
}

template <typename T_, typename G_>
__global__ void adamw_kernel(T_* params, float* master, const G_* grads, float* m, float* v,
                             int64_t N, AdamWStep s) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < N;
       i += stride)
    adamw_element(params, master, grads, m, v, i, i, s.weight_decay, s);
}

/// kPacked: every segment's offsets and count are multiples of kAdamWPack and the arrays are
/// aligned to a pack; a unit is then a pack, else one element. Block b updates units
/// [b, b + 1) x kThreads x kUnitsPerThread, each thread every kThreads-th of them, so a thread
/// finds its segment once (a binary search) and then meets at most a few boundaries (a grid
/// stride crossed dozens of segments a step, each a dependent load: the walk, not memory,
/// bounded the update).
template <typename T_, typename G_, bool kPacked>
__global__ void __launch_bounds__(kThreads)
    adamw_segments_kernel(T_* params, float* master, const G_* grads, float* m, float* v,
                          const SegmentEntry* segments, int num_segments, int64_t total,
                          AdamWStep s, const AdamWDeviceControl* control, bool has_amax) {
  const bool skip = control != nullptr && control->skip;
  if (skip && !has_amax) return;  // nothing to update, no amax to raise
  if (control != nullptr) s.grad_scale = control->grad_scale;
  constexpr int64_t kUnit = kPacked ? kAdamWPack : 1;  // elements per unit
  const int64_t units = total / kUnit;
  int64_t j = static_cast<int64_t>(blockIdx.x) * kThreads * kUnitsPerThread + threadIdx.x;
  if (j >= units) return;
  // The last segment that begins at or before unit j (segments are in concatenation order).
  int lo = 0, hi = num_segments - 1;
  while (lo < hi) {
    const int mid = (lo + hi + 1) / 2;
    if (segments[mid].begin <= j * kUnit) lo = mid; else hi = mid - 1;
  }
  int k = lo;
  float* amax = segments[k].amax;  // the current segment's, and its largest so far
  float largest = 0.0f;
  for (int step = 0; step < kUnitsPerThread && j < units; ++step, j += kThreads) {
    const int64_t element = j * kUnit;
    while (element >= segments[k].begin + segments[k].count) ++k;  // j only grows
    const SegmentEntry& e = segments[k];
    if (e.amax != amax) {  // a segment boundary: rare, one atomic at most
      raise_amax(amax, largest);
      amax = e.amax;
      largest = 0.0f;
    }
    const int64_t within = element - e.begin;
    const float decay = e.decays ? s.weight_decay : 0.0f;
    float stored;
    if (skip) {
      stored = amax != nullptr ? params_largest<kUnit>(params, e.param_offset + within) : 0.0f;
    } else if constexpr (kPacked) {
      stored = adamw_pack(params, master, grads, m, v, e.param_offset + within,
                          e.state_offset + within, decay, s);
    } else {
      stored = adamw_element(params, master, grads, m, v, e.param_offset + within,
                             e.state_offset + within, decay, s);
    }
    largest = fmaxf(largest, stored);
  }
  if (!has_amax) return;
  // The warp's threads of one segment together: their largest, one atomic.
  const unsigned int active = __activemask();
  const unsigned int group = __match_any_sync(active, k);  // amax is segments[k].amax
  const unsigned int group_largest = __reduce_max_sync(group, __float_as_uint(largest));
  if (static_cast<int>(threadIdx.x % 32) == __ffs(group) - 1)
    raise_amax(amax, __uint_as_float(group_largest));
}

template <typename T_>
void check_master(const float* master) {
  if constexpr (std::is_same_v<T_, float>) {
    GPT2_CHECK(master == nullptr, "fp32 parameters are their own master weights");
  } else {
    GPT2_CHECK(master != nullptr, "bf16 parameters need fp32 master weights");
  }
}

AdamWStep make_step(const AdamWHyper& hyper, int t, float grad_scale) {
  GPT2_CHECK(t >= 1, "AdamW step t = ", t, " (1-based)");
  AdamWStep step{};
  step.lr = hyper.lr;
  step.beta1 = hyper.beta1;
  step.beta2 = hyper.beta2;
  step.eps = hyper.eps;
  step.weight_decay = hyper.weight_decay;
  step.bias_correction1 = static_cast<float>(1.0 - std::pow(static_cast<double>(hyper.beta1), t));
  step.bias_correction2 = static_cast<float>(1.0 - std::pow(static_cast<double>(hyper.beta2), t));
  step.grad_scale = grad_scale;
  return step;
}

unsigned int blocks_for(int64_t n) {
  return static_cast<unsigned int>(std::min(ceil_div(n, kThreads), kMaxBlocks));
}

}  // namespace

size_t adamw_segment_table_bytes(size_t num_segments) {
  return num_segments * sizeof(SegmentEntry);
}

AdamWSegmentTable upload_adamw_segments(void* device, const std::vector<AdamWSegment>& segments,
                                        cudaStream_t stream) {
  GPT2_CHECK(segments.size() <= static_cast<size_t>(INT32_MAX), segments.size(), " segments");
  std::vector<SegmentEntry> entries;
  entries.reserve(segments.size());
  int64_t total = 0;
  for (const AdamWSegment& segment : segments) {
    GPT2_CHECK(segment.count >= 0 && segment.param_offset >= 0 && segment.state_offset >= 0,
               "AdamW segment at ", segment.param_offset, "/", segment.state_offset, " of ",
               segment.count, " elements");
    if (segment.count == 0) continue;  // the walk never lands in an empty segment
    entries.push_back({segment.param_offset, segment.state_offset, total, segment.count,
                       segment.decays ? 1 : 0, segment.amax});
    total += segment.count;
  }
  AdamWSegmentTable table;
  table.entries = device;
  table.num_segments = static_cast<int>(entries.size());
  table.total = total;
  table.packable = std::all_of(entries.begin(), entries.end(), [](const SegmentEntry& e) {
    return e.param_offset % kAdamWPack == 0 && e.state_offset % kAdamWPack == 0 &&
           e.count % kAdamWPack == 0;
  });
  table.has_amax = std::any_of(entries.begin(), entries.end(),
                               [](const SegmentEntry& e) { return e.amax != nullptr; });
  if (entries.empty()) return table;
  GPT2_CHECK(device != nullptr, "no device memory for the AdamW segment table");
  GPT2_CUDA_CHECK(cudaMemcpyAsync(device, entries.data(), entries.size() * sizeof(SegmentEntry),
                                  cudaMemcpyHostToDevice, stream));
  GPT2_CUDA_CHECK(cudaStreamSynchronize(stream));  // `entries` is about to go
  return table;
}

template <typename T_, typename G_>
void adamw_update_segments(T_* params, float* master, const G_* grads, float* m, float* v,
                           const AdamWSegmentTable& table, const AdamWHyper& hyper, int t,
                           float grad_scale, cudaStream_t stream,
                           const AdamWDeviceControl* control) {
  check_master<T_>(master);
  const AdamWStep step = make_step(hyper, t, grad_scale);
  if (table.total == 0) return;
  GPT2_CHECK(params != nullptr && grads != nullptr && m != nullptr && v != nullptr &&
             table.entries != nullptr);
  const auto* entries = static_cast<const SegmentEntry*>(table.entries);
  const bool packed =
      table.packable && alignment_bytes(params) >= kAdamWPack * sizeof(T_) &&
      alignment_bytes(grads) >= kAdamWPack * sizeof(G_) &&
      alignment_bytes(m) >= kAdamWPack * sizeof(float) &&
      alignment_bytes(v) >= kAdamWPack * sizeof(float) &&
      (master == nullptr || alignment_bytes(master) >= kAdamWPack * sizeof(float));
  const int64_t units = packed ? table.total / kAdamWPack : table.total;
  const int64_t blocks = ceil_div(units, int64_t{kThreads} * kUnitsPerThread);
  GPT2_CHECK(blocks < (int64_t{1} << 31), "an AdamW update of ", table.total, " elements");
  if (packed) {
    adamw_segments_kernel<T_, G_, true><<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(
        params, master, grads, m, v, entries, table.num_segments, table.total, step, control,
        table.has_amax);
  } else {
    adamw_segments_kernel<T_, G_, false><<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(
        params, master, grads, m, v, entries, table.num_segments, table.total, step, control,
        table.has_amax);
  }
  GPT2_CUDA_CHECK_LAUNCH();
}

template <typename T_, typename G_>
void adamw_update(T_* params, float* master, const G_* grads, float* m, float* v, int64_t N,
                  const AdamWHyper& hyper, int t, float grad_scale, cudaStream_t stream) {
  GPT2_CHECK(N >= 0, "N = ", N);
  check_master<T_>(master);
  const AdamWStep step = make_step(hyper, t, grad_scale);
  if (N == 0) return;
  GPT2_CHECK(params != nullptr && grads != nullptr && m != nullptr && v != nullptr);
  adamw_kernel<<<blocks_for(N), kThreads, 0, stream>>>(params, master, grads, m, v, N, step);
  GPT2_CUDA_CHECK_LAUNCH();
}

#define GPT2_INSTANTIATE_ADAMW(T_, G_)                                                          \
  template void adamw_update<T_, G_>(T_*, float*, const G_*, float*, float*, int64_t,           \
                                     const AdamWHyper&, int, float, cudaStream_t);        \
  template void adamw_update_segments<T_, G_>(T_*, float*, const G_*, float*, float*,           \
                                              const AdamWSegmentTable&,                         \
                                              const AdamWHyper&, int, float, cudaStream_t, \
                                              const AdamWDeviceControl*);
GPT2_INSTANTIATE_ADAMW(float, float)
GPT2_INSTANTIATE_ADAMW(__nv_bfloat16, __nv_bfloat16)
GPT2_INSTANTIATE_ADAMW(__nv_bfloat16, float)
#undef GPT2_INSTANTIATE_ADAMW

}  // namespace gpt2::gpu
