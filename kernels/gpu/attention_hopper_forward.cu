/**
 * @file attention_hopper_forward.cu
 * @brief Flash-attention forward for Hopper (sm_90a): TMA, wgmma, warp specialization.
 *
 * out (B,T,C) bf16 and lse (B,NH,T) fp32 (natural log) from qkv (B,T,3C) bf16; causal; head
 * size 64 or 128; any T. Same contract and CPU twin as the portable kernel
 * (cpu::attention_flash_forward). Parallel scheme (FlashAttention-3's):
 *  - work items of (64 or 128 query rows, b, h, see below); heads in groups (group_heads,
 *    about two waves of items), a group's items longest row first and heads interleaved, so
 *    the K and V tiles that a group's items re-read stay in L2 (ordered by row alone, a wave at
 *    short T spans every head, and the re-reads came from DRAM: 1K was 20% slower);
 *  - the shapes with a producer at T <= 4096 at head size 64 and T <= 16384 at 128
 *    (hopper_forward_persistent_max_t), or at any T when the caller caps the grid
 *    (max_blocks > 0), run persistent (HopperForwardTraits::kPersistent): as many blocks as the SMs hold, each taking its next item from a work
 *    queue (WorkQueue: a counter in the workspace, zeroed on the stream before the launch)
 *    until none is left, its rings and barriers running on from item to item, so the next
 *    item's Q and first K and V tiles load while the consumers finish the last one and write
 *    its output. A queue, not a fixed order of items per block: items differ in length and
 *    head groups do not align with waves of blocks (a fixed order gave some blocks two long
 *    items in a row, bench/NOTES.md);
 *  - otherwise (longer T, and the shape without a producer at any T) one block an item, unit
 *    blockIdx.x, its rings from use 0, no queue and no workspace: there the persistent kernel
 *    measured 1-2.4% slower (head size 64, 8K-16K) or level (128, 32K);
 *  - warpgroup 0 is the producer: one thread issues TMA copies of the item's Q tile and of a
 *    ring of kStages K and V tiles (kBlockN keys each, key tiles from the diagonal down), gives
 *    its registers away (setmaxnreg) and waits on the ring's empty barriers; persistent, it
 *    takes each item from the queue, hands it to the consumers through shared memory with the
 *    Q tile's barrier, and copies its Q tile into a ring of Q stages (two, or three where O
 *    goes out through the Q tile) once the consumers are done with the stage (q_ring);
 *  - the other warpgroups are consumers, 64 query rows each: S = Q K^T by wgmma from shared
 *    memory into fp32 registers, the online softmax in registers (log2 domain, exp2 with the
 *    scale folded into one FMA), P packed to bf16 in registers as the A operand of O += P V.
 *    S of tile j is issued with P V of tile j - 1, and tile j's softmax follows S(j)'s wait.
 *    ptxas places P V's wait before the exponentials (the SASS of every shape), so inside a
 *    warpgroup only the row maxima overlap P V; the exponentials overlap the other consumer's
 *    GEMMs (the SM's other block, or the turns below). Keeping them under P V, and issuing
 *    S(j + 1) before the softmax of tile j, both measured slower (bench/NOTES.md: the
 *    forward's softmax against its GEMMs). With two consumers the epilogue writes O into each
 *    consumer's rows of the Q tile (stmatrix) and one thread stores them with TMA (o_map).
 * Three shapes of block: 128 query rows (two consumers, one block per SM: every K/V tile serves
 * 128 rows), 64 (one consumer, two blocks per SM, so one block's prologue, first tile and
 * epilogue overlap the other's main loop), or 64 rows without the producer, thread 0 of the
 * one warpgroup issuing the copies, so three blocks share an SM at head size 64 (two at 128).
 * The launcher picks by head size unless told (attention_hopper_forward_shape); the third shape
 * is run only when forced (tests, benchmark).
 * The roles are members of HopperForwardBlock (below): item_of (a block's query block),
 * produce (the producer's thread), prefill (thread 0 without a producer), consume (a consumer
 * warpgroup).
 * Only the first (diagonal) key tile needs masking (keys after the query or at/after T).
 * With QueryRows (attention.cuh) the blocks cover the ranges' rows only.
 * Nothing of size T x T exists; the only global writes are out, lse and (persistent) the work
 * counter.
 */
#include "kernels/gpu/attention_hopper.cuh"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <type_traits>

#include "base/error.h"
#include "kernels/gpu/attention_flash_common.cuh"
#include "kernels/gpu/attention_hopper_softmax.cuh"
#include "kernels/gpu/attention_hopper_tiles.cuh"
#include "kernels/gpu/attention_schedule.h"
#include "kernels/gpu/tensor_map.cuh"

