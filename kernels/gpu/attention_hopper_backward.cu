/**
 * @file attention_hopper_backward.cu
 * @brief Flash-attention backward for Hopper (sm_90a): TMA, wgmma, warp specialization.
 *
 * dqkv (B,T,3C) bf16 (=) from dout (B,T,C), qkv, out and lse (B,NH,T); causal; head size 64 or
 * 128; any T. CPU twin: cpu::attention_flash_backward. Three launches (1 and 3 in
 * attention_hopper_backward_pre_post.cuh):
 *  1. Preprocess, HS/8 lanes per (b, h, t) of the tile-padded length: lse2 = lse * log2(e) and
 *     D = rowsum(dO * O) (padding rows: lse2 = +inf, D = 0, so their P is exactly 0); the
 *     semaphores (and, in racing mode, the fp32 dQ accumulator) are zeroed in the same pass.
 *  2. Main kernel, persistent: one block per SM takes work items (128 keys, b, h) from a global
 *     counter. Heads go in groups of group_heads, all items of a group before the next group's,
 *     so the Q, dO and dQ tiles that a group's items share stay in L2 (ordered by key block
 *     alone, the items in flight at short T span every head); in a group, key block 0 of every
 *     head first (the longest: it meets every query tile), then key block 1, ... Groups hold
 *     three items per block, or in deterministic mode enough that key block n of a head starts
 *     a few steps after key block n - 1, so the fixed order below rarely makes one wait (see
 *     the launcher). Warpgroup 0 is the producer:
 *     one thread issues, per item, TMA copies of the K and V tiles (once the consumers are done
 *     with the previous item's: its dK/dV stores overlap the load), then a ring of kStages (Q,
 *     dO, lse2, D) query tiles of kBlockM rows (128 at head size 64, 64 at 128), from the
 *     diagonal to T (in deterministic mode from 8 key blocks, from T down to the diagonal:
 *     first_tile); one thread (two in deterministic mode, a staging stage each) is the dQ
 *     writer (below). Warpgroups 1 and 2 own 64 keys each and, per query tile:
 *       S^T = K Q^T and dP^T = V dO^T        (wgmma, both operands in shared memory)
 *       P^T = exp2(S^T scale log2e - lse2), dS^T = P^T (dP^T - D)   (registers)
 *       dV += P^T dO                          (wgmma, P^T as the register A operand)
 *       dS^T to shared memory (double-buffered), one barrier between the two warpgroups, then
 *       each computes one 64 x 64 block of dQ = dS K over all 128 keys: the block of its query
 *       half at head size 64 (kBlockM = 128), of its head-dim half at 128 (kBlockM = 64);
 *       dK += dS^T Q is issued after dQ, so that the dQ block is staged while dK runs (as
 *       FlashAttention-3 orders them; +3-9% from 4K against dK issued with dV).
 *     The consumer index and item are broadcast from lane 0, so that the compiler keeps the
 *     tiles' wgmma descriptors in uniform registers, each sub-tile's one add from its tile's
 *     (SmemTile): with per-thread descriptors moved over at every wgmma, issuing the 16 wgmma of
 *     S^T and dP^T took a third of the loop at head size 128 (ncu, bench/NOTES.md).
 *     Each warpgroup stages its block in its own fp32 slot, and the writer moves it into the
 *     fp32 accumulator with one bulk copy (copy engine), so the consumers never wait on global
 *     memory. Racing mode: every key block adds its blocks (bulk reduce-add) into the zeroed
 *     accumulator, in whatever order they come. Deterministic mode: key block n adds into tile
 *     m only after key block n - 1 has (a per-tile semaphore counts the finished writes), so
 *     every tile is summed in the same order on every run; key block 0, the first for every
 *     tile, stores its blocks instead, so the accumulator needs no zeroing. An item waits only
 *     on items taken before it (so by running blocks), and only its writer thread waits. (Key
 *     block 0 storing in racing mode too would make every other key block wait for it: at 16K,
 *     where the items in flight hold ~30 key blocks of a head, that cost 4% of the kernel.)
 *     dK (times the scale) and dV go out through the consumer's free dS^T buffer in 16-byte
 *     row pieces (Traits::kStagesGrads: head size 64, and 128 up to T = 4096), or from
 *     registers (head size 128 above 4096). With converts_dq (deterministic
 *     mode at head size 64, from T = 1024), the writer that adds a tile's last block (its
 *     diagonal key block's) queues the tile, once the addition has landed, for warp 3 of the
 *     producer warpgroup, which converts it as launch 3 would (the same bits) while the
 *     consumers compute on: no third launch, whose read of the accumulator from DRAM is 10% of
 *     the backward at T = 1K.
 *  3. dQ * scale converted to bf16 into dqkv's query columns (unless converts_dq).
 * With QueryRows (attention.cuh) the items' query tiles are the ranges' only, and key blocks past
 * the last computed row are no items: their dK and dV rows are not written.
 * The dQ accumulator is a sequence of 64 x HS tiles, each 64 x 64 block in the order the
 * accumulator fragments are held (float2 [reg pair][thread]), so staging writes are
 * conflict-free and one bulk copy moves a whole block; launch 3 undoes the permutation.
 */
#include "kernels/gpu/attention_hopper.cuh"

#include <algorithm>
#include <cmath>
#include <type_traits>

#include "base/error.h"
#include "kernels/gpu/attention_flash_common.cuh"
#include "kernels/gpu/attention_hopper_backward_pre_post.cuh"
#include "kernels/gpu/attention_hopper_tiles.cuh"
#include "kernels/gpu/attention_schedule.h"
#include "kernels/gpu/common.cuh"
#include "kernels/gpu/tensor_map.cuh"

namespace gpt2::gpu {
namespace {

using bf16 = __nv_bfloat16;
using hopper::SmemTile;

using hopper_backward::hopper_backward_preprocess_kernel;
using hopper_backward::hopper_backward_write_dq_kernel;
using hopper_backward::kDqTileRows;

/// Query rows per step of the backward: 128 at head size 64 (S^T and dP^T are 64 x 128 per
/// warpgroup), 64 at head size 128 (where 128 would not fit the registers beside dK and dV).
constexpr int query_tile_rows(int head_size) { return head_size == 64 ? 128 : 64; }

/// Where the pieces of the backward workspace live, for (B, T, C, NH); base may be null (sizes).
struct HopperBackwardWorkspace {
  // First, in kHopperForwardWorkspaceBytes, so that a forward-only workspace is that alone.
  int* work_counter = nullptr;  // the backward's, and the forward's (attention_hopper.cuh)
  float* lse2 = nullptr;      // (B*NH, T_pad)
  float* dsum = nullptr;      // (B*NH, T_pad)
  float* dq_accum = nullptr;  // (B*NH, T_pad / 64, 64 * HS) in fragment order
  int* semaphores = nullptr;  // (B*NH, num_m_tiles)
  int block_m = 0;            // query rows per tile
  int num_m_tiles = 0;        // query tiles
  int T_pad = 0;              // num_m_tiles * block_m
  size_t bytes = 0;

