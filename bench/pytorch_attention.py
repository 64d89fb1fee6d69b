#!/usr/bin/env python3
"""PyTorch SDPA (FlashAttention-2 and cuDNN backends) on the shapes of gpt2-attention-bench.

Times torch.nn.functional.scaled_dot_product_attention, causal, bf16. --layout gpt2 (default):
q, k, v are views of one interleaved (B, T, 3, NH, HS) tensor exactly as a GPT-2 block splits
its qkv projection (the layout gpt2-attention-bench feeds this project's kernels), so PyTorch's
own layout copies count. --layout separate: three contiguous (B, NH, T, HS) tensors, the
kernels' best case (FlashAttention's benchmark layout), to compare kernel with kernel. Forward,
backward (dqkv written into a cleared .grad) and forward+backward are each measured over bursts
of --burst calls back to back (as gpt2-attention-bench times ours, so the GPU is under the same
sustained load), per call: median of --repeats bursts after --warmup (and --warmup-ms), inputs
rotated among enough sets to overflow the L2 cache. --timing kernels (default): the GPU time of
the burst's kernels and copies as the CUDA profiler (CUPTI, through torch.profiler) records
them, summed, so Python's and the dispatcher's host time (which at short T exceeds the kernels'
and varies between machines) is not counted, nor the gaps between kernels (which this project's
timings include); --timing eager: CUDA events around the Python calls; --timing graph: each
burst captured once as a CUDA graph and CUDA events around its replays, so PyTorch's kernels run
back to back with no host time between them, exactly as ours are timed. The summed kernel time
leaves the GPU idle between bursts while the profiler collects (PyTorch's kernels then run at
higher clocks under the power cap than back-to-back ones do: bench/NOTES.md, session twenty);
the graph timing keeps the load of our bursts without counting host time. FLOPs by
FlashAttention's convention: forward 4 B NH T^2 HS / 2 (causal), backward 2.5x, both 3.5x.

With --ours CSV (written by gpt2-attention-bench in the same run on the same device) it prints one
table of TFLOP/s with the ratios ours / FlashAttention-2 and ours / cuDNN, and writes it as
Markdown (--markdown) and CSV (--csv). --compare CSV makes that table from this script's CSV of
an earlier run instead of timing (tools/attention_check.sh with PASSES: both CSVs the medians of
the passes, tools/bench_csv_median.py; --passes N says so in the table's title). A comparison
only: the trainer never imports PyTorch.
"""
import argparse
import collections
import csv
import datetime
import itertools
import math
import os
import statistics
import sys
import time

import torch
import torch.nn.functional as F
from torch.autograd import DeviceType
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.profiler import ProfilerActivity, profile

from bench_io import print_table, write_csv

BACKENDS = {"torch-fa2": SDPBackend.FLASH_ATTENTION, "torch-cudnn": SDPBackend.CUDNN_ATTENTION}


def event_ms(run):
    """Milliseconds between CUDA events recorded around run()."""
    start = torch.cuda.Event(enable_timing=True)
    stop = torch.cuda.Event(enable_timing=True)
    start.record()
    run()
    stop.record()
    stop.synchronize()
    return start.elapsed_time(stop)


def kernel_ms(run):
    """Milliseconds of device time of what run() launches (kernels, copies, memsets), summed,
    from the CUDA profiler."""
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        run()
        torch.cuda.synchronize()
    device_us = [e.time_range.elapsed_us() for e in prof.events()
                 if e.device_type == DeviceType.CUDA]
    if not device_us:
        raise RuntimeError("the CUDA profiler recorded no device activity")
    return sum(device_us) / 1e3


# How a timing runs: `warmup` unmeasured bursts, then more back to back until warmup_ms
# milliseconds of them have run (0: none), then `repeats` measured bursts of `burst` calls; as
# gpt2-attention-bench's --warmup, --warmup-ms, --repeats, --burst (bench/gpu_timing.h says
# why a warm-up by time: the power cap's controller lags an idle gap by tens of milliseconds).
Plan = collections.namedtuple("Plan", "warmup warmup_ms repeats burst")


def warm_up(run, ms):
    """run() again and again until ms milliseconds have passed, one run queued ahead of the
    one waited for, so that the GPU does not idle while Python checks the time."""
    if ms <= 0:
        return
    start = time.perf_counter()
    queued = None
    while True:
        run()
        done = torch.cuda.Event()
        done.record()
        if queued is not None:
            queued.synchronize()
        queued = done
        if (time.perf_counter() - start) * 1e3 >= ms:
            return