namespace gpt2::gpu {
namespace {

using bf16 = __nv_bfloat16;
using hopper::SmemTile;

struct HopperForwardParams {
  bf16* out;  // stored from registers (one consumer); two store through o_map
  float* lse;
  int T, C, NH, BH;
  int num_m_blocks;  // query blocks per head, over both row ranges
  // The query rows (QueryRows, attention.cuh): blocks 0 .. first_blocks - 1 cover rows from
  // begin0, the rest rows from begin1.
  int first_blocks, begin0, begin1;
  int group_heads;   // heads scheduled together (see the file comment)
  float scale_log2;  // softmax scale * log2(e)
};

// The persistent kernels' parameters (HopperForwardTraits::kPersistent): the items,
// num_m_blocks * BH, and the next unit of the schedule (WorkQueue), zeroed before the launch.
// A kernel of one item a block takes HopperForwardParams alone, so its parameters are those it
// had before the persistent kernel existed.
struct HopperForwardQueueParams : HopperForwardParams {
  int num_items;
  int* work_counter;
};

// The named barriers of the consumers' turns (HopperForwardTraits::kPingPong): 1 and 2 (0 is
// __syncthreads); of consumer c's epilogue (its 128 threads, HopperForwardTraits::
// kStoresOByTma): kEpilogueBarrier + c, 3 and 4.
constexpr int kTurnBarrier = 1;
constexpr int kEpilogueBarrier = 3;

template <int kHeadDim_, int kConsumers_, bool kProducer_ = true, bool kPersistent_ = false>
struct HopperForwardTraits {
  static constexpr int kHeadDim = kHeadDim_;
  static constexpr int kConsumers = kConsumers_;   // consumer warpgroups, 64 query rows each
  // With a producer warpgroup (setmaxnreg moves its registers to the consumers); without one,
  // thread 0 of the single consumer issues the copies and three blocks share an SM.
  static constexpr bool kProducer = kProducer_;
  // Persistent (with a producer only): each block takes items from the work queue until none is
  // left, the producer handing each to the consumers (item slots, q_empty); otherwise one item
  // a block, unit blockIdx.x.
  static constexpr bool kPersistent = kPersistent_;
  static constexpr int kBlockM = 64 * kConsumers;  // query rows per block
  // Without a producer, blocks as many as the shared memory holds: three at head size 64, two
  // at 128.
  static constexpr int kBlocksPerSm = kProducer ? 3 - kConsumers : (kHeadDim == 64 ? 3 : 2);
  // Keys per K/V tile: 128, but 64 at head size 128 with two blocks per SM (shared memory).
  static constexpr int kBlockN = kConsumers == 1 && kHeadDim == 128 ? 64 : 128;
  static constexpr int kStages = 2;
  // Two consumers take turns at the tensor cores (FlashAttention-3's warp scheduling): each
  // issues its GEMMs only on its turn, named barrier kTurnBarrier + its index, and passes the
  // turn on once they are issued, so one's softmax runs under the other's GEMMs.
  static constexpr bool kPingPong = kConsumers == 2;
  static constexpr int kThreads = 128 * (kConsumers + (kProducer ? 1 : 0));
  static constexpr int kProducerRegisters = 24;
  // The register file (64K) shared by kBlocksPerSm blocks: 240 + 240 + 24 or 232 + 24 (x 2).
  static constexpr int kConsumerRegisters = kConsumers == 2 ? 240 : 232;
  using Params = std::conditional_t<kPersistent, HopperForwardQueueParams, HopperForwardParams>;
  using QTile = SmemTile<kBlockM, kHeadDim>;
  using KVTile = SmemTile<kBlockN, kHeadDim>;
  // The epilogue: two consumers write O into their rows of the Q tile and store it by TMA
  // (head size 128 forward +18% at 512, +15% at 1K, +5% at 2K); one consumer stores it from
  // registers (through shared memory, head size 64 measured level: bench/NOTES.md, session
  // seventeen).
  static constexpr bool kStoresOByTma = kConsumers == 2;
  // Persistent with one consumer: the next item's first S is issued as soon as this item's last
  // P V is, so that GEMM runs under the P V and the epilogue, and the wait for the next item's
  // Q and unit overlaps the P V; the next item then starts at its first softmax. (Persistent
  // items are short: at head size 64, 1K, the Q wait, last P V and epilogue were a fifth of an
  // item, bench/NOTES.md session seventeen.) Two consumers keep their turns: early scores there
  // measured level at 2K-16K and 2-3% slower at 1K, the S issued after the turn or within it
  // (head size 128, session twenty-three).
  static constexpr bool kEarlyScores = kPersistent && kConsumers == 1;
  // Query tiles: persistent, more than one, so the next item's Q is copied while this item
  // runs (its copy is issued once the producer has issued this item's K and V, two key tiles
  // before the item's end, instead of after its last S); three where O is stored through the
  // Q tile, which then stays busy until the store has read it. One item a block: one.
  static constexpr int kQStages = kPersistent ? (kStoresOByTma ? 3 : 2) : 1;
  // q_full[], k_full[], v_full[], k_empty[], v_empty[], and persistent q_empty[].
  static constexpr int kNumBarriers = kQStages + 4 * kStages + (kPersistent ? kQStages : 0);
  // Persistent: the slots that hand each item's unit from the producer to the consumers, one
  // a Q stage (item j's: item_slot[j % kQStages]), so a slot is rewritten only once every
  // consumer thread gave back the Q stage of the item that last used it.
  static constexpr int kItemSlots = kPersistent ? kQStages : 0;
  // Shared memory: the query tile, the K ring, the V ring, the barriers.
  static constexpr hopper::SmemRegion kQRegion{0, kQStages * QTile::kBytes};
  static constexpr hopper::SmemRegion kKRegion = kQRegion.next(kStages * KVTile::kBytes, 1024);
  static constexpr hopper::SmemRegion kVRegion = kKRegion.next(kStages * KVTile::kBytes, 1024);
  static constexpr hopper::SmemRegion kBarrierRegion = kVRegion.next(8 * kNumBarriers, 8);
  static constexpr hopper::SmemRegion kSlotRegion = kBarrierRegion.next(4 * kItemSlots, 4);
  static constexpr int kSmemBytes = kSlotRegion.end() + 1024;  // + the base's alignment
  static_assert(kConsumers == 1 || kConsumers == 2, "one or two consumer warpgroups");
  // Key tiles aligned to kBlockN hold whole query blocks: only the block's last (diagonal) key
  // tile needs the causal mask, and it has a key <= every row.
  static_assert(kBlockN % kBlockM == 0, "the diagonal key tile must be the block's last");
  static_assert(!kProducer ||
                    (kConsumers * kConsumerRegisters + kProducerRegisters) * 128 <=
                        hopper::launch_registers(kThreads * kBlocksPerSm) * kThreads,
                "setmaxnreg budgets exceed the block's registers");
  static_assert(kProducer || kConsumers == 1, "without a producer: one consumer warpgroup");
  static_assert(kProducer || !kPersistent, "persistent: the shapes with a producer only");
  static_assert(kSmemBytes * kBlocksPerSm <= 227 * 1024, "shared memory per SM");
};

// Scores of keys after their row, or at or after T, to -inf: the diagonal key tile's, key0 the
// thread's first key and row0 its first row (hopper::AccumulatorLayout).
template <int kSRegs>
__device__ __forceinline__ void mask_diagonal(float (&s_acc)[kSRegs], int key0, int row0, int T) {
#pragma unroll
  for (int i = 0; i < kSRegs; ++i) {
    const int key = key0 + hopper::AccumulatorLayout::column_offset(i);
    const int row = row0 + hopper::AccumulatorLayout::row_offset(i);
    if (key > row || key >= T) s_acc[i] = -INFINITY;
  }
}

// The rings' uses before the item when a block takes one item: a compile-time 0.
constexpr std::integral_constant<int, 0> kNoUses{};

// Profiling build only (-DGPT2_FORWARD_PHASES): SM cycles per phase of the persistent forward,
// summed over blocks by thread 0 of each consumer warpgroup and the producer's thread
// (attention_hopper_forward_phases reads and clears them).
#if defined(GPT2_FORWARD_PHASES)
__device__ unsigned long long g_forward_phases[kForwardPhases];
__device__ __forceinline__ long long phase_clock() { return clock64(); }
__device__ __forceinline__ void phase_add(int phase, long long from, long long to) {
  if (threadIdx.x % 128 == 0)
    atomicAdd(&g_forward_phases[phase], static_cast<unsigned long long>(to - from));
}
#else
__device__ __forceinline__ long long phase_clock() { return 0; }
__device__ __forceinline__ void phase_add(int, long long, long long) {}
#endif

// The query block a block works on: rows m0 .. m0 + kBlockM - 1 of head bh = b * NH + h, whose
// columns of q, k and v start at head_col = h * head size, over key tiles n_blocks - 1 (the
// diagonal) down to 0.
struct ForwardItem {
  int m0, n_blocks, b, bh;
  int head_col;  // set_head_col
};

// One block's state and roles: where its tiles and barriers sit in shared memory, the copies
// (load_q, load_k, load_v, produce: one thread), and a consumer warpgroup's work on an item
// (consume). Device code; every member inlined into the kernel.
template <typename Traits>
struct HopperForwardBlock {
  static constexpr int kHeadDim = Traits::kHeadDim;
  static constexpr int kBlockN = Traits::kBlockN;
  static constexpr int kStages = Traits::kStages;
  using QTile = typename Traits::QTile;
  using KVTile = typename Traits::KVTile;
  static constexpr int kSRegs = kBlockN / 2;  // S accumulators (64 x kBlockN per warpgroup)