  HopperBackwardWorkspace(void* base, int B, int T, int C, int NH) {
    const size_t head_size = static_cast<size_t>(C / NH);
    block_m = query_tile_rows(static_cast<int>(head_size));
    num_m_tiles = (T + block_m - 1) / block_m;
    T_pad = num_m_tiles * block_m;
    const size_t rows = static_cast<size_t>(B) * NH * T_pad;
    // Each array on a 128-byte L2 line (the base is 256-aligned, cudaMalloc's): a dQ block's
    // bulk reduce-add then covers whole 32-byte sectors. At 16 bytes past a line, as the arrays
    // lay after the 16-byte work counter, every sector of it was split between two requests.
    auto line = [](size_t offset) { return (offset + 127) / 128 * 128; };
    const size_t lse2_offset = line(kHopperForwardWorkspaceBytes);
    const size_t dsum_offset = line(lse2_offset + rows * sizeof(float));
    const size_t dq_offset = line(dsum_offset + rows * sizeof(float));
    const size_t semaphore_offset = line(dq_offset + rows * head_size * sizeof(float));
    const size_t num_semaphores = static_cast<size_t>(B) * NH * num_m_tiles;
    bytes = semaphore_offset + num_semaphores * sizeof(int);
    if (base != nullptr) {
      char* p = static_cast<char*>(base);
      work_counter = reinterpret_cast<int*>(p);
      lse2 = reinterpret_cast<float*>(p + lse2_offset);
      dsum = reinterpret_cast<float*>(p + dsum_offset);
      dq_accum = reinterpret_cast<float*>(p + dq_offset);
      semaphores = reinterpret_cast<int*>(p + semaphore_offset);
    }
  }
};

struct HopperBackwardParams {
  const float* lse2;
  const float* dsum;
  float* dq_accum;
  int* semaphores;
  int* work_counter;  // the next item of the schedule (zeroed by the preprocess)
  bf16* dqkv;
  int T, C, NH, BH;
  int num_m_tiles;
  // The query tiles computed (QueryRows, attention.cuh): [tile_begin[r], tile_end[r]), r < 2,
  // in order (one range: the second empty at the first's end); key blocks past the last
  // computed row are not items.
  int tile_begin[2], tile_end[2];
  int n_blocks;     // key blocks with a computed query at or after them
  int num_items;    // n_blocks * BH
  int group_heads;  // heads scheduled together
  int walk_down;    // deterministic mode: each item's query tiles from the last down (first_tile)
  int converts_dq;  // Traits::kConvertsDq, and T long enough: dQ to bf16 in this launch
  float scale;       // 1/sqrt(HS)
  float scale_log2;  // scale * log2(e)
};

template <int kHeadDim_, bool kDeterministic_, bool kStagesGrads_ = true>
struct HopperBackwardTraits {
  static constexpr int kHeadDim = kHeadDim_;
  // The dQ additions in a fixed order (write_dq), the query tiles walked down (first_tile).
  static constexpr bool kDeterministic = kDeterministic_;
  // dK and dV out through shared memory (16-byte row pieces), or from registers (4-byte pieces
  // of 8 rows a warp store). Staged, the backward measured +9-12% at 512-1K, +6% at 2K, +2-4%
  // from 4K at head size 64, and at 128 +12-15% at 512-1K, +6% at 2K, +4% at 4K, mixed above
  // (H100, bench/NOTES.md, sessions seventeen and eighteen): at head size 128 the launcher
  // stages up to kHopperStagesGradsMaxT (AttentionConfig::backward_stages_grads_max_t).
  static constexpr bool kStagesGrads = kStagesGrads_;
  static constexpr int kConsumers = 2;             // consumer warpgroups, 64 keys each
  static constexpr int kBlockN = 64 * kConsumers;  // keys per block
  static constexpr int kBlockM = query_tile_rows(kHeadDim);  // queries per step
  // Each consumer computes one 64 x 64 block of the kBlockM x kHeadDim dQ tile: split by query
  // halves (kBlockM = 128, head size 64) or by head-dim halves (kBlockM = 64, head size 128).
  static constexpr bool kDqSplitsQueries = kBlockM == 128;
  static_assert(kBlockM * kHeadDim == kConsumers * 64 * 64, "one 64 x 64 dQ block per consumer");
  static constexpr int kStages = 2;
  static constexpr int kDsBuffers = 2;  // dS^T double-buffered: one barrier per step suffices
  static constexpr int kThreads = 128 * (kConsumers + 1);
  // kConvertsDq (deterministic mode only): each dQ tile goes to bf16 in this kernel once
  // its last addition has landed (convert_dq, warp 3 of the producer warpgroup, from a queue of
  // kConvertStages final tiles), in place of launch 3; each converter lane keeps kConvertPacks
  // packs (32 bytes) of loads in flight, for which the producer warpgroup takes 56 registers.
  // Measured on (H100, deterministic backward, two passes against it off, bench/NOTES.md):
  // head size 64 +1.5-5% at 1K-8K, level at 16K, -6% at 512; head size 128 -17% at 512, -6% at
  // 1K, within 2% from 2K. One warp converts too slowly where tiles finish fast (short T, head
  // size 128's two diagonal tiles an item), and the consumers have 224 registers, not 232.
  // So at head size 64 only, and per launch from T = 1024 (HopperBackwardParams::converts_dq;
  // session sixteen: -8% at 512, +4-5% at 1K, +1-3% at 2K-8K). A first version released the
  // queue from one lane after __syncwarp, which racecheck reported: every lane releases it now.
  static constexpr bool kConvertsDq = kDeterministic && kHeadDim == 64;
  static_assert(!kConvertsDq || kDeterministic, "only the fixed order knows a tile's last add");
  // The loader's downward walk over query tiles (deterministic mode) spills at 24 registers;
  // the converter's loads in flight take 56 (kConvertPacks), the consumers then 224.
  static constexpr int kProducerRegisters = kConvertsDq ? 56 : kDeterministic ? 32 : 24;
  static constexpr int kConsumerRegisters = kConvertsDq ? 224 : kDeterministic ? 232 : 240;
  using KVTile = SmemTile<kBlockN, kHeadDim>;
  using QTile = SmemTile<kBlockM, kHeadDim>;      // Q and dO
  using DsTile = SmemTile<64, kBlockM>;            // dS^T of one warpgroup: keys x queries
  static constexpr int kStatsBytes = 2 * kBlockM * 4;              // lse2 and D of a stage
  static constexpr int kDqBlockBytes = 64 * 64 * 4;                // one consumer's dQ, fp32
  // Staged dQ blocks per consumer: two at head size 128, and in deterministic mode (at head
  // size 64 paid for by the base's alignment slack, below), so that a writer waiting on the
  // fixed order holds the consumers back a step later.
  static constexpr int kDqStages = kHeadDim == 128 || kDeterministic ? 2 : 1;
  // dQ writer threads, each taking the steps of one staging stage: in deterministic mode one a
  // stage, so that one waits for its tile's turn (or for its writes to land) while the other
  // moves the next step's blocks; one otherwise.
  static constexpr int kDqWriters = kDeterministic ? kDqStages : 1;
  // The converter's queue (final tiles) and loads in flight (packs a lane).
  static constexpr int kConvertStages = 8;
  static constexpr int kConvertPacks = 4;
  // The barriers (mbarriers, 8 bytes each), by index: K/V full; the query ring's full and
  // empty [kStages]; per consumer its staged dQ blocks' full (staged) [kDqStages], then per
  // consumer their empty (the writer's bulk copy has read them); K/V empty (the consumers are
  // done with an item's K and V); (kConvertsDq) the converter queue's full and empty.
  static constexpr int kKvFullBarrier = 0;
  static constexpr int kQFullBarriers = 1;
  static constexpr int kQEmptyBarriers = kQFullBarriers + kStages;
  static constexpr int kDqFullBarriers = kQEmptyBarriers + kStages;
  static constexpr int kDqEmptyBarriers = kDqFullBarriers + kConsumers * kDqStages;
  static constexpr int kKvEmptyBarrier = kDqEmptyBarriers + kConsumers * kDqStages;
  static constexpr int kConvertFullBarriers = kKvEmptyBarrier + 1;
  static constexpr int kConvertEmptyBarriers = kConvertFullBarriers + kConvertStages;
  static constexpr int kNumBarriers =
      kConvertsDq ? kConvertEmptyBarriers + kConvertStages : kKvEmptyBarrier + 1;
  // The schedule's slots (ints, HopperBackwardBlock), by index: item_slot[2]; dq_tile and
  // dq_n_block, each [kDqStages][kConsumers]; (kConvertsDq) the converter queue's ticket and
  // its tiles.
  static constexpr int kDqTileSlots = 2;
  static constexpr int kDqNBlockSlots = kDqTileSlots + kDqStages * kConsumers;
  static constexpr int kConvertTicketSlot = kDqNBlockSlots + kDqStages * kConsumers;
  static constexpr int kSlotInts =
      kConvertsDq ? kConvertTicketSlot + 1 + kConvertStages : kConvertTicketSlot;
  // Shared memory: K and V of the item; the Q and dO rings; each consumer's dS^T buffers; each
  // consumer's staged dQ block (fp32); the rings' lse2 and D; the barriers; the slots.
  static constexpr hopper::SmemRegion kKRegion{0, KVTile::kBytes};
  static constexpr hopper::SmemRegion kVRegion = kKRegion.next(KVTile::kBytes, 1024);
  static constexpr hopper::SmemRegion kQRegion = kVRegion.next(kStages * QTile::kBytes, 1024);
  static constexpr hopper::SmemRegion kDoRegion = kQRegion.next(kStages * QTile::kBytes, 1024);
  static constexpr hopper::SmemRegion kDsRegion =
      kDoRegion.next(kDsBuffers * kConsumers * DsTile::kBytes, 1024);
  static constexpr hopper::SmemRegion kDqRegion =
      kDsRegion.next(kDqStages * kConsumers * kDqBlockBytes, 128);  // bulk copies: 16-aligned
  static constexpr hopper::SmemRegion kStatsRegion = kDqRegion.next(kStages * kStatsBytes, 16);
  static constexpr hopper::SmemRegion kBarrierRegion = kStatsRegion.next(8 * kNumBarriers, 8);
  static constexpr hopper::SmemRegion kSlotRegion = kBarrierRegion.next(4 * kSlotInts, 4);
  // + 1024 bytes to align the dynamic shared memory's base by hand, where they fit; where not
  // (deterministic, head size 64: 104 bytes short), the base must be aligned already, as it is
  // on sm_90 with no static shared memory (HopperBackwardBlock::aligned_base checks it).
  static constexpr int kAlignmentSlack = kSlotRegion.end() + 1024 <= 227 * 1024 ? 1024 : 0;
  static constexpr int kSmemBytes = kSlotRegion.end() + kAlignmentSlack;
  static_assert((kConsumers * kConsumerRegisters + kProducerRegisters) * 128 <=
                    hopper::launch_registers(kThreads) * kThreads,
                "setmaxnreg budgets exceed the block's registers");
  static_assert(kSmemBytes <= 227 * 1024, "shared memory per block");
};

__device__ __forceinline__ int load_acquire(const int* p) {
  int v;
  asm volatile("ld.acquire.gpu.global.b32 %0, [%1];\n" : "=r"(v) : "l"(p) : "memory");
  return v;
}

/// *p += v with release semantics at GPU scope: this thread's earlier writes (and those made
/// its own by a proxy fence) are visible to whoever acquires the new value.
__device__ __forceinline__ void red_release_add(int* p, int v) {
  asm volatile("red.release.gpu.global.add.s32 [%0], %1;\n" ::"l"(p), "r"(v) : "memory");
}

/// One block of the main kernel: its shared memory (tiles, rings, the schedule's slots) and
/// its three roles, each a member run by its threads (see the file comment): load() by the
/// producer warpgroup's thread 0, write_dq() by its threads 32 (and 64), consume(c) by consumer
/// warpgroup c (threads 128 (c + 1) ..).
template <typename Traits>
struct HopperBackwardBlock {
  static constexpr int kHeadDim = Traits::kHeadDim;
  static constexpr int kBlockM = Traits::kBlockM;
  static constexpr int kStages = Traits::kStages;
  static constexpr int kConsumers = Traits::kConsumers;
  using KVTile = typename Traits::KVTile;
  using QTile = typename Traits::QTile;
  using DsTile = typename Traits::DsTile;

