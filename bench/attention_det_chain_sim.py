#!/usr/bin/env python3
"""The Hopper backward's deterministic dQ order, simulated (bench/NOTES.md, issue 23).

Blocks (one per SM) take items, key block n of head bh, in the launcher's order
(attention_schedule.h's head groups: key block 0 of every head of a group, then key block 1,
...; three items per block a group when racing, max(6, n_blocks / 5) when deterministic). An
item costs `--overhead` steps plus one step per query tile, walked up from its diagonal tile or
down from the last tile. Each step's dQ goes to a writer: in deterministic mode key block n may
write tile m only a hand-off (`--handoff` steps) after key block n - 1's write of it; a
consumer runs at most one step ahead of its writer (one staging slot). Prints the makespan of
the racing order and deterministic / racing for both walks, at B*T = 16K, 12 heads.
"""
import argparse
import heapq


def makespan(T, head_size, deterministic, walk_down, handoff, overhead, sms, heads):
    B = max(1, 16384 // T)
    block_m = 128 if head_size == 64 else 64  # query rows per step
    block_n = 128                             # keys per item
    num_m = (T + block_m - 1) // block_m
    n_blocks = (T + block_n - 1) // block_n
    BH = B * heads
    wanted = max(6 * sms, n_blocks * sms // 5) if deterministic else 3 * sms
    group_heads = max(1, min(BH, -(-wanted // n_blocks)))
    free_at = [(0.0, b) for b in range(sms)]
    heapq.heapify(free_at)
    landed = {}  # (bh, tile, key block) -> when its write landed
    end = 0.0
    for w in range(n_blocks * BH):  # take order; an item waits only on items taken before it
        group_items = n_blocks * group_heads
        first_bh = w // group_items * group_heads
        heads_here = min(group_heads, BH - first_bh)
        n, bh = (w % group_items) // heads_here, first_bh + (w % group_items) % heads_here
        start, block = heapq.heappop(free_at)
        lowest = n * block_n // block_m
        tiles = range(num_m - 1, lowest - 1, -1) if walk_down else range(lowest, num_m)
        computed, issued = start + overhead, float("-inf")
        for m in tiles:
            computed = max(computed + 1.0, issued)  # the staging slot of the step before
            issued = computed
            if deterministic and n > 0:
                issued = max(issued, landed[(bh, m, n - 1)] + handoff)
            landed[(bh, m, n)] = issued
        finish = max(computed, issued)
        end = max(end, finish)
        heapq.heappush(free_at, (finish, block))
    return end


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sms", type=int, default=132)
    parser.add_argument("--heads", type=int, default=12)
    parser.add_argument("--handoff", type=float, default=1.0, help="steps, write to next write")
    parser.add_argument("--overhead", type=float, default=1.0, help="steps per item")
    args = parser.parse_args()
    print("head size      T  racing (steps)  det up / racing  det down / racing")
    for head_size in (64, 128):
        for T in (1024, 2048, 4096, 8192, 16384):
            run = lambda det, down: makespan(T, head_size, det, down, args.handoff,
                                             args.overhead, args.sms, args.heads)
            racing = run(False, False)
            print(f"{head_size:9d} {T:6d} {racing:15.0f} {racing / run(True, False):16.3f} "
                  f"{racing / run(True, True):18.3f}")


if __name__ == "__main__":
    main()