  // Traits::kEarlyScores, between a consumer's items: in, whether the item's first S is
  // already issued (into s_acc, by the item before); out, the next item's unit (-1: none).
  struct LookAhead {
    bool scores_issued = false;
    int next_unit = -1;
  };

  const CUtensorMap* q_map;
  const CUtensorMap* kv_map;
  const CUtensorMap* o_map;
  const HopperForwardParams& p;
  const uint32_t smem;  // 1024-byte aligned base
  // The query tiles, by the block's item index j: full barriers first, then the K and V rings'
  // full barriers, their empty ones, and (persistent) the Q tiles' empty ones, on which the
  // consumers give a Q tile back.
  const hopper::StageRing<Traits::kQStages> q_ring;
  const hopper::StageRing<kStages> k_ring, v_ring;
  // Persistent: the slots that hand the j-th item's unit to the consumers
  // (item_slot[j % kItemSlots]; -1: none left).
  volatile int* const item_slot;

  // smem_ and smem_generic_: the same 1024-byte aligned base as a shared-window address and as
  // a generic pointer.
  __device__ __forceinline__ HopperForwardBlock(const CUtensorMap* q_map_,
                                                const CUtensorMap* kv_map_,
                                                const CUtensorMap* o_map_,
                                                const HopperForwardParams& p_, uint32_t smem_,
                                                unsigned char* smem_generic_)
      : q_map(q_map_),
        kv_map(kv_map_),
        o_map(o_map_),
        p(p_),
        smem(smem_),
        q_ring{smem_ + Traits::kBarrierRegion.offset,
               smem_ + Traits::kBarrierRegion.offset + 8 * (Traits::kQStages + 4 * kStages)},
        k_ring{q_ring.full_base + 8 * Traits::kQStages,
               q_ring.full_base + 8 * (Traits::kQStages + 2 * kStages)},
        v_ring{q_ring.full_base + 8 * (Traits::kQStages + kStages),
               q_ring.full_base + 8 * (Traits::kQStages + 3 * kStages)},
        item_slot(reinterpret_cast<volatile int*>(smem_generic_ + Traits::kSlotRegion.offset)) {}

  /// The Q tile of the block's item j (0 for one item a block).
  __device__ __forceinline__ QTile q_tile(int j) const {
    return QTile{smem + Traits::kQRegion.offset + q_ring.stage(j) * QTile::kBytes};
  }
  __device__ __forceinline__ KVTile k_tile(int s) const {
    return KVTile{smem + Traits::kKRegion.offset + s * KVTile::kBytes};
  }
  __device__ __forceinline__ KVTile v_tile(int s) const {
    return KVTile{smem + Traits::kVRegion.offset + s * KVTile::kBytes};
  }

  /// Unit `unit` of the schedule: query blocks longest (last) first within each head group.
  /// Every field but head_col, which set_head_col fills: the kernel sets it after the barriers'
  /// set-up, where the remainder bh % NH stays apart from the quotient's division (computed
  /// with it, the two share one division and ptxas schedules the whole kernel differently: 3%
  /// slower at head size 128, 16K, on an H100; bench/NOTES.md).
  __device__ __forceinline__ ForwardItem item_of(int unit) const {
    const HeadGroupItem group_item =
        head_group_item(unit, p.num_m_blocks, p.group_heads, p.BH);
    const int m_block = p.num_m_blocks - 1 - group_item.index;
    ForwardItem item;
    item.bh = group_item.bh;
    item.b = item.bh / p.NH;
    item.head_col = 0;
    item.m0 = m_block < p.first_blocks
                  ? p.begin0 + m_block * Traits::kBlockM
                  : p.begin1 + (m_block - p.first_blocks) * Traits::kBlockM;
    item.n_blocks = (min(p.T, item.m0 + Traits::kBlockM) + kBlockN - 1) / kBlockN;
    return item;
  }

  __device__ __forceinline__ void set_head_col(ForwardItem& item) const {
    item.head_col = item.bh % p.NH * kHeadDim;
  }

  /// One thread, before the block's __syncthreads.
  __device__ __forceinline__ void init_barriers() const {
    if constexpr (Traits::kPersistent) {
      q_ring.init(1, Traits::kConsumers * 128);
    } else {
      hopper::mbarrier_init(q_ring.full(0), 1);
    }
    k_ring.init(1, Traits::kConsumers * 128);
    v_ring.init(1, Traits::kConsumers * 128);
    hopper::fence_barrier_init();
  }