  /// A work item: key block n_block (keys n0 ..) of head bh = (b, h); its first query tile
  /// with a query at or after n0 is m_begin.
  struct Item {
    int n_block, bh, b, h, n0, m_begin;
  };

  const HopperBackwardParams& p;
  uint32_t smem;               // shared-memory address, 1024-byte aligned
  unsigned char* smem_generic;  // the same, as a generic pointer
  KVTile k_tile, v_tile;
  uint32_t bars;  // barrier i at bars + 8 i (Traits' barrier indices)
  // Rings (StageRing), used in order: the query tiles' (Q, dO, stats), by step; K and V, one
  // stage, by item count; and per consumer its staged dQ block, one stage, by step (dq_ring).
  hopper::StageRing<kStages> q_ring;
  hopper::StageRing<1> kv_ring;
  // The schedule: item w is key block head_group_item(w).index of head .bh
  // (attention_schedule.h, key block 0 of every head of a group first); each block takes the
  // next item from a global counter until none is left. item_slot[count % 2] hands item number
  // `count` of this block (or -1: no more) from the loader to the consumers with the K/V ring's
  // full barrier; dq_tile[stage][c] tells the writer which tile a staged block belongs to.
  volatile int* item_slot;
  volatile int* dq_tile;     // [stage * kConsumers + c]: tile (bh * num_m_tiles + m), or -1
  volatile int* dq_n_block;  // [stage * kConsumers + c]: the key block that staged it
  // Deterministic mode: the queue of final dQ tiles from the writers to the converter. A writer
  // takes use `ticket` (a shared counter: two writers push), waits for its stage to be empty,
  // puts the tile (-1: that writer's end) in convert_tile and arrives on the full barrier.
  using ConvertRing = hopper::StageRing<Traits::kConvertStages>;
  ConvertRing convert_ring;
  int* convert_ticket;
  volatile int* convert_tile;  // [stage]
  int n_blocks;
  int m_end;                 // past the last computed query tile

  __device__ __forceinline__ HopperBackwardBlock(const HopperBackwardParams& params,
                                                 unsigned char* smem_raw)
      : p(params),
        smem(aligned_base(smem_raw)),
        smem_generic(smem_raw + (smem - hopper::smem_addr(smem_raw))),
        k_tile{smem + Traits::kKRegion.offset},
        v_tile{smem + Traits::kVRegion.offset},
        bars(smem + Traits::kBarrierRegion.offset),
        q_ring{bars + 8 * Traits::kQFullBarriers, bars + 8 * Traits::kQEmptyBarriers},
        kv_ring{bars + 8 * Traits::kKvFullBarrier, bars + 8 * Traits::kKvEmptyBarrier},
        item_slot(reinterpret_cast<volatile int*>(smem_generic + Traits::kSlotRegion.offset)),
        dq_tile(item_slot + Traits::kDqTileSlots),
        dq_n_block(item_slot + Traits::kDqNBlockSlots),
        convert_ring{bars + 8 * Traits::kConvertFullBarriers,
                     bars + 8 * Traits::kConvertEmptyBarriers},
        convert_ticket(const_cast<int*>(item_slot) + Traits::kConvertTicketSlot),
        convert_tile(convert_ticket + 1),
        n_blocks(params.n_blocks),
        m_end(params.tile_end[1]) {}