def median_time(measure, fn, plan, prepare=None):
    """Median over plan.repeats of measure(plan.burst calls fn(i) back to back) / burst,
    after the plan's unmeasured warm-up; prepare(i), if given, runs unmeasured for each call of
    a burst before it. i counts every call, so the input sets rotate."""
    bursts = itertools.count()

    def next_burst():
        """The next burst's calls, each prepared."""
        r = next(bursts)
        calls = range(r * plan.burst, (r + 1) * plan.burst)
        if prepare:
            for i in calls:
                prepare(i)
        return calls

    def run(calls):
        for i in calls:
            fn(i)

    for _ in range(plan.warmup):
        run(next_burst())
    warm_up(lambda: run(next_burst()), plan.warmup_ms)
    times = []
    for _ in range(plan.repeats):
        calls = next_burst()
        times.append(measure(lambda: run(calls)) / plan.burst)
    return statistics.median(times)


def graph_median_ms(burst_calls, plan, stream):
    """Median over plan.repeats of one replay of a CUDA graph of burst_calls() (plan.burst
    calls), timed with CUDA events, per call, after plan.warmup replays and more for
    plan.warmup_ms. burst_calls runs twice on `stream` before
    the capture (autograd's and the backends' lazy set-up stays out of the graph), and is
    captured on it: a backward runs on its forward's stream, so forwards made outside the graph
    must have been made on `stream` for their backward to be captured."""
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for _ in range(2):
            burst_calls()
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, stream=stream):
        burst_calls()
    for _ in range(plan.warmup):
        graph.replay()
    warm_up(graph.replay, plan.warmup_ms)
    times = [event_ms(graph.replay) / plan.burst for _ in range(plan.repeats)]
    del graph
    return statistics.median(times)


def make_inputs(layout, B, T, NH, HS):
    """One set of leaf tensors and the function giving q, k, v (B, NH, T, HS) from them."""
    if layout == "gpt2":
        qkv = torch.randn(B, T, 3, NH, HS, device="cuda", dtype=torch.bfloat16).requires_grad_()
        return [qkv], lambda: [qkv[:, :, j].transpose(1, 2) for j in range(3)]
    leaves = [torch.randn(B, NH, T, HS, device="cuda", dtype=torch.bfloat16).requires_grad_()
              for _ in range(3)]
    return leaves, lambda: leaves


def time_backend(backend, layout, B, T, NH, HS, sets, plan, timing):
    inputs = [make_inputs(layout, B, T, NH, HS) for _ in range(sets)]
    douts = [torch.randn(B, NH, T, HS, device="cuda", dtype=torch.bfloat16) for _ in range(sets)]

    def clear_grads(i):
        for leaf in inputs[i % sets][0]:
            leaf.grad = None

    def attend(i):
        q, k, v = inputs[i % sets][1]()
        with sdpa_kernel(backend):
            return F.scaled_dot_product_attention(q, k, v, is_causal=True)

    def forward(i):
        with torch.no_grad():
            attend(i)

    def forward_backward(i):
        clear_grads(i)
        attend(i).backward(douts[i % sets])

    if timing == "graph":
        fwd, bwd, both = graph_times(inputs, douts, sets, attend, forward, plan)
    else:
        measure = kernel_ms if timing == "kernels" else event_ms
        fwd = median_time(measure, forward, plan)
        both = median_time(measure, forward_backward, plan)
        # Backward alone: the forwards (and their autograd graphs) of a burst run unmeasured
        # before it; clearing .grad is host work only.
        outs = []

        def backward(i):
            clear_grads(i)
            outs.pop(0).backward(douts[i % sets])

        bwd = median_time(measure, backward, plan, prepare=lambda i: outs.append(attend(i)))
    del inputs, douts
    torch.cuda.empty_cache()
    return fwd, bwd, both


