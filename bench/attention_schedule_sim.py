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

--fit CSV: fits the greedy schedule's cost model, a fixed cost per item plus a cost per key
tile (both in microseconds; a tile is 128 queries x 128 keys, so a 64-row item's key tile
counts a half), to the forward TFLOP/s of a gpt2-attention-bench CSV (--kernel, default
flash-hopper; one fit per head size, on the grid the launcher uses: one block per SM at head
size 128, two at 64), and prints per T the model against the measurement and the share of the
time that the fixed costs take.
"""
import argparse
import csv
import heapq
import sys


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


def forward_flops(B, NH, T, head_size):
    """Causal attention forward, FlashAttention's count."""
    return 4.0 * B * NH * T * T * head_size / 2


def fit_item_costs(points, head_size, NH, blocks):
    """points: [(T, B, forward TFLOP/s)]. Least squares (relative) over a grid of fixed / tile
    cost ratios; returns (fixed us per item, us per key tile, rms relative error, rows), rows
    [(T, model TFLOP/s, measured, greedy / ideal, fixed share)]."""
    units = {T: item_costs(T, head_size, B, NH, blocks, 0.0) for T, B, _ in points}
    measured_us = {T: forward_flops(B, NH, T, head_size) / (tflops * 1e6)
                   for T, B, tflops in points}
    best = None
    for step in range(0, 601):
        ratio = step * 0.01  # fixed cost in tiles
        spans = {T: makespans([ratio + u for u in units[T]], blocks)[1] for T in units}
        q = [spans[T] / measured_us[T] for T in units]
        per_tile = sum(q) / sum(x * x for x in q)
        err = sum((per_tile * x - 1) ** 2 for x in q)
        if best is None or err < best[0]:
            best = (err, ratio, per_tile)
    err, ratio, per_tile = best
    rows = []
    for T, B, tflops in points:
        costs = [per_tile * (ratio + u) for u in units[T]]
        _, greedy, ideal = makespans(costs, blocks)
        fixed = per_tile * ratio * len(costs) / blocks
        rows.append((T, forward_flops(B, NH, T, head_size) / (greedy * 1e6), tflops,
                     greedy / ideal, fixed / greedy))
    return per_tile * ratio, per_tile, (err / len(points)) ** 0.5, rows


def fail(message):
    print(f"attention_schedule_sim: {message}", file=sys.stderr)
    sys.exit(2)


def fit_main(path, kernel, sms):
    columns = {"kernel", "head_size", "seq_len", "batch", "heads", "fwd_tflops"}
    try:
        with open(path, newline="") as f:
            reader = csv.DictReader(f)
            missing = columns - set(reader.fieldnames or [])
            if missing:
                fail(f"{path} is not a gpt2-attention-bench CSV (no {', '.join(sorted(missing))})")
            records = [r for r in reader if r["kernel"] == kernel]
    except OSError as e:
        fail(f"cannot read {path}: {e.strerror}")
    if not records:
        fail(f"no rows of kernel {kernel} in {path}")
    for head_size in sorted({int(r["head_size"]) for r in records}):
        rows = [r for r in records if int(r["head_size"]) == head_size]
        NH = int(rows[0]["heads"])
        points = sorted((int(r["seq_len"]), int(r["batch"]), float(r["fwd_tflops"])) for r in rows)
        if len(points) < 2:
            fail(f"head size {head_size} needs two T or more")
        blocks = sms * (1 if head_size == 128 else 2)
        fixed, per_tile, rms, table = fit_item_costs(points, head_size, NH, blocks)
        print(f"head size {head_size}: {fixed:.2f} us per item + {per_tile:.3f} us per key tile "
              f"(rms {100 * rms:.1f}%)")
        print("      T   model TFLOP/s   measured   greedy/ideal   fixed share")
        for T, model, tflops, imbalance, share in table:
            print(f"{T:7d} {model:15.0f} {tflops:10.0f} {imbalance:14.3f} {share:13.2f}")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sms", type=int, default=132)
    parser.add_argument("--heads", type=int, default=12)
    parser.add_argument("--overhead", type=float, default=1.0)
    parser.add_argument("--fit", metavar="CSV", help="fit the cost model to a benchmark CSV")
    parser.add_argument("--kernel", default="flash-hopper", help="the CSV's kernel to fit")
    args = parser.parse_args()
    if args.fit:
        fit_main(args.fit, args.kernel, args.sms)
        return
    print("head size      T   static/greedy   greedy/ideal")
    for head_size in (64, 128):
        blocks = args.sms * (1 if head_size == 128 else 2)
        for T in (1024, 2048, 4096, 8192, 16384):
            costs = item_costs(T, head_size, 16384 // T, args.heads, blocks, args.overhead)
            static, greedy, ideal = makespans(costs, blocks)
            print(f"{head_size:9d} {T:6d} {static / greedy:15.3f} {greedy / ideal:14.3f}")


if __name__ == "__main__":
    main()