  /// The shared memory's 1024-byte aligned base (TMA's swizzled tiles and wgmma need it);
  /// traps where the kernel has no slack to align it and it is not aligned already.
  __device__ __forceinline__ static uint32_t aligned_base(unsigned char* smem_raw) {
    const uint32_t raw = hopper::smem_addr(smem_raw);
    const uint32_t aligned = (raw + 1023u) & ~1023u;
    if constexpr (Traits::kAlignmentSlack == 0) {
      if (aligned != raw) __trap();
    }
    return aligned;
  }

  __device__ __forceinline__ QTile q_tile(int s) const {
    return QTile{smem + Traits::kQRegion.offset + s * QTile::kBytes};
  }
  __device__ __forceinline__ QTile do_tile(int s) const {
    return QTile{smem + Traits::kDoRegion.offset + s * QTile::kBytes};
  }
  __device__ __forceinline__ DsTile ds_tile(int buffer, int c) const {
    return DsTile{smem + Traits::kDsRegion.offset + (buffer * kConsumers + c) * DsTile::kBytes};
  }
  /// Byte offsets (from smem) of a stage's lse2 and D, and of consumer c's dQ block staged at
  /// step `step`.
  __device__ __forceinline__ static int stats(int s) {
    return Traits::kStatsRegion.offset + s * Traits::kStatsBytes;
  }
  using DqRing = hopper::StageRing<Traits::kDqStages>;
  __device__ __forceinline__ static int dq_slot(int step, int c) {
    return DqRing::stage(step) * kConsumers + c;
  }
  __device__ __forceinline__ static int dq_block(int step, int c) {
    return Traits::kDqRegion.offset + dq_slot(step, c) * Traits::kDqBlockBytes;
  }
  __device__ __forceinline__ DqRing dq_ring(int c) const {
    return DqRing{bars + 8 * (Traits::kDqFullBarriers + c * Traits::kDqStages),
                  bars + 8 * (Traits::kDqEmptyBarriers + c * Traits::kDqStages)};
  }

  __device__ __forceinline__ Item item_of(int w) const {
    Item item;
    const HeadGroupItem unit = head_group_item(w, n_blocks, p.group_heads, p.BH);
    item.n_block = unit.index;
    item.bh = unit.bh;
    item.b = item.bh / p.NH;
    item.h = item.bh % p.NH;
    item.n0 = item.n_block * Traits::kBlockN;
    item.m_begin = next_tile(item.n0 / kBlockM);  // < m_end: every item has a query tile
    return item;
  }

  /// The first computed query tile at or after m (m_end: none).
  __device__ __forceinline__ int next_tile(int m) const {
    if (m < p.tile_begin[0]) return p.tile_begin[0];
    if (m >= p.tile_end[0] && m < p.tile_begin[1]) return p.tile_begin[1];
    return m;
  }
  /// An item's query tiles in the order the loader and the consumers take them: first_tile,
  /// then following_tile until it gives -1. Up from the diagonal, except in deterministic mode
  /// from 8 key blocks (walk_down): down from the last tile, so that key blocks of a head that
  /// start together (at long T the first wave holds ~10 of each head) meet each tile at the
  /// same step, and each waits for the one before it (write_dq) once, not a step more per key
  /// block, as going up (key block n + 1 reaches a tile a step before key block n) makes them:
  /// +2-4% at 4K-16K; at 1K-2K, with two writers and small head groups, +5-7% (bench/NOTES.md).
  /// bound: tile_bound(item), the end the walk stops at (held instead of m_end, one register).
  __device__ __forceinline__ int first_tile(const Item& item) const {
    return Traits::kDeterministic && p.walk_down ? m_end - 1 : item.m_begin;  // computed tiles
  }
  __device__ __forceinline__ int tile_bound(const Item& item) const {
    return Traits::kDeterministic && p.walk_down ? item.m_begin : m_end;
  }
  __device__ __forceinline__ bool last_tile(int bound, int m) const {
    if (Traits::kDeterministic && p.walk_down) return m == bound;  // the item's lowest tile
    return next_tile(m + 1) >= bound;
  }
  __device__ __forceinline__ int following_tile(int bound, int m) const {
    if (Traits::kDeterministic && p.walk_down) {
      // Down one tile, or from a range's first tile to the last of the range before.
      const int below = m == p.tile_begin[1] ? p.tile_end[0] - 1 : m - 1;
      return below >= bound ? below : -1;
    }
    const int above = next_tile(m + 1);
    return above < bound ? above : -1;
  }

  /// One thread, before the block's __syncthreads.
  __device__ __forceinline__ void init_barriers() const {
    kv_ring.init(1, kConsumers * 128);
    q_ring.init(1, kConsumers * 128);
    for (int c = 0; c < kConsumers; ++c) dq_ring(c).init(128, 1);
    if constexpr (Traits::kConvertsDq) {
      convert_ring.init(1, 32);
      *convert_ticket = 0;
    }
    hopper::fence_barrier_init();
  }

  __device__ __forceinline__ void load(const CUtensorMap& kv_map, const CUtensorMap& q_map,
                                       const CUtensorMap& dout_map) const {
    // Loader: per item, K and V (once the consumers are done with the last item's), then the
    // ring of query tiles; the item's first query tile is issued before waiting for K and V
    // to be free, so it lands while the consumers finish the last item.
    hopper::prefetch_tensor_map(&kv_map);
    hopper::prefetch_tensor_map(&q_map);
    hopper::prefetch_tensor_map(&dout_map);
    int step = 0;  // query tiles issued so far, over all items
    auto load_query_tile = [&](const Item& item, int m) {
      const int s = q_ring.stage(step);
      const uint32_t full = q_ring.full(step);
      q_ring.wait_empty(step);
      hopper::mbarrier_arrive_expect_tx(full, 2 * QTile::kBytes + Traits::kStatsBytes);
      q_tile(s).load(&q_map, full, item.h * kHeadDim, m * kBlockM, item.b);
      do_tile(s).load(&dout_map, full, item.h * kHeadDim, m * kBlockM, item.b);
      const int64_t row = (static_cast<int64_t>(item.bh) * p.num_m_tiles + m) * kBlockM;
      hopper::bulk_load(smem + stats(s), p.lse2 + row, kBlockM * 4, full);
      hopper::bulk_load(smem + stats(s) + kBlockM * 4, p.dsum + row, kBlockM * 4, full);
      ++step;
    };
    const WorkQueue queue{p.work_counter};
    for (int count = 0;; ++count) {
      const int w = queue.take();
      const bool done = w >= p.num_items;
      const Item item = item_of(done ? 0 : w);
      const int first = first_tile(item);  // every item has a query tile
      if (!done) load_query_tile(item, first);
      kv_ring.wait_empty(count);
      item_slot[count % 2] = done ? -1 : w;
      const uint32_t kv_full = kv_ring.full(count);
      if (done) {
        hopper::mbarrier_arrive(kv_full);  // the consumers read -1 and stop
        break;
      }
      hopper::mbarrier_arrive_expect_tx(kv_full, 2 * KVTile::kBytes);
      k_tile.load(&kv_map, kv_full, p.C + item.h * kHeadDim, item.n0, item.b);
      v_tile.load(&kv_map, kv_full, 2 * p.C + item.h * kHeadDim, item.n0, item.b);
      const int bound = tile_bound(item);
      for (int m = following_tile(bound, first); m >= 0; m = following_tile(bound, m))
        load_query_tile(item, m);
    }
  }