  // The copies, issued by one thread: Q and the maps first, then the K and V of key tile `it`
  // (from the diagonal down) into ring stage it % kStages, each once the tile before it there
  // is consumed. K and V are released apart: K(it) once S(it) is done, V(it) only once P V(it)
  // is, an iteration later; so K(it + 2) is copied an iteration before it is needed, where one
  // release for both left the copy of K(it + 1) issued just before S(it + 1) waits for it.
  /// The Q tile of the block's item j (kNoUses for one item a block).
  template <typename Use>
  __device__ __forceinline__ void load_q(const ForwardItem& item, Use j) const {
    hopper::prefetch_tensor_map(q_map);
    hopper::prefetch_tensor_map(kv_map);
    hopper::mbarrier_arrive_expect_tx(q_ring.full(j), QTile::kBytes);
    q_tile(j).load(q_map, q_ring.full(j), item.head_col, item.m0, item.b);
  }
  // Key tile `it` of the item is the rings' use first_use + it: first_use counts the uses of
  // the items before it (persistent), a compile-time 0 (kNoUses) for one item a block.
  template <typename Use>
  __device__ __forceinline__ void load_k(const ForwardItem& item, Use first_use, int it) const {
    load_key_tile(k_ring, Traits::kKRegion.offset, p.C, item, first_use + it, it);
  }
  template <typename Use>
  __device__ __forceinline__ void load_v(const ForwardItem& item, Use first_use, int it) const {
    load_key_tile(v_ring, Traits::kVRegion.offset, 2 * p.C, item, first_use + it, it);
  }
  /// K or V (the ring, its tiles' shared-memory region, the part's column in qkv) of key tile
  /// `it`, the ring's use `use`.
  __device__ __forceinline__ void load_key_tile(const hopper::StageRing<kStages>& ring,
                                                int region_offset, int part_col,
                                                const ForwardItem& item, int use, int it) const {
    ring.wait_empty(use);
    hopper::mbarrier_arrive_expect_tx(ring.full(use), KVTile::kBytes);
    KVTile{smem + region_offset + ring.stage(use) * KVTile::kBytes}
        .load(kv_map, ring.full(use), part_col + item.head_col,
              (item.n_blocks - 1 - it) * kBlockN, item.b);
  }

  /// The producer's thread: every copy of the item, in the order the consumers release stages:
  /// K(0), K(1), V(0), K(2), V(1), ...
  template <typename Use>
  __device__ __forceinline__ void produce(const ForwardItem& item, Use first_use, Use j) const {
    load_q(item, j);
    load_k(item, first_use, 0);
    for (int it = 0; it < item.n_blocks; ++it) {
      if (it + 1 < item.n_blocks) load_k(item, first_use, it + 1);
      load_v(item, first_use, it);
    }
  }

  /// Without a producer, thread 0: Q and the first kStages tiles (the rest as stages free up).
  __device__ __forceinline__ void prefill(const ForwardItem& item) const {
    load_q(item, kNoUses);
    for (int it = 0; it < min(kStages, item.n_blocks); ++it) {
      load_k(item, kNoUses, it);
      load_v(item, kNoUses, it);
    }
  }

  /// The epilogue of consumer warpgroup c with two consumers (Traits::kStoresOByTma):
  /// normalize; lse (fp32, natural log) to global memory; O (bf16) into this consumer's 64 rows
  /// of item j's Q tile (its wgmma reads of them are done; the other consumer reads only its
  /// own rows), then thread 0 (the storer) stores them with one TMA store (rows at or after T
  /// are not written). Stored from registers, each warp's 4-byte stores touched 8 rows at once
  /// and the epilogue took a quarter of an item's time at 1K (bench/NOTES.md, session
  /// seventeen). Persistent: the Q stage goes back to the producer once the store has read it;
  /// the storer gives it back in the next item (consume) and waits for the block's last store
  /// before the block leaves. One item a block: the storer waits for the read here.
  template <typename Use, typename Softmax, int kORegs>
  __device__ __forceinline__ void store_o_by_tma(const ForwardItem& item, int c, Use j, int row0,
                                                 const Softmax& softmax,
                                                 float (&o_acc)[kORegs]) const {
    const int lane = threadIdx.x % 32;
    const int warp = (threadIdx.x % 128) / 32;
    const bool storer = threadIdx.x % 128 == 0;
    const QTile q_tile = this->q_tile(j);
    float inv_sum[2];
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const float sum = softmax.total(r);
      const int row = row0 + 8 * r;
      inv_sum[r] = 1.f / sum;
      if (row < p.T && lane % 4 == 0)
        p.lse[static_cast<int64_t>(item.bh) * p.T + row] = softmax.lse(r, sum);
    }
#pragma unroll
    for (int i = 0; i < kORegs; ++i)
      o_acc[i] *= inv_sum[hopper::AccumulatorLayout::row_offset(i) / 8];
    // stmatrix per 16 x 16 block: lane l addresses row l % 8 (+ 8 for matrices 1 and 3) and
    // column 8 (l / 16) of the block (as the backward's dS^T).
    const int store_row = 64 * c + 16 * warp + lane % 8 + 8 * ((lane / 8) % 2);
    const int store_col = 8 * (lane / 16);
#pragma unroll
    for (int kk = 0; kk < kHeadDim / 16; ++kk) {
      uint32_t o_frag[4];
      hopper::accumulators_to_a_fragment(o_frag, o_acc, kk);
      hopper::stmatrix_x4(q_tile.element(store_row, 16 * kk + store_col), o_frag);
    }
    hopper::fence_proxy_async_shared();
    hopper::named_barrier_sync(kEpilogueBarrier + c, 128);
    if (storer) {
      q_tile.store(o_map, 64 * c, item.head_col, item.m0 + 64 * c, item.b);
      hopper::bulk_commit_group();
    }
    if constexpr (Traits::kPersistent) {
      if (!storer) q_ring.release(j);
    } else if (storer) {
      hopper::bulk_wait_group_read<0>();
    }
  }