def graph_times(inputs, douts, sets, attend, forward, plan):
    """time_backend's three timings with --timing graph: bursts of calls 0 .. burst - 1 (the
    input sets rotating as in the other timings) as CUDA graphs, all on one side stream. The
    gradients come from torch.autograd.grad (new tensors from the graph's pool) rather than
    .grad; the backward's forwards run once before its capture, their graphs kept
    (retain_graph) for every replay."""
    calls = range(plan.burst)
    stream = torch.cuda.Stream()

    def leaves(i):
        return inputs[i % sets][0]

    fwd = graph_median_ms(lambda: [forward(i) for i in calls], plan, stream)
    both = graph_median_ms(
        lambda: [torch.autograd.grad(attend(i), leaves(i), douts[i % sets]) for i in calls],
        plan, stream)
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        outs = [attend(i) for i in calls]
    bwd = graph_median_ms(
        lambda: [torch.autograd.grad(outs[i], leaves(i), douts[i % sets], retain_graph=True)
                 for i in calls], plan, stream)
    return fwd, bwd, both


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seq-lens", default="512,1024,2048,4096,8192,16384,32768,65536")
    parser.add_argument("--tokens", type=int, default=16384, help="B = max(1, tokens / T)")
    parser.add_argument("--heads", type=int, default=12)
    parser.add_argument("--head-sizes", default="64,128")
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--warmup-ms", type=float, default=0,
                        help="then unmeasured bursts until this many ms of them have run (as "
                        "gpt2-attention-bench's: ~1000 times the sustained load)")
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("--burst", type=int, default=4,
                        help="calls per measured run, back to back (as gpt2-attention-bench)")
    parser.add_argument("--layout", choices=("gpt2", "separate"), default="gpt2",
                        help="q, k, v as views of GPT-2's (B,T,3,NH,HS) qkv, or 3 contiguous "
                        "(B,NH,T,HS) tensors")
    parser.add_argument("--timing", choices=("kernels", "eager", "graph"), default="kernels",
                        help="the device time of the kernels (CUDA profiler), CUDA events "
                        "around the eager Python calls, or around replays of each burst "
                        "captured as a CUDA graph")
    parser.add_argument("--reverse-backends", action="store_true",
                        help="at each point cuDNN before FA2 (tools/attention_check.sh's even "
                        "passes: what runs later meets a GPU that has drawn the power cap longer)")
    parser.add_argument("--ours", help="gpt2-attention-bench CSV of the same run, to compare")
    parser.add_argument("--csv", default="out/pytorch_attention.csv")
    parser.add_argument("--markdown", help="write the comparison table here (Markdown)")
    parser.add_argument("--compare", help="no timing: compare --ours with this script's CSV")
    parser.add_argument("--passes", type=int, default=1,
                        help="passes whose medians the CSVs hold (the table's title)")
    args = parser.parse_args()
    if args.repeats < 1 or args.burst < 1 or args.warmup < 0:
        sys.exit("pytorch_attention.py: need --repeats >= 1, --burst >= 1, --warmup >= 0")
    if not 0 <= args.warmup_ms <= 600000:  # NaN fails too
        sys.exit(f"pytorch_attention.py: --warmup-ms takes 0 to 600000 (got {args.warmup_ms})")
    plan = Plan(args.warmup, args.warmup_ms, args.repeats, args.burst)
    if args.ours and not os.path.isfile(args.ours):
        sys.exit(f"pytorch_attention.py: --ours {args.ours}: no such file (run "
                 "gpt2-attention-bench first, or leave --ours out)")
    if args.passes < 1:
        sys.exit("pytorch_attention.py: need --passes >= 1")
    if args.compare:
        if not args.ours or not os.path.isfile(args.compare):
            sys.exit("pytorch_attention.py: --compare takes an existing CSV of this script, "
                     "and needs --ours")
        with open(args.compare) as f:
            rows = list(csv.DictReader(f))
        if not rows:
            sys.exit(f"pytorch_attention.py: --compare {args.compare}: no rows")
        for row in rows:
            for key in ("head_size", "seq_len"):
                row[key] = int(row[key])
            for key in ("fwd_tflops", "bwd_tflops", "fwdbwd_tflops"):
                row[key] = float(row[key])
        args.layout, args.timing = rows[0]["layout"], rows[0]["timing"]
        compare(args, rows, rows[0]["device"])
        return
    if not torch.cuda.is_available():
        sys.exit("pytorch_attention.py: no CUDA device")
    device = torch.cuda.get_device_name()
    l2 = torch.cuda.get_device_properties(0).L2_cache_size
    print(f"PyTorch {torch.__version__} SDPA on {device}: bf16, causal, NH={args.heads}, "
          f"layout {args.layout}, {args.timing} timing, median of {args.repeats} after "
          f"{args.warmup}" + (f" + {args.warmup_ms:.0f} ms" if args.warmup_ms > 0 else ""))
    rows = []
    for HS in (int(x) for x in args.head_sizes.split(",")):
        for T in (int(x) for x in args.seq_lens.split(",")):
            B = max(1, args.tokens // T)
            fwd_flops = 4.0 * B * args.heads * T * T * HS / 2
            set_bytes = 4 * B * T * args.heads * HS * 2
            sets = max(1, min(8, 4 * l2 // set_bytes + 1))
            backends = list(BACKENDS.items())
            for name, backend in (backends[::-1] if args.reverse_backends else backends):
                try:
                    fwd, bwd, both = time_backend(backend, args.layout, B, T, args.heads, HS,
                                                  sets, plan, args.timing)
                except RuntimeError as error:  # backend refuses the shape, or out of memory
                    print(f"{HS:4d} {T:6d} {B:3d} {name:<12} failed: {str(error).splitlines()[0]}")
                    torch.cuda.empty_cache()
                    fwd = bwd = both = math.nan
                row = dict(device=device, head_size=HS, seq_len=T, batch=B, heads=args.heads,
                           kernel=name, layout=args.layout, timing=args.timing, fwd_ms=fwd, bwd_ms=bwd, fwdbwd_ms=both,
                           fwd_tflops=fwd_flops / fwd / 1e9, bwd_tflops=2.5 * fwd_flops / bwd / 1e9,
                           fwdbwd_tflops=3.5 * fwd_flops / both / 1e9)
                rows.append(row)
                print(f"{HS:4d} {T:6d} {B:3d} {name:<12} | fwd {fwd:8.3f} ms {row['fwd_tflops']:6.1f} TF/s"
                      f" | bwd {bwd:8.3f} ms {row['bwd_tflops']:6.1f} | f+b {both:8.3f} ms "
                      f"{row['fwdbwd_tflops']:6.1f}", flush=True)
    write_csv(args.csv, rows)
    if args.ours:
        compare(args, rows, device)


def compare(args, torch_rows, device):
    with open(args.ours) as f:
        ours = list(csv.DictReader(f))
    ours_devices = {r["device"] for r in ours}
    if ours_devices != {device}:
        print(f"warning: {args.ours} was measured on {ours_devices}, PyTorch on {device}")
    ref = {(r["head_size"], r["seq_len"], r["kernel"]): r for r in torch_rows}
    kernels = sorted({r["kernel"] for r in ours if r["kernel"] != "naive"})
    lines = [f"Attention kernels, TFLOP/s (forward / backward / forward+backward), causal, bf16, "
             f"NH={args.heads}, B·T={args.tokens}, PyTorch's q/k/v layout: {args.layout}, "
             f"{args.timing} timing, "
             + (f"each timing after {args.warmup_ms:.0f} ms of untimed calls (sustained: the "
                "power cap's clock)" if args.warmup_ms > 0 else
                "each timing after a few untimed calls (short: mostly the boost clock)")
             + f"; {device}, "
             f"{datetime.date.today().isoformat()}, "
             f"{'one run' if args.passes == 1 else f'the median of {args.passes} passes'} "
             f"(ours and PyTorch {torch.__version__} in the same device call).", ""]
    header = "| HS | T | " + " | ".join(f"{k} f/b/f+b" for k in kernels) + \
        " | torch-fa2 f/b/f+b | torch-cudnn f/b/f+b | " + \
        " | ".join(f"{k} / fa2, / cudnn (f+b)" for k in kernels) + " |"
    lines += [header, "|" + " --- |" * (header.count("|") - 1)]
    for row in ours:
        if row["kernel"] != kernels[0]:
            continue
        hs, t = int(row["head_size"]), int(row["seq_len"])

        def triple(r):
            return "/".join(f"{float(r[k]):.0f}" for k in ("fwd_tflops", "bwd_tflops", "fwdbwd_tflops"))

        ours_rows = {r["kernel"]: r for r in ours
                     if int(r["head_size"]) == hs and int(r["seq_len"]) == t}
        fa2, cudnn = ref.get((hs, t, "torch-fa2")), ref.get((hs, t, "torch-cudnn"))
        cells = [str(hs), str(t)]
        cells += [triple(ours_rows[k]) if k in ours_rows else "-" for k in kernels]
        cells += [triple(fa2) if fa2 else "-", triple(cudnn) if cudnn else "-"]
        for k in kernels:
            mine = float(ours_rows[k]["fwdbwd_tflops"]) if k in ours_rows else math.nan
            cells.append(f"{mine / fa2['fwdbwd_tflops']:.2f}, {mine / cudnn['fwdbwd_tflops']:.2f}"
                         if fa2 and cudnn else "-")
        lines.append("| " + " | ".join(cells) + " |")
    print_table(lines, args.markdown)


if __name__ == "__main__":
    main()