  __device__ __forceinline__ void write_dq(int writer) const {
    // dQ writer `writer` (of kDqWriters), steps writer, writer + kDqWriters, ...: per step,
    // once both consumers have staged their blocks of the step's tile, moves them into the
    // fp32 accumulator with one bulk copy each (reduce-adds; in deterministic mode stores from
    // key block 0), issued together, and frees their staging slots once the copy engine has
    // read them. Deterministic mode: a tile's semaphore counts the key blocks whose writes into
    // it have landed; key block n writes tile m once the count is n (key block n - 1 is done)
    // and passes it on as soon as its writes have landed (with the consumers already computing
    // on), so that the next key block, often only a step or two behind, waits as little as
    // possible.
    for (int step = writer;; step += Traits::kDqWriters) {
      dq_ring(0).wait_full(step);
      const int tile = dq_tile[dq_slot(step, 0)];
      if (tile < 0) break;  // only consumer 0 stages the end marks, one a writer
      for (int c = 1; c < kConsumers; ++c) dq_ring(c).wait_full(step);
      const int n_block = dq_n_block[dq_slot(step, 0)];
      int* semaphore = nullptr;
      if constexpr (Traits::kDeterministic) {
        semaphore = p.semaphores + tile;
        while (load_acquire(semaphore) != n_block) {
        }
        hopper::fence_proxy_async_global();  // the count before these copies' writes
      }
      for (int c = 0; c < kConsumers; ++c) {
        float* block = p.dq_accum + (static_cast<int64_t>(tile) * kConsumers + c) * 64 * 64;
        if (Traits::kDeterministic && n_block == 0) {
          hopper::bulk_store(block, smem + dq_block(step, c), Traits::kDqBlockBytes);
        } else {
          hopper::bulk_reduce_add_f32(block, smem + dq_block(step, c), Traits::kDqBlockBytes);
        }
      }
      hopper::bulk_commit_group();
      hopper::bulk_wait_group_read<0>();
      for (int c = 0; c < kConsumers; ++c) dq_ring(c).release(step);
      if (semaphore != nullptr) {
        hopper::bulk_wait_group<0>();
        hopper::fence_proxy_async_global();  // the copies' writes before the count
        red_release_add(semaphore, 1);
        // The tile's last key block (its diagonal): the tile is final, to bf16 with it.
        if (Traits::kConvertsDq && p.converts_dq &&
            n_block == (tile % p.num_m_tiles) * kBlockM / Traits::kBlockN)
          queue_conversion(tile);
      }
    }
    hopper::bulk_wait_group<0>();
    if (Traits::kConvertsDq && p.converts_dq) queue_conversion(-1);
  }

  /// A writer: tile (its writes landed, and made the generic proxy's) to the converter, or -1,
  /// this writer's end.
  __device__ __forceinline__ void queue_conversion(int tile) const {
    const int use = atomicAdd(convert_ticket, 1);
    convert_ring.wait_empty(use);
    convert_tile[ConvertRing::stage(use)] = tile;
    hopper::mbarrier_arrive(convert_ring.full(use));
  }

  /// The converter, warp 3 of the producer warpgroup (deterministic mode): each queued tile's
  /// packs to bf16 in dqkv's query columns, as launch 3 does in racing mode (dq_pack_*: the
  /// same arithmetic, so the same bits), kConvertPacks of a lane's loads in flight (from L2: the
  /// tile's last additions just landed); until both writers' end marks.
  __device__ __forceinline__ void convert_dq() const {
    constexpr int kPacksPerRow = kHeadDim / 8;
    constexpr int kTilePacks = kBlockM * kPacksPerRow;
    constexpr int kPacks = Traits::kConvertPacks;
    static_assert(kTilePacks % (32 * kPacks) == 0);
    const int lane = threadIdx.x % 32;
    for (int use = 0, ends = 0; ends < Traits::kDqWriters; ++use) {
      convert_ring.wait_full(use);
      const int tile = convert_tile[ConvertRing::stage(use)];
      convert_ring.release(use);  // every lane, once it has read the tile
      if (tile < 0) {
        ++ends;
        continue;
      }
      const int bh = tile / p.num_m_tiles;
      const int m0 = tile % p.num_m_tiles * kBlockM;
      const int rows = min(kBlockM, p.T - m0);  // the rest pad the tile
      const float* accum = p.dq_accum + static_cast<int64_t>(tile) * kBlockM * kHeadDim;
      bf16* out = p.dqkv + (static_cast<int64_t>(bh / p.NH) * p.T + m0) * 3 * p.C +
                  bh % p.NH * kHeadDim;
      for (int k = lane; k < kTilePacks; k += 32 * kPacks) {
        float4 packs[kPacks][2];
#pragma unroll
        for (int u = 0; u < kPacks; ++u) {
          const int row = (k + 32 * u) / kPacksPerRow;  // of the tile (kBlockM rows)
          const int pack = (k + 32 * u) % kPacksPerRow;
          const float4* source = hopper_backward::dq_pack_source(
              accum, row / kDqTileRows * kDqTileRows * kHeadDim, row % kDqTileRows, pack);
          packs[u][0] = __ldcg(source);
          packs[u][1] = __ldcg(source + 1);
        }
#pragma unroll
        for (int u = 0; u < kPacks; ++u) {
          const int row = (k + 32 * u) / kPacksPerRow;
          const int pack = (k + 32 * u) % kPacksPerRow;
          if (row < rows)
            *reinterpret_cast<int4*>(out + static_cast<int64_t>(row) * 3 * p.C + 8 * pack) =
                hopper_backward::dq_pack_bf16(packs[u][0], packs[u][1], p.scale);
        }
      }
    }
  }

  /// dK (times the scale) and dV of consumer c's 64 keys of the item, from its accumulators,
  /// through the consumer's dS^T buffer that the last step did not use (Traits::kStagesGrads):
  /// both warpgroups' dQ wgmma last read it two steps ago (see consume), and the next step
  /// writes it after this. Each warp puts its 16 rows of [dK | dV] there by stmatrix, a
  /// buffer's width (kBlockM columns) a round, and reads them back as 16-byte row pieces, so
  /// each store to global memory writes whole 128-byte lines of 4 rows. From registers, each
  /// warp's 4-byte stores touched 8 rows at once (the forward's epilogue took a quarter of an
  /// item's time at 1K that way; bench/NOTES.md, session seventeen).
  template <int kGradRegs>
  __device__ __forceinline__ void store_grads_staged(const Item& item, int c, int step,
                                                     float (&dk_acc)[kGradRegs],
                                                     const float (&dv_acc)[kGradRegs]) const {
    const int lane = threadIdx.x % 32;
    const int warp = (threadIdx.x % 128) / 32;
    const int store_row = 16 * warp + lane % 8 + 8 * ((lane / 8) % 2);  // by stmatrix
    const int store_col = 8 * (lane / 16);
    constexpr int kChunksPerRow = kBlockM / 8;  // 16-byte pieces of a staged row
#pragma unroll
    for (int i = 0; i < kGradRegs; ++i) dk_acc[i] *= p.scale;
    const DsTile staging = ds_tile(step % Traits::kDsBuffers, c);
    bf16* const key_rows = p.dqkv + static_cast<int64_t>(item.b) * p.T * 3 * p.C + p.C +
                           item.h * kHeadDim;  // dK of key 0; dV at + C
#pragma unroll
    for (int round = 0; round < 2 * kHeadDim / kBlockM; ++round) {
#pragma unroll
      for (int kk = 0; kk < kBlockM / 16; ++kk) {
        const int column = round * kBlockM + 16 * kk;  // of [dK | dV]
        uint32_t frag[4];
        if (column < kHeadDim) {
          hopper::accumulators_to_a_fragment(frag, dk_acc, column / 16);
        } else {
          hopper::accumulators_to_a_fragment(frag, dv_acc, (column - kHeadDim) / 16);
        }
        hopper::stmatrix_x4(staging.element(store_row, 16 * kk + store_col), frag);
      }
      __syncwarp();
#pragma unroll
      for (int piece = lane; piece < 16 * kChunksPerRow; piece += 32) {
        const int row = 16 * warp + piece / kChunksPerRow;
        const int chunk = piece % kChunksPerRow;
        const int column = round * kBlockM + 8 * chunk;  // of [dK | dV]
        const int key = item.n0 + 64 * c + row;
        const uint4 v = hopper::ld_shared_16(staging.element(row, 8 * chunk));
        if (key < p.T) {
          bf16* dst = key_rows + static_cast<int64_t>(key) * 3 * p.C +
                      (column < kHeadDim ? column : p.C + column - kHeadDim);
          *reinterpret_cast<uint4*>(dst) = v;
        }
      }
      __syncwarp();  // the pieces are read before the next round (or step) rewrites them
    }
  }