  /// Consumer warpgroup c: query rows item.m0 + 64c .. + 63; this thread rows row0, row0 + 8.
  /// first_use: the rings' uses of the block's items before this one; j: the item's index in
  /// the block (its Q tile); first_item: whether it is the block's first item. For one item a
  /// block, compile-time 0, 0 and true. Traits::kEarlyScores: carried_s_acc, the caller's S
  /// accumulators, and look, so that the item before issues this item's first S and this item
  /// the next's; otherwise both null and the S accumulators are the item's own (passed in by
  /// reference, they changed the two-consumer kernel's code: 1-2% at head size 128, 2K-4K).
  template <typename Use, typename First>
  __device__ __forceinline__ void consume(const ForwardItem& item, int c, Use first_use, Use j,
                                          First first_item, float (*carried_s_acc)[kSRegs],
                                          LookAhead* look) const {
    const QTile q_tile = this->q_tile(j);
    const int lane = threadIdx.x % 32;
    const int warp = (threadIdx.x % 128) / 32;
    const hopper::AccumulatorLayout fragment(lane);
    const int row0 = item.m0 + 64 * c + 16 * warp + fragment.row;
    const int col_pair = fragment.col;
    constexpr int kORegs = kHeadDim / 2;  // O accumulators (64 x kHeadDim)
    constexpr int kPSlabs = kBlockN / 16;

    float own_s_acc[kSRegs];
    float (&s_acc)[kSRegs] = Traits::kEarlyScores ? *carried_s_acc : own_s_acc;
    float o_acc[kORegs];
#pragma unroll
    for (int i = 0; i < kORegs; ++i) o_acc[i] = 0.f;
    uint32_t p_frag[kPSlabs][4];
    hopper::OnlineSoftmax<kSRegs> softmax(p.scale_log2);

    // The GEMMs' turns (Traits::kPingPong): consumer 0 goes first; each takes n_blocks + 1 turns.
    auto wait_turn = [&] {
      if constexpr (Traits::kPingPong) hopper::named_barrier_sync(kTurnBarrier + c, 256);
    };
    auto pass_turn = [&] {
      if constexpr (Traits::kPingPong)
        hopper::named_barrier_arrive(kTurnBarrier + (1 - c), 256);
    };
    // Consumer 0's turn comes first: once a block, in its first item (each consumer takes
    // n_blocks + 1 turns an item and both take the same items, so the turns stay in step).
    if (first_item && Traits::kPingPong && c == 1) pass_turn();
    auto issue_scores_of = [&](const QTile& q, int s) {
#pragma unroll
      for (int kk = 0; kk < kHeadDim / 16; ++kk)
        hopper::wgmma_ss<kBlockN, 0, 0>(s_acc, q.k_major(64 * c, kk), k_tile(s).k_major(0, kk),
                                        kk > 0);
    };
    auto issue_scores = [&](int s) { issue_scores_of(q_tile, s); };
    auto issue_pv = [&](int s) {
#pragma unroll
      for (int kk = 0; kk < kPSlabs; ++kk)
        hopper::wgmma_rs<kHeadDim, 1>(o_acc, p_frag[kk], v_tile(s).mn_major(16 * kk), true);
    };
    auto pack_p = [&] {
#pragma unroll
      for (int kk = 0; kk < kPSlabs; ++kk)
        hopper::accumulators_to_a_fragment(p_frag[kk], s_acc, kk);
    };

    // A consumed stage goes back to the producer. Without one, thread 0 refills both rings at one
    // point per tile, the end of the iteration (refill_after), where it waits for the other
    // threads once: K(it + kStages), released at this iteration's start, and V(it - 1 + kStages).
    // (Refilling K at its release stalled warp 0 before the softmax: 7-30% slower.)
    auto refill_after = [&](int it) {
      if constexpr (!Traits::kProducer) {
        if (threadIdx.x == 0) {
          if (it + kStages < item.n_blocks) load_k(item, kNoUses, it + kStages);
          if (it >= 1 && it - 1 + kStages < item.n_blocks) load_v(item, kNoUses, it - 1 + kStages);
        }
      }
    };

    q_ring.wait_full(j);
    // Storing O by TMA, persistent: the last item's store may still read its rows of that
    // item's Q stage; the storer (store_o_by_tma) waits for the read and gives the stage back
    // (the rest of the warpgroup did in the epilogue) once this item's first S is issued, so
    // the wait overlaps a GEMM instead of delaying the warpgroup's turn.
    auto release_last_q = [&] {
      if constexpr (Traits::kPersistent && Traits::kStoresOByTma) {
        if (threadIdx.x % 128 == 0 && j > 0) {
          hopper::bulk_wait_group_read<0>();
          q_ring.release(j - 1);
        }
      }
    };
    // Storing O from registers, persistent: Q goes back to the producer once the item's last S
    // is done.
    auto release_q_after = [&](int it) {
      if constexpr (Traits::kPersistent && !Traits::kStoresOByTma) {
        if (it == item.n_blocks - 1) q_ring.release(j);
      }
    };

    // First key tile (the diagonal one, possibly ragged at T): masked.
    const long long phase_start = phase_clock();
    {
      bool issued = false;  // by the item before (Traits::kEarlyScores)
      if constexpr (Traits::kEarlyScores) issued = look->scores_issued;
      if (!issued) {
        k_ring.wait_full(first_use + 0);
        wait_turn();
        hopper::wgmma_fence();
        issue_scores(k_ring.stage(first_use + 0));
        hopper::wgmma_commit_group();
        pass_turn();
      }
      release_last_q();
      hopper::wgmma_wait_group<0>();
      hopper::fence_operands(s_acc);
      k_ring.release(first_use + 0);
      release_q_after(0);
      mask_diagonal(s_acc, (item.n_blocks - 1) * kBlockN + col_pair, row0, p.T);
      // Every row keeps key n0 <= row unmasked, so the maxima are finite.
      softmax.first(s_acc);
      pack_p();
      refill_after(0);
    }

    const long long phase_first = phase_clock();
    phase_add(kPhaseFirstTile, phase_start, phase_first);
    for (int it = 1; it < item.n_blocks; ++it) {
      const int use = first_use + it;
      k_ring.wait_full(use);
      v_ring.wait_full(use - 1);
      wait_turn();
      hopper::wgmma_fence();
      issue_scores(k_ring.stage(use));
      hopper::wgmma_commit_group();
      issue_pv(v_ring.stage(use - 1));
      hopper::wgmma_commit_group();
      pass_turn();
      hopper::wgmma_wait_group<1>();  // S of this tile is ready; P V of the last still runs
      hopper::fence_operands(s_acc);
      k_ring.release(use);
      release_q_after(it);

      float correction[2];
      softmax.next(s_acc, correction);

      hopper::wgmma_wait_group<0>();
      hopper::fence_operands(o_acc);
      v_ring.release(use - 1);
      refill_after(it);
#pragma unroll
      for (int i = 0; i < kORegs; i += 4) {
        o_acc[i + 0] *= correction[0];
        o_acc[i + 1] *= correction[0];
        o_acc[i + 2] *= correction[1];
        o_acc[i + 3] *= correction[1];
      }
      pack_p();
    }

    const long long phase_loop = phase_clock();
    phase_add(kPhaseLoop, phase_first, phase_loop);
    {
      v_ring.wait_full(first_use + item.n_blocks - 1);
      wait_turn();
      hopper::wgmma_fence();
      issue_pv(v_ring.stage(first_use + item.n_blocks - 1));
      hopper::wgmma_commit_group();
      pass_turn();
      if constexpr (Traits::kEarlyScores) {
        // The next item's unit and first S (its Q tile j + 1, the key tile of the rings' next
        // use) while this P V runs; s_acc is free: this item's last P was packed into p_frag.
        // With no next item the S is issued all the same, over tiles no copy will change any
        // more (Q stage j + 1 holds an older tile or none, and the producer has left), and
        // never read: a branch around the wgmma made ptxas serialize them (C7515, C7517).
        q_ring.wait_full(j + 1);
        look->next_unit = __shfl_sync(0xffffffffu, item_slot[(j + 1) % Traits::kItemSlots], 0);
        look->scores_issued = look->next_unit >= 0;
        const int next_use = first_use + item.n_blocks;
        if (look->scores_issued) k_ring.wait_full(next_use);
        hopper::wgmma_fence();
        issue_scores_of(this->q_tile(j + 1), k_ring.stage(next_use));
        hopper::wgmma_commit_group();
        hopper::wgmma_wait_group<1>();  // this P V is done; the next S still runs
      } else {
        hopper::wgmma_wait_group<0>();
      }
      hopper::fence_operands(o_acc);
      // Persistent: the next item's copies wait on this stage; one item a block, none do.
      if constexpr (Traits::kPersistent) v_ring.release(first_use + item.n_blocks - 1);
    }

    const long long phase_last = phase_clock();
    phase_add(kPhaseLastPv, phase_loop, phase_last);
    if constexpr (Traits::kStoresOByTma) {
      store_o_by_tma(item, c, j, row0, softmax, o_acc);
    } else {
      // Epilogue: normalize, write O (bf16) and lse (fp32, natural log).
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        const float sum = softmax.total(r);
        const int row = row0 + 8 * r;
        if (row < p.T) {
          const float inv_sum = 1.f / sum;
          bf16* out_row =
              p.out + (static_cast<int64_t>(item.b) * p.T + row) * p.C + item.head_col;
#pragma unroll
          for (int i = 0; i < kORegs; i += 4) {
            *reinterpret_cast<__nv_bfloat162*>(out_row + 2 * i + col_pair) =
                __floats2bfloat162_rn(o_acc[i + 2 * r] * inv_sum,
                                      o_acc[i + 2 * r + 1] * inv_sum);
          }
          if (lane % 4 == 0)
            p.lse[static_cast<int64_t>(item.bh) * p.T + row] = softmax.lse(r, sum);
        }
      }
    }
    // The next item's first S ran under the epilogue; waited for here, so no accumulator is in
    // flight across the consumer's loop (ptxas serializes the wgmma otherwise, C7515).
    if constexpr (Traits::kEarlyScores) {
      hopper::wgmma_wait_group<0>();
      hopper::fence_operands(s_acc);
    }
    phase_add(kPhaseEpilogue, phase_last, phase_clock());
  }
};

