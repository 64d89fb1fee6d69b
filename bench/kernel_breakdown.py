#!/usr/bin/env python3
"""Where one training step's GPU time goes: every kernel of step 2 of a short gpt2-train run,
timed by Nsight Compute (ncu, one duration metric per kernel; ncu serializes the kernels, so the
sum is the step's kernel time without overlap or launch gaps), grouped by kernel.

Step 2 is the kernels after the first AdamW kernel up to and including the second: AdamW is the
last kernel of a step. Prints a Markdown table (kernel, calls, ms, share) and writes it to
--markdown when given. Needs ncu and a GPU.

  python3 bench/kernel_breakdown.py --train build/gpt2-train -- --model d12 --batch-size 16
"""
import argparse
import collections
import csv
import io
import re
import subprocess
import sys
import tempfile

from bench_io import print_table


def base_name(kernel):
    """A readable group name: cuBLAS kernels as one family per tile shape, others by function."""
    name = kernel.replace("(anonymous namespace)", "anon").replace("<unnamed>", "anon")
    name = re.sub(r"^void ", "", name)
    name = re.sub(r"\(.*$", "", name)          # arguments
    name = re.sub(r"<.*$", "", name)           # template arguments
    name = name.split("::")[-1].strip()
    if name.startswith(("sm90_xmma", "sm80_xmma", "nvjet", "cutlass", "gemm", "Kernel")):
        return "cuBLAS GEMM (" + name[:48] + ")"
    return name or kernel[:60]


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--train", default="build/gpt2-train")
    parser.add_argument("--ncu", default="ncu")
    parser.add_argument("--clock-control", default="base", choices=["base", "none"],
                        help="ncu's: base pins the clocks (repeatable), none runs at the GPU's own")
    parser.add_argument("--markdown", help="write the table here")
    parser.add_argument("--title", default="", help="a line above the table")
    parser.add_argument("train_args", nargs="*", help="gpt2-train options (after --)")
    args = parser.parse_args()

    # A run folder of its own: two breakdowns at once (one a GPU) must not share gpt2-train's lock.
    with tempfile.TemporaryDirectory(prefix="kernel_breakdown_") as run_dir:
        command = [args.ncu, "--csv", "--print-units", "base", "--clock-control",
                   args.clock_control, "--metrics", "gpu__time_duration.sum",
                   args.train, "--device", "cuda", "--steps", "2", "--val-every", "0",
                   "--sample-every", "0", "--checkpoint-every", "0", "--out",
                   run_dir + "/run"] + args.train_args
        run = subprocess.run(command, capture_output=True, text=True)
    if run.returncode != 0:
        sys.exit(f"kernel_breakdown: ncu failed ({run.returncode}):\n{run.stderr[-3000:]}")
    start = run.stdout.find('"ID"')
    if start < 0:
        sys.exit("kernel_breakdown: no kernel rows in ncu's output:\n" + run.stdout[-3000:])
    kernels = []  # (name, ns) in launch order
    for row in csv.DictReader(io.StringIO(run.stdout[start:])):
        if row.get("Metric Name") == "gpu__time_duration.sum":
            kernels.append((row["Kernel Name"], float(row["Metric Value"].replace(",", ""))))
    ends = [i for i, (name, _) in enumerate(kernels) if "adamw" in name.lower()]
    if len(ends) < 2:
        sys.exit(f"kernel_breakdown: expected 2 AdamW launches, found {len(ends)}")
    step = kernels[ends[0] + 1:ends[1] + 1]
    groups = collections.defaultdict(lambda: [0, 0.0])
    for name, ns in step:
        groups[base_name(name)][0] += 1
        groups[base_name(name)][1] += ns
    total_ms = sum(ns for _, ns in step) * 1e-6
    lines = [args.title, ""] if args.title else []
    lines += [f"{len(step)} kernels, {total_ms:.2f} ms of kernel time in step 2 (ncu, serialized)",
              "", "| kernel | calls | ms | share |", "|---|---|---|---|"]
    for name, (calls, ns) in sorted(groups.items(), key=lambda item: -item[1][1]):
        lines.append(f"| {name} | {calls} | {ns * 1e-6:.3f} | {100 * ns * 1e-6 / total_ms:.1f}% |")
    print_table(lines, args.markdown)


if __name__ == "__main__":
    main()