  /// dK (times the scale) and dV from registers: this thread's keys key0 and key0 + 8, columns
  /// 8 j + col_pair, + 1 (Traits::kStagesGrads off).
  template <int kGradRegs>
  __device__ __forceinline__ void store_grads_from_registers(
      const Item& item, int key0, int col_pair, const float (&dk_acc)[kGradRegs],
      const float (&dv_acc)[kGradRegs]) const {
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const int key = key0 + 8 * r;
      if (key < p.T) {
        bf16* dk_row = p.dqkv + (static_cast<int64_t>(item.b) * p.T + key) * 3 * p.C + p.C +
                       item.h * kHeadDim;
        bf16* dv_row = dk_row + p.C;
#pragma unroll
        for (int i = 0; i < kGradRegs; i += 4) {
          *reinterpret_cast<__nv_bfloat162*>(dk_row + 2 * i + col_pair) = __floats2bfloat162_rn(
              dk_acc[i + 2 * r] * p.scale, dk_acc[i + 2 * r + 1] * p.scale);
          *reinterpret_cast<__nv_bfloat162*>(dv_row + 2 * i + col_pair) =
              __floats2bfloat162_rn(dv_acc[i + 2 * r], dv_acc[i + 2 * r + 1]);
        }
      }
    }
  }