template <typename Traits>
__global__ void __launch_bounds__(Traits::kThreads, Traits::kBlocksPerSm)
    hopper_forward_kernel(const __grid_constant__ CUtensorMap q_map,
                          const __grid_constant__ CUtensorMap kv_map,
                          const __grid_constant__ CUtensorMap o_map,
                          const typename Traits::Params p) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  extern __shared__ unsigned char smem_raw[];
  const uint32_t smem = (hopper::smem_addr(smem_raw) + 1023u) & ~1023u;
  using Block = HopperForwardBlock<Traits>;
  const Block block(&q_map, &kv_map, &o_map, p, smem,
                    smem_raw + (smem - hopper::smem_addr(smem_raw)));
  if constexpr (Traits::kPersistent) {
    if (threadIdx.x == 0) block.init_barriers();
    __syncthreads();
    // Broadcast from lane 0, as the item below: warp-uniform values keep the consumers' wgmma
    // descriptors in uniform registers (see the backward).
    const int warpgroup = __shfl_sync(0xffffffffu, threadIdx.x / 128, 0);
    if (warpgroup == 0) {
      // Producer: item j's unit goes to the consumers in slot j % kQStages, written before
      // the producer's arrival on item j's Q full barrier (the same stage): mbarrier.arrive is
      // a release and the consumers' wait that sees the phase complete an acquire, both at CTA
      // scope (PTX's defaults), so they read the slot after that wait with no other fence.
      // Before the write the producer waits until the Q stage is empty, i.e. for item
      // j - kQStages, on which every consumer thread arrives after it saw that item's phase
      // complete and read its slot (after the item's last S, or, storing O through the stage,
      // once the store has read it). With no unit left: -1 and an arrival without copies
      // complete item j's phase, and all consumers leave at item j.
      hopper::setmaxnreg_dec<Traits::kProducerRegisters>();
      if (threadIdx.x == 0) {
        const WorkQueue queue{p.work_counter};
        int first_use = 0;  // the rings' uses of the items before this one
        for (int j = 0;; ++j) {
          const int unit = queue.take();  // before the wait, so its round trip overlaps it
          const long long wait_from = phase_clock();
          block.q_ring.wait_empty(j);
          phase_add(kPhaseProducerQEmpty, wait_from, phase_clock());
          if (unit >= p.num_items) {
            block.item_slot[j % Traits::kItemSlots] = -1;
            hopper::mbarrier_arrive(block.q_ring.full(j));
            break;
          }
          block.item_slot[j % Traits::kItemSlots] = unit;
          ForwardItem item = block.item_of(unit);
          block.set_head_col(item);
          block.produce(item, first_use, j);
          first_use += item.n_blocks;
        }
      }
      return;
    }
    hopper::setmaxnreg_inc<Traits::kConsumerRegisters>();
    int first_use = 0;
    const long long consumer_start = phase_clock();
    // Early scores: the S accumulators carry the next item's first S from item to item (unused
    // otherwise; consume's own are the item's).
    float carried_s_acc[Block::kSRegs];
    typename Block::LookAhead look;
    for (int j = 0;; ++j) {
      // The item's unit, from the producer's slot once its Q tile has landed (early scores:
      // read by the item before, but for the first; that wait then counts in its last P V).
      int unit;
      if (Traits::kEarlyScores && j > 0) {
        unit = look.next_unit;
      } else {
        const long long wait_from = phase_clock();
        block.q_ring.wait_full(j);
        unit = __shfl_sync(0xffffffffu, block.item_slot[j % Traits::kItemSlots], 0);
        phase_add(kPhaseQWait, wait_from, phase_clock());
      }
      if (unit < 0) break;
      phase_add(kPhaseItems, 0, 1);
      ForwardItem item = block.item_of(unit);
      block.set_head_col(item);
      // Item j's Q phase is already complete: consume's wait returns at once.
      block.consume(item, warpgroup - 1, first_use, j, j == 0,
                    Traits::kEarlyScores ? &carried_s_acc : nullptr,
                    Traits::kEarlyScores ? &look : nullptr);
      first_use += item.n_blocks;
    }
    // The block's last TMA store of O reads shared memory until this wait returns.
    if constexpr (Traits::kStoresOByTma) {
      if (threadIdx.x % 128 == 0) hopper::bulk_wait_group_read<0>();
    }
    phase_add(kPhaseConsumerTotal, consumer_start, phase_clock());
  } else {
    ForwardItem item = block.item_of(static_cast<int>(blockIdx.x));
    if (threadIdx.x == 0) block.init_barriers();
    __syncthreads();
    block.set_head_col(item);
    const int warpgroup = __shfl_sync(0xffffffffu, threadIdx.x / 128, 0);  // warp-uniform
    if constexpr (Traits::kProducer) {
      if (warpgroup == 0) {
        hopper::setmaxnreg_dec<Traits::kProducerRegisters>();
        if (threadIdx.x == 0) block.produce(item, kNoUses, kNoUses);
        return;
      }
      hopper::setmaxnreg_inc<Traits::kConsumerRegisters>();
    } else if (threadIdx.x == 0) {
      block.prefill(item);
    }
    block.consume(item, Traits::kProducer ? warpgroup - 1 : 0, kNoUses, kNoUses, std::true_type{},
                  nullptr, nullptr);
  }
