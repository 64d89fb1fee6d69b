#!/usr/bin/env python3
"""Makespan of the Hopper attention forward's item schedules, simulated (bench/NOTES.md, issue 23).

Items are (query block, head) pairs ordered as kernels/gpu/attention_schedule.h orders them
(head_group_item: head groups of about two waves, longest item first); an item costs its key
tiles plus `--overhead` (its prologue and epilogue, in key tiles). Three assignments to the
grid's blocks (the SMs times the blocks an SM holds):
  static  persistent_unit: block b takes unit j*blocks + b on even waves j, the mirror on odd;
  greedy  the first free block takes the next unit (one block an item, or a work queue);
  ideal   the total cost spread evenly.
Prints static / greedy and greedy / ideal for causal attention at B*T = 16K, 12 heads.
"""
import argparse
import heapq


def item_costs(T, head_size, B, NH, blocks, overhead):
    block_m = 128 if head_size == 128 else 64  # the shapes the launcher picks from 1K
    block_n = 128
    num_m = (T + block_m - 1) // block_m
    BH = B * NH
    group_heads = max(1, min(BH, -(-2 * blocks // num_m)))  # schedule_group_heads
    costs = []
    for w in range(num_m * BH):
        group_items = num_m * group_heads
        first_bh = w // group_items * group_heads
        heads_here = min(group_heads, BH - first_bh)
        index = (w % group_items) // heads_here
        m = num_m - 1 - index
        key_tiles = (min(T, (m + 1) * block_m) + block_n - 1) // block_n
        costs.append(key_tiles * block_m / 128 + overhead)
    return costs


def makespans(costs, blocks):
    static = [0.0] * blocks
    for j in range(-(-len(costs) // blocks)):
        for b in range(blocks):
            w = j * blocks + (b if j % 2 == 0 else blocks - 1 - b)
            if w < len(costs):
                static[b] += costs[w]
    free_at = [0.0] * blocks
    for c in costs:
        heapq.heappush(free_at, heapq.heappop(free_at) + c)
    return max(static), max(free_at), sum(costs) / blocks


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sms", type=int, default=132)
    parser.add_argument("--heads", type=int, default=12)
    parser.add_argument("--overhead", type=float, default=1.0)
    args = parser.parse_args()
    print("head size      T   static/greedy   greedy/ideal")
    for head_size in (64, 128):
        blocks = args.sms * (1 if head_size == 128 else 2)
        for T in (1024, 2048, 4096, 8192, 16384):
            costs = item_costs(T, head_size, 16384 // T, args.heads, blocks, args.overhead)
            static, greedy, ideal = makespans(costs, blocks)
            print(f"{head_size:9d} {T:6d} {static / greedy:15.3f} {greedy / ideal:14.3f}")


if __name__ == "__main__":
    main()