  __device__ __forceinline__ void consume(int c) const {
    const int tid = threadIdx.x % 128;
    const int lane = threadIdx.x % 32;
    const int warp = tid / 32;
    const hopper::AccumulatorLayout fragment(lane);
    const int col_pair = fragment.col;
    const int store_row = 16 * warp + lane % 8 + 8 * ((lane / 8) % 2);  // of dS^T, by stmatrix
    const int store_col = 8 * (lane / 16);
    constexpr int kSRegs = kBlockM / 2;       // S^T, dP^T accumulators (64 keys x kBlockM)
    constexpr int kGradRegs = kHeadDim / 2;   // dK, dV accumulators (64 keys x kHeadDim)
    constexpr int kSlabs = kBlockM / 16;      // k16 slabs of the query dimension
    constexpr int kConsumerBarrier = 1;       // named barrier of the two consumer warpgroups
    // This consumer's dQ block: columns of the dS^T tiles (queries) and of K (head dims).
    constexpr bool kSplitQueries = Traits::kDqSplitsQueries;
    const int ds_column_block = kSplitQueries ? c : 0;
    const int k_column_block = kSplitQueries ? 0 : c;

    int step = 0;  // query tiles processed so far, over all items (ring stages and phases)
    for (int count = 0;; ++count) {
      kv_ring.wait_full(count);
      // Read by every lane, broadcast from lane 0 so that the compiler knows the item (and with
      // it the loop over query tiles) is warp-uniform: the tiles' wgmma descriptors are then
      // uniform-register arithmetic, not per-thread values moved over (R2UR) at each wgmma.
      const int w = __shfl_sync(0xffffffffu, item_slot[count % 2], 0);
      if (w < 0) break;
      const Item item = item_of(w);
      const int key0 = item.n0 + 64 * c + 16 * warp + fragment.row;  // keys key0, key0 + 8

      float dk_acc[kGradRegs];
      float dv_acc[kGradRegs];
    #pragma unroll
      for (int i = 0; i < kGradRegs; ++i) dk_acc[i] = dv_acc[i] = 0.f;

      const int bound = tile_bound(item);
      for (int m = first_tile(item); m >= 0; m = following_tile(bound, m), ++step) {
        const int s = q_ring.stage(step);
        const int m0 = m * kBlockM;
        q_ring.wait_full(step);

        float st[kSRegs];   // S^T, then P^T
        float dpt[kSRegs];  // dP^T, then dS^T
        hopper::wgmma_fence();
    #pragma unroll
        for (int kk = 0; kk < kHeadDim / 16; ++kk)
          hopper::wgmma_ss<kBlockM, 0, 0>(st, k_tile.k_major(64 * c, kk),
                                          q_tile(s).k_major(0, kk), kk > 0);
    #pragma unroll
        for (int kk = 0; kk < kHeadDim / 16; ++kk)
          hopper::wgmma_ss<kBlockM, 0, 0>(dpt, v_tile.k_major(64 * c, kk),
                                          do_tile(s).k_major(0, kk), kk > 0);
        hopper::wgmma_commit_group();
        hopper::wgmma_wait_group<0>();
        hopper::fence_operands(st);
        hopper::fence_operands(dpt);

        // Accumulator i is query column 8 (i / 4) + col_pair + (i % 2) (scalar loads: the four
        // addresses of a warp share one wavefront, and wider loads hold registers S^T needs).
        const float* lse2_row =
            reinterpret_cast<const float*>(smem_generic + stats(s)) + col_pair;
        const float* dsum_row = lse2_row + kBlockM;
        // P^T = exp2(S^T scale log2e - lse2) (0 above the diagonal), dS^T = P^T (dP^T - D); the
        // masked variant only where some key of this warpgroup is past some query of the tile.
        auto probabilities = [&](auto masked) {
    #pragma unroll
          for (int g = 0; g < kBlockM / 16; ++g) {
            // Columns 16 g + col_pair + {0, 1, 8, 9}: accumulators 8 g .. 8 g + 7.
            const float* lp = lse2_row + 16 * g;
            const float* dp = dsum_row + 16 * g;
            const float lse2[4] = {lp[0], lp[1], lp[8], lp[9]};
            const float dsum[4] = {dp[0], dp[1], dp[8], dp[9]};
    #pragma unroll
            for (int u = 0; u < 8; ++u) {
              const int i = 8 * g + u;
              const int v = 2 * (u / 4) + (u % 2);
              float prob = hopper::exp2_approx(fmaf(st[i], p.scale_log2, -lse2[v]));
              if constexpr (decltype(masked)::value) {
                const int col = col_pair + hopper::AccumulatorLayout::column_offset(i);  // - m0
                const int key = key0 + hopper::AccumulatorLayout::row_offset(i);
                if (key > m0 + col) prob = 0.f;
              }
              st[i] = prob;
              dpt[i] = prob * (dpt[i] - dsum[v]);
            }
          }
        };
        if (m0 < item.n0 + 64 * c + 63) {
          probabilities(std::true_type{});
        } else {
          probabilities(std::false_type{});
        }
        uint32_t p_frag[kSlabs][4];
        uint32_t ds_frag[kSlabs][4];
    #pragma unroll
        for (int kk = 0; kk < kSlabs; ++kk) {
          hopper::accumulators_to_a_fragment(p_frag[kk], st, kk);
          hopper::accumulators_to_a_fragment(ds_frag[kk], dpt, kk);
        }

        hopper::wgmma_fence();
    #pragma unroll
        for (int kk = 0; kk < kSlabs; ++kk)
          hopper::wgmma_rs<kHeadDim, 1>(dv_acc, p_frag[kk], do_tile(s).mn_major(16 * kk), true);
        hopper::wgmma_commit_group();

        // dS^T to shared memory (rows = keys, columns = queries) for dQ = dS K. This buffer was
        // last read by both warpgroups' dQ wgmma two steps ago: this warpgroup waited for its
        // own, and the other one finished its before it reached last step's barrier. One
        // stmatrix per 16 x 16 block: lane l addresses row l % 8 (+ 8 for matrices 1 and 3) and
        // column 8 (l / 16) of the slab.
        const int buffer = step % Traits::kDsBuffers;
        const DsTile my_ds = ds_tile(buffer, c);
    #pragma unroll
        for (int kk = 0; kk < kSlabs; ++kk)
          hopper::stmatrix_x4(my_ds.element(store_row, 16 * kk + store_col), ds_frag[kk]);
        hopper::fence_proxy_async_shared();
        hopper::named_barrier_sync(kConsumerBarrier, kConsumers * 128);  // both dS^T are stored

        // This consumer's 64 x 64 block of dQ over all 128 keys (both warpgroups' dS^T).
        float dq[32];
        hopper::wgmma_fence();
    #pragma unroll
        for (int w2 = 0; w2 < kConsumers; ++w2)
    #pragma unroll
          for (int kk = 0; kk < 4; ++kk)
            hopper::wgmma_ss<64, 1, 1>(dq, ds_tile(buffer, w2).mn_major(16 * kk, ds_column_block),
                                       k_tile.mn_major(64 * w2 + 16 * kk, k_column_block),
                                       w2 > 0 || kk > 0);
        hopper::wgmma_commit_group();
        // dK after dQ, as FlashAttention-3 orders them: the dQ block is staged while dK runs.
    #pragma unroll
        for (int kk = 0; kk < kSlabs; ++kk)
          hopper::wgmma_rs<kHeadDim, 1>(dk_acc, ds_frag[kk], q_tile(s).mn_major(16 * kk), true);
        hopper::wgmma_commit_group();
        hopper::wgmma_wait_group<1>();  // dV and dQ
        hopper::fence_operands(dq);

        // Stage the block (fragment order: float2 j of this thread at [j * 128 + tid]).
        dq_ring(c).wait_empty(step);
        float2* staged = reinterpret_cast<float2*>(smem_generic + dq_block(step, c));
    #pragma unroll
        for (int j = 0; j < 16; ++j) staged[j * 128 + tid] = make_float2(dq[2 * j], dq[2 * j + 1]);
        if (tid == 0) {
          dq_tile[dq_slot(step, c)] = item.bh * p.num_m_tiles + m;
          dq_n_block[dq_slot(step, c)] = item.n_block;
        }
        hopper::fence_proxy_async_shared();
        hopper::mbarrier_arrive(dq_ring(c).full(step));
        hopper::wgmma_wait_group<0>();  // dK
        hopper::fence_operands(dk_acc);
        hopper::fence_operands(dv_acc);
        q_ring.release(step);  // Q, dO and the stats of this stage are consumed
        if (last_tile(bound, m)) kv_ring.release(count);  // K and V are free
      }

      // dK = scale * dS^T Q and dV, rows = this warpgroup's keys (while the loader fetches the
      // next item's K and V).
      if constexpr (Traits::kStagesGrads) {
        store_grads_staged(item, c, step, dk_acc, dv_acc);
      } else {
        store_grads_from_registers(item, key0, col_pair, dk_acc, dv_acc);
      }
    }

    // The end marks for the writers, staged like blocks by consumer 0.
    if (c == 0) {
    #pragma unroll
      for (int writer = 0; writer < Traits::kDqWriters; ++writer) {
        const int end = step + writer;
        dq_ring(0).wait_empty(end);
        if (tid == 0) dq_tile[dq_slot(end, 0)] = -1;
        hopper::mbarrier_arrive(dq_ring(0).full(end));
      }
    }
  }
};

template <typename Traits>
__global__ void __launch_bounds__(Traits::kThreads, 1)
    hopper_backward_kernel(const __grid_constant__ CUtensorMap kv_map,
                           const __grid_constant__ CUtensorMap q_map,
                           const __grid_constant__ CUtensorMap dout_map,
                           const HopperBackwardParams p) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  extern __shared__ unsigned char smem_raw[];
  const HopperBackwardBlock<Traits> block(p, smem_raw);
  if (threadIdx.x == 0) block.init_barriers();
  __syncthreads();
  const int warpgroup = __shfl_sync(0xffffffffu, threadIdx.x / 128, 0);  // warp-uniform
  if (warpgroup == 0) {
    hopper::setmaxnreg_dec<Traits::kProducerRegisters>();
    if (threadIdx.x == 0) {
      block.load(kv_map, q_map, dout_map);
    } else if (threadIdx.x == 32 || (Traits::kDqWriters == 2 && threadIdx.x == 64)) {
      block.write_dq(threadIdx.x / 32 - 1);
    } else if (Traits::kConvertsDq && p.converts_dq && threadIdx.x / 32 == 3) {
      block.convert_dq();
    }
    return;
  }
  hopper::setmaxnreg_inc<Traits::kConsumerRegisters>();
  block.consume(warpgroup - 1);
#else
  __trap();  // built without sm_90a code: the dispatch never launches this
#endif
}