#else
  __trap();  // built without sm_90a code: the dispatch never launches this
#endif
}

// The longest T whose forward runs persistent (the shapes with a producer) by default:
// hopper_forward_persistent_max_t(head_size), or GPT2_HOPPER_FORWARD_PERSISTENT_MAX_T at every
// head size for the benchmark's A/B of the two kernels on one build (read once; a value that is
// not a whole number is an error).
int default_persistent_max_t(int head_size) {
  static const int from_env =
      attention_hopper_env_knob("GPT2_HOPPER_FORWARD_PERSISTENT_MAX_T", -1);
  return from_env >= 0 ? from_env : hopper_forward_persistent_max_t(head_size);
}

template <typename Traits>
void launch_hopper_forward(bf16* out, float* lse, const bf16* qkv, int B, int T, int C, int NH,
                           void* workspace, const QueryRows& rows, int max_blocks,
                           cudaStream_t stream) {
  // qkv as (dim0 = 3C columns, dim1 = T rows, dim2 = B); boxes of 64 columns x the tile's rows.
  const uint64_t dims[3] = {3ull * C, static_cast<uint64_t>(T), static_cast<uint64_t>(B)};
  const CUtensorMap q_map =
      make_tensor_map_bf16_3d(qkv, dims, 3ull * C * 2, 3ull * C * 2 * T, 64, Traits::kBlockM);
  const CUtensorMap kv_map =
      make_tensor_map_bf16_3d(qkv, dims, 3ull * C * 2, 3ull * C * 2 * T, 64, Traits::kBlockN);
  // out as (C columns, T rows, B); each consumer stores boxes of 64 columns x its 64 rows.
  const uint64_t out_dims[3] = {static_cast<uint64_t>(C), static_cast<uint64_t>(T),
                                static_cast<uint64_t>(B)};
  const CUtensorMap o_map =
      make_tensor_map_bf16_3d(out, out_dims, 1ull * C * 2, 1ull * C * 2 * T, 64, 64);
  // Ranges start on kQueryRowsGranule, a multiple of kBlockN: each block's diagonal key tile
  // is still its last, as with all rows.
  static_assert(kQueryRowsGranule % Traits::kBlockN == 0);
  auto blocks_of = [](int begin, int end) {
    return (end - begin + Traits::kBlockM - 1) / Traits::kBlockM;
  };
  const QueryRows all{1, {0, 0}, {T, 0}};
  const QueryRows& r = rows.count == 0 ? all : rows;
  const int first_blocks = blocks_of(r.begin[0], r.end[0]);
  const int num_m_blocks = first_blocks + (r.count == 2 ? blocks_of(r.begin[1], r.end[1]) : 0);
  const int BH = B * NH;
  const int64_t items = static_cast<int64_t>(num_m_blocks) * BH;
  GPT2_CHECK(items < (int64_t{1} << 30), "too many attention work items: ", items);
  const int sms = hopper::current_device_sms();
  // Head groups of about two waves of blocks (bench/NOTES.md: forward head groups).
  typename Traits::Params params{};
  static_cast<HopperForwardParams&>(params) = HopperForwardParams{
      out, lse, T, C, NH, BH, num_m_blocks, first_blocks, r.begin[0], r.begin[1],
      schedule_group_heads(num_m_blocks, BH, 2 * Traits::kBlocksPerSm * sms),
      static_cast<float>(1.0 / std::sqrt(double(Traits::kHeadDim))) * flash::kLog2e};
  if constexpr (Traits::kPersistent) {
    params.num_items = static_cast<int>(items);
    // The work queue's counter, zeroed on the launch's stream just before it (a memset node
    // when captured in a graph). One block an item touches no workspace.
    GPT2_CHECK(workspace != nullptr, "the persistent Hopper forward (", Traits::kBlockM,
               "-row blocks) takes its items from a counter in the attention workspace");
    params.work_counter = attention_hopper_work_counter(workspace, B, T, C, NH);
    GPT2_CUDA_CHECK(cudaMemsetAsync(params.work_counter, 0, sizeof(int), stream));
  }
  auto kernel = hopper_forward_kernel<Traits>;
  GPT2_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                       Traits::kSmemBytes));
  // Persistent: as many blocks as the SMs hold (max_blocks > 0: at most that many), each
  // taking items from the work queue until none is left. Otherwise a block an item.
  const int64_t resident = int64_t{Traits::kBlocksPerSm} * sms;
  const int64_t blocks =
      Traits::kPersistent
          ? std::min<int64_t>({items, resident, max_blocks > 0 ? max_blocks : resident})
          : items;
  kernel<<<static_cast<unsigned>(blocks), Traits::kThreads, Traits::kSmemBytes, stream>>>(
      q_map, kv_map, o_map, params);
  GPT2_CUDA_CHECK_LAUNCH();
}

}  // namespace

