/**
 * @file attention_schedule.h
 * @brief The order in which the Hopper attention kernels take their work: heads in groups, so
 * that what a group's blocks share (K and V in the forward; Q, dO and dQ in the backward) stays
 * in L2 while they run.
 *
 * A kernel has per_head work units per head (query blocks in the forward, key blocks in the
 * backward) over BH = B * NH heads, numbered w = 0 .. per_head * BH - 1 in the order they are
 * taken (block index, or a work counter: WorkQueue). Heads go in groups of group_heads (the
 * last group may be smaller); every unit of a group comes before the next group's, and within a
 * group unit index k of each of its heads, in head order, before index k + 1. Each (index, bh)
 * pair occurs exactly once. Host and device code (plain C++ when not compiled by nvcc).
 */
#pragma once

#include <algorithm>
#include <cstdint>

#if defined(__CUDACC__)
#define GPT2_SCHEDULE_FN __host__ __device__ __forceinline__
#else
#define GPT2_SCHEDULE_FN inline
#endif

namespace gpt2::gpu {

/// One unit of work: its index within its head (0 .. per_head - 1) and its head.
struct HeadGroupItem {
  int index;
  int bh;
};

/// Unit w of the schedule (0 <= w < per_head * BH; per_head * BH < 2^31).
GPT2_SCHEDULE_FN HeadGroupItem head_group_item(int w, int per_head, int group_heads, int BH) {
  const int group_items = per_head * group_heads;
  const int first_bh = w / group_items * group_heads;
  const int within = w % group_items;
  const int heads_here = group_heads < BH - first_bh ? group_heads : BH - first_bh;
  return HeadGroupItem{within / heads_here, first_bh + within % heads_here};
}

#if defined(__CUDACC__)
/// The work queue of a persistent kernel: a global counter, zeroed before the launch, from which
/// blocks take the schedule's unit numbers w in order; a number >= the count of units means none
/// is left.
struct WorkQueue {
  int* counter;
  __device__ __forceinline__ int take() const { return atomicAdd(counter, 1); }
};
#endif

/// Heads per group such that a group holds at least `wanted` units at `per_head` each, within
/// [1, BH].
inline int schedule_group_heads(int per_head, int BH, int64_t wanted) {
  const int64_t heads = (wanted + per_head - 1) / per_head;
  return static_cast<int>(std::clamp<int64_t>(heads, 1, BH));
}

}  // namespace gpt2::gpu

#undef GPT2_SCHEDULE_FN