template <typename Traits>
void launch_hopper_backward(bf16* dqkv, const bf16* dout, const bf16* qkv, const bf16* out,
                            const float* lse, int B, int T, int C, int NH, void* workspace,
                            int max_blocks, const QueryRows& rows, int converts_dq_from_t,
                            cudaStream_t stream) {
  constexpr int kHeadDim = Traits::kHeadDim;
  constexpr bool deterministic = Traits::kDeterministic;
  const HopperBackwardWorkspace ws(workspace, B, T, C, NH);
  GPT2_CHECK(ws.block_m == Traits::kBlockM, "backward workspace laid out for another tile");
  const int BH = B * NH;
  const int T_pad = ws.T_pad;
  const int64_t stat_rows = static_cast<int64_t>(BH) * T_pad;
  {
    const int warps = 8;
    const int64_t rows_per_block = warps * 32 / (kHeadDim / 8);
    const int64_t blocks = (stat_rows + rows_per_block - 1) / rows_per_block;
    hopper_backward_preprocess_kernel<kHeadDim, Traits::kBlockM>
        <<<static_cast<unsigned>(blocks), 32 * warps, 0, stream>>>(
            ws.lse2, ws.dsum, deterministic ? nullptr : ws.dq_accum, ws.semaphores,
            ws.work_counter, lse, dout, out, T, T_pad, NH, stat_rows);
    GPT2_CUDA_CHECK_LAUNCH();
  }

  const uint64_t qkv_dims[3] = {3ull * C, static_cast<uint64_t>(T), static_cast<uint64_t>(B)};
  const uint64_t dout_dims[3] = {static_cast<uint64_t>(C), static_cast<uint64_t>(T),
                                 static_cast<uint64_t>(B)};
  const CUtensorMap kv_map = make_tensor_map_bf16_3d(qkv, qkv_dims, 3ull * C * 2,
                                                     3ull * C * 2 * T, 64, Traits::kBlockN);
  const CUtensorMap q_map = make_tensor_map_bf16_3d(qkv, qkv_dims, 3ull * C * 2, 3ull * C * 2 * T,
                                                    64, Traits::kBlockM);
  const CUtensorMap dout_map =
      make_tensor_map_bf16_3d(dout, dout_dims, 1ull * C * 2, 1ull * C * 2 * T, 64, Traits::kBlockM);
  const float scale = static_cast<float>(1.0 / std::sqrt(double(kHeadDim)));
  // The query tiles of the rows (whole tiles: the ranges start on kQueryRowsGranule and end on
  // it or at T), and the key blocks up to the last computed row.
  static_assert(kQueryRowsGranule % Traits::kBlockM == 0 &&
                kQueryRowsGranule % Traits::kBlockN == 0);
  const QueryRows all{1, {0, 0}, {T, 0}};
  const QueryRows& r = rows.count == 0 ? all : rows;
  auto tiles = [](int row) { return (row + Traits::kBlockM - 1) / Traits::kBlockM; };
  const int n_blocks = (r.end[r.count - 1] + Traits::kBlockN - 1) / Traits::kBlockN;
  const int64_t items = static_cast<int64_t>(n_blocks) * BH;
  GPT2_CHECK(items < (int64_t{1} << 31), "too many attention work items: ", items);
  HopperBackwardParams params{};
  params.lse2 = ws.lse2;
  params.dsum = ws.dsum;
  params.dq_accum = ws.dq_accum;
  params.semaphores = ws.semaphores;
  params.work_counter = ws.work_counter;
  params.dqkv = dqkv;
  params.T = T;
  params.C = C;
  params.NH = NH;
  params.BH = BH;
  params.num_m_tiles = ws.num_m_tiles;
  params.tile_begin[0] = r.begin[0] / Traits::kBlockM;
  params.tile_end[0] = tiles(r.end[0]);
  params.tile_begin[1] = r.count == 2 ? r.begin[1] / Traits::kBlockM : params.tile_end[0];
  params.tile_end[1] = r.count == 2 ? tiles(r.end[1]) : params.tile_end[0];
  params.n_blocks = n_blocks;
  params.num_items = static_cast<int>(items);
  static const int walk_down_blocks =
      attention_hopper_env_knob("GPT2_HOPPER_BACKWARD_WALK_DOWN_BLOCKS", 8);
  params.walk_down = deterministic && n_blocks >= walk_down_blocks;  // (first_tile)
  // The in-kernel dQ conversion from converts_dq_from_t (kHopperConvertsDqFromT by default).
  const bool converts_dq = Traits::kConvertsDq && T >= converts_dq_from_t;
  params.converts_dq = converts_dq;
  params.scale = scale;
  params.scale_log2 = scale * flash::kLog2e;
  auto kernel = hopper_backward_kernel<Traits>;
  GPT2_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                       Traits::kSmemBytes));
  // Persistent: one block per SM (the shared memory allows no more), each taking items until
  // none is left.
  const int sms = hopper::current_device_sms();
  GPT2_CHECK(max_blocks >= 0, "max_blocks = ", max_blocks, " (0: one block per SM)");
  const int grid = static_cast<int>(
      std::min<int64_t>({items, sms, max_blocks > 0 ? max_blocks : int64_t{sms}}));
  // Items per head group: three per block; in deterministic mode two, and at long T (long
  // chains) at least n_blocks / 5 per block, so that key block n of a head starts enough steps
  // after key block n - 1 (about group_heads * n_blocks / (2 grid)) that the chain of n_blocks
  // fixed-order additions rarely waits (bench/NOTES.md: backward head groups; with one writer
  // six per block did best, with two, two or three: +5-23% at 512-2K). The two, and the 8 key
  // blocks from which deterministic items walk down, can be set for the benchmark
  // (GPT2_HOPPER_BACKWARD_DETERMINISTIC_GROUP_ITEMS, _WALK_DOWN_BLOCKS), and racing's three
  // (_RACING_GROUP_ITEMS).
  static const int deterministic_group_items =
      attention_hopper_env_knob("GPT2_HOPPER_BACKWARD_DETERMINISTIC_GROUP_ITEMS", 2);
  static const int racing_group_items =
      attention_hopper_env_knob("GPT2_HOPPER_BACKWARD_RACING_GROUP_ITEMS", 3);
  const int64_t group_items =
      deterministic ? std::max<int64_t>(int64_t{deterministic_group_items} * grid,
                                        int64_t{n_blocks} * grid / 5)
                    : int64_t{racing_group_items} * grid;
  params.group_heads = schedule_group_heads(n_blocks, BH, group_items);
  kernel<<<grid, Traits::kThreads, Traits::kSmemBytes, stream>>>(kv_map, q_map, dout_map, params);
  GPT2_CUDA_CHECK_LAUNCH();

  if (!converts_dq) {
    const int64_t packs = stat_rows * kHeadDim / 8;
    const int threads = 256;
    hopper_backward_write_dq_kernel<kHeadDim>
        <<<static_cast<unsigned>((packs + threads - 1) / threads), threads, 0, stream>>>(
            dqkv, ws.dq_accum, T, C, NH, T_pad / kDqTileRows, packs, scale);
    GPT2_CUDA_CHECK_LAUNCH();
  }
}

// The longest T at which head size 128 stages dK and dV by default: kHopperStagesGradsMaxT, or
// GPT2_HOPPER_BACKWARD_STAGES_GRADS_MAX_T for the benchmark's A/B of the two stores on one
// build (read once).
int default_stages_grads_max_t() {
  static const int max_t = attention_hopper_env_knob("GPT2_HOPPER_BACKWARD_STAGES_GRADS_MAX_T",
                                                     kHopperStagesGradsMaxT);
  return max_t;
}

}  // namespace

size_t attention_hopper_workspace_bytes(int B, int T, int C, int NH) {
  return HopperBackwardWorkspace(nullptr, B, T, C, NH).bytes;
}

int* attention_hopper_work_counter(void* workspace, int B, int T, int C, int NH) {
  return HopperBackwardWorkspace(workspace, B, T, C, NH).work_counter;
}

void attention_hopper_backward(bf16* dqkv, const bf16* dout, const bf16* qkv, const bf16* out,
                               const float* lse, int B, int T, int C, int NH, void* workspace,
                               bool deterministic, int max_blocks, cudaStream_t stream,
                               const QueryRows& rows, int converts_dq_from_t,
                               int stages_grads_max_t) {
  const int head_size = flash::checked_head_size(B, T, C, NH);
  auto launch = [&](auto traits) {
    launch_hopper_backward<decltype(traits)>(dqkv, dout, qkv, out, lse, B, T, C, NH, workspace,
                                             max_blocks, rows, converts_dq_from_t, stream);
  };
  const int staged_max_t =
      stages_grads_max_t >= 0 ? stages_grads_max_t : default_stages_grads_max_t();
  if (head_size == 64) {
    deterministic ? launch(HopperBackwardTraits<64, true>{})
                  : launch(HopperBackwardTraits<64, false>{});
  } else if (T <= staged_max_t) {
    deterministic ? launch(HopperBackwardTraits<128, true>{})
                  : launch(HopperBackwardTraits<128, false>{});
  } else {
    deterministic ? launch(HopperBackwardTraits<128, true, false>{})
                  : launch(HopperBackwardTraits<128, false, false>{});
  }
}

}  // namespace gpt2::gpu