int attention_hopper_env_knob(const char* name, int default_value) {
  const char* text = std::getenv(name);
  if (text == nullptr) return default_value;
  char* end = nullptr;
  const long value = std::strtol(text, &end, 10);
  const bool digits_only = text[0] >= '0' && text[0] <= '9' && *end == '\0';  // no sign, space
  GPT2_CHECK(digits_only && value <= (1L << 30), name,
             " takes a whole number >= 0 (got '", text, "')");
  return static_cast<int>(value);
}

#if defined(GPT2_FORWARD_PHASES)
void attention_hopper_forward_phases(unsigned long long (&phases)[kForwardPhases]) {
  GPT2_CUDA_CHECK(cudaDeviceSynchronize());
  GPT2_CUDA_CHECK(cudaMemcpyFromSymbol(phases, g_forward_phases, sizeof(phases)));
  const unsigned long long zeros[kForwardPhases] = {};
  GPT2_CUDA_CHECK(cudaMemcpyToSymbol(g_forward_phases, zeros, sizeof(zeros)));
}
#endif

bool attention_hopper_compiled() {
#if defined(GPT2_HOPPER_ATTENTION)
  return true;
#else
  return false;
#endif
}

// Head size 64: 64-row blocks with a producer at every T (persistent up to 1K, which beats the
// producer-less shape there by 3-7% at T = 256-512); head size 128: 128-row blocks
// (bench/NOTES.md: forward block shapes, and session sixteen). GPT2_HOPPER_FORWARD_ROWS = 64 or
// 128 picks that shape with a producer at every head size instead (read once; 0 or unset: by
// head size), so that the shapes can be A/B'd where the shape is not asked for, as in training.
HopperForwardShape attention_hopper_forward_shape(int /*T*/, int head_size) {
  static const int rows = attention_hopper_env_knob("GPT2_HOPPER_FORWARD_ROWS", 0);
  GPT2_CHECK(rows == 0 || rows == 64 || rows == 128,
             "GPT2_HOPPER_FORWARD_ROWS takes 64 or 128 (got ", rows, ")");
  if (rows != 0) return rows == 64 ? HopperForwardShape::kRows64 : HopperForwardShape::kRows128;
  return head_size == 64 ? HopperForwardShape::kRows64 : HopperForwardShape::kRows128;
}

void attention_hopper_forward(bf16* out, float* lse, const bf16* qkv, int B, int T, int C, int NH,
                              void* workspace, HopperForwardShape shape, cudaStream_t stream,
                              const QueryRows& rows, int max_blocks, int persistent_max_t) {
  const int head_size = flash::checked_head_size(B, T, C, NH);
  GPT2_CHECK(max_blocks >= 0, "the Hopper forward's max_blocks must be >= 0 (got ", max_blocks,
             ")");
  GPT2_CHECK(persistent_max_t >= -1, "the Hopper forward's persistent_max_t must be >= -1 (got ",
             persistent_max_t, ")");
  if (persistent_max_t < 0) persistent_max_t = default_persistent_max_t(head_size);
  if (shape == HopperForwardShape::kAuto) shape = attention_hopper_forward_shape(T, head_size);
  auto launch_traits = [&](auto traits) {
    launch_hopper_forward<decltype(traits)>(out, lse, qkv, B, T, C, NH, workspace, rows,
                                            max_blocks, stream);
  };
  // The shapes with a producer run persistent at T <= persistent_max_t or when the caller
  // caps the grid; otherwise, and without a producer, a block an item.
  auto launch = [&](auto traits) {
    using Traits = decltype(traits);
    if constexpr (Traits::kProducer) {
      if (max_blocks > 0 || T <= persistent_max_t)
        return launch_traits(
            HopperForwardTraits<Traits::kHeadDim, Traits::kConsumers, true, true>{});
    }
    launch_traits(traits);
  };
  switch (shape) {
    case HopperForwardShape::kRows128:
      if (head_size == 64) return launch(HopperForwardTraits<64, 2>{});
      return launch(HopperForwardTraits<128, 2>{});
    case HopperForwardShape::kRows64:
      if (head_size == 64) return launch(HopperForwardTraits<64, 1>{});
      return launch(HopperForwardTraits<128, 1>{});
    case HopperForwardShape::kRows64NoProducer:
      if (head_size == 64) return launch(HopperForwardTraits<64, 1, false>{});
      return launch(HopperForwardTraits<128, 1, false>{});
    case HopperForwardShape::kAuto: break;
  }
  GPT2_FAIL("unknown Hopper forward shape ", static_cast<int>(shape));
}

}  // namespace gpt2::gpu
