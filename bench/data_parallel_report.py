#!/usr/bin/env python3
"""Tables and checks of tools/data_parallel_check.sh's runs (gpt2-train through NCCL).

Reads RUNS/runs.tsv and each run's metrics.jsonl and summary.json, then reports:
  world1  the plain single-GPU run against --comm nccl: losses the same bits (a failure
          otherwise), tokens/s and the ratio to the plain run of the same pass;
  tune    d12 on 2 GPUs over bucket sizes, NCCL thread blocks and the other settings, each
          against the mean of the 1-GPU runs before and after them;
  agree   N GPUs against 1 on the same global batch: the largest loss difference, fp32 (must be
          <= 1e-5 relative) and bf16 (its median against three 1-GPU runs must be within 3x
          the largest difference between two of them, the run-to-run noise);
  scale   tokens/s of N GPUs over N times one GPU's (must be >= 97% at 2 GPUs, >= 95% beyond),
          collective and exposed time per step and the per-rank peak memory, for the defaults
          and each variant;
  long    the long-context runs, with the same efficiency;
  context context parallelism: a group of N GPUs sharing each sequence against one GPU at the
          same T (tokens/s over N times the mean of the 1-GPU runs; must be >= 90%), and the
          longest context the group trained, with its memory per rank;
  memcheck  the sanitizer's verdict on the 2-GPU tests (must be clean) and on a deliberate
          error (must be caught), from their exit codes.
Writes --markdown and --csv; exits 1 when a check fails or a run has no summary.

  python3 bench/data_parallel_report.py --runs out/data-parallel \\
      --markdown bench/results/data_parallel.md --csv bench/results/data_parallel.csv
"""
import argparse
import csv
import datetime
import json
import os
import subprocess
import sys

from bench_io import write_csv, write_text


def read_runs(folder):
    with open(os.path.join(folder, "runs.tsv")) as f:
        runs = list(csv.DictReader(f, delimiter="\t"))
    for run in runs:
        path = os.path.join(folder, run["name"])
        run["metrics"], run["summary"] = [], None
        try:
            with open(os.path.join(path, "metrics.jsonl")) as f:
                run["metrics"] = [json.loads(line) for line in f if line.strip()]
            with open(os.path.join(path, "summary.json")) as f:
                run["summary"] = json.load(f)
        except (OSError, ValueError) as e:
            print(f"{run['name']}: no complete results ({e})")
    return runs


def losses(run):
    return [m["loss"] for m in run["metrics"]]


def max_difference(a, b, relative=False):
    if not a or len(a) != len(b):
        return float("inf")
    worst = 0.0
    for x, y in zip(a, b):
        d = abs(x - y)
        worst = max(worst, d / abs(y) if relative and y else d)
    return worst


def mean_after_warmup(run, key):
    values = [m[key] for m in run["metrics"] if key in m]
    skip = run["summary"].get("warmup_steps_excluded", 0) if run["summary"] else 0
    values = values[skip:]
    return sum(values) / len(values) if values else float("nan")


def gib(n):
    return n / 2**30


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", required=True, help="tools/data_parallel_check.sh's OUT_DIR")
    parser.add_argument("--markdown", required=True)
    parser.add_argument("--csv", required=True)
    args = parser.parse_args()

    runs = read_runs(args.runs)
    by_name = {r["name"]: r for r in runs}
    failures = [f"{r['name']}: no summary" for r in runs if r["summary"] is None]
    done = [r for r in runs if r["summary"] is not None]
    device = done[0]["summary"].get("device_name", "?") if done else "?"
    # GPT2_COMMIT names the code when the tree's git metadata is not its own (a copied tree).
    commit = os.environ.get("GPT2_COMMIT") or subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip() or "?"
    today = datetime.date.today().isoformat()
    only_context = bool(runs) and all(r["group"].startswith("context") for r in runs)
    title = "Context" if only_context else "Data"
    md = [f"# {title}-parallel training through NCCL\n",
          f"Device: {device} (up to x{max(int(r['world']) for r in runs) if runs else 1}: one "
          f"per rank), {today}, commit {commit}. gpt2-train, bf16 unless marked, "
          f"NCCL_NVLS_ENABLE=0. Throughput: mean tokens/s over the steps after warm-up; comm: "
          f"GPU time inside the collectives per step, exposed: the part the computation "
          f"waited for.\n"]
    rows = []

    def row(run, **extra):
        s = run["summary"]
        r = {"name": run["name"], "group": run["group"], "device": device, "date": today,
             "commit": commit, "model": run["model"], "seq_len": run["seq_len"],
             "batch_per_gpu": run["batch_per_gpu"], "world": run["world"], "comm": run["comm"],
             "zero": run["zero"], "overlap": run["overlap"], "precision": run["precision"],
             "grad_reduce": run.get("grad_reduce", ""), "bucket": run.get("bucket", ""),
             "nccl_max_ctas": run.get("ctas", ""), "cuda_graph": run.get("graph", ""),
             "gpu": run.get("gpu", ""),
             "tokens_per_s": round(s["tokens_per_s"], 1),
             "comm_ms": round(s.get("comm_ms_per_step", float("nan")), 3),
             "comm_exposed_ms": round(s.get("comm_exposed_ms_per_step", float("nan")), 3),
             "peak_mem_gib_per_rank": round(gib(s["peak_mem_bytes"]), 3),
             "final_loss": s.get("final_train_loss")}
        r.update(extra)
        rows.append(r)
        return r

    def efficiency_row(run, one_gpu_tps):
        world = int(run["world"])
        tps = run["summary"]["tokens_per_s"]
        efficiency = tps / (world * one_gpu_tps)
        step_ms = mean_after_warmup(run, "ms")
        r = row(run, efficiency=round(efficiency, 4), step_ms=round(step_ms, 2))
        return r, tps, efficiency, step_ms

    # --- world size 1 -------------------------------------------------------------------------
    world1 = [r for r in done if r["group"] == "world1"]
    if world1:
        md.append("## World size 1: the plain path against NCCL\n")
        md.append("| run | precision | ZeRO | overlap | losses vs plain | tokens/s | vs plain "
                  "| comm ms | exposed ms | peak GiB |")
        md.append("|---|---|---|---|---|---|---|---|---|---|")
        for run in world1:
            suffix = run["name"].rsplit("-", 1)[-1]
            plain = by_name.get(f"w1-plain-{suffix}")
            if plain is None or plain["summary"] is None:
                continue
            same = losses(run) == losses(plain)
            if run is not plain and not same:
                failures.append(f"{run['name']}: losses differ from {plain['name']} "
                                f"(max |diff| {max_difference(losses(run), losses(plain)):.3g})")
            ratio = run["summary"]["tokens_per_s"] / plain["summary"]["tokens_per_s"]
            r = row(run, same_losses_as_plain=same, ratio_to_plain=round(ratio, 4))
            md.append(f"| {run['name']} | {run['precision']} | {run['zero']} | {run['overlap']} "
                      f"| {'same bits' if same else 'DIFFER'} | {r['tokens_per_s']:.0f} "
                      f"| {ratio:.3f} | {r['comm_ms']} | {r['comm_exposed_ms']} "
                      f"| {r['peak_mem_gib_per_rank']:.2f} |")
        md.append("")

    # --- tune ---------------------------------------------------------------------------------
    tune = [r for r in done if r["group"] == "tune"]
    for model in dict.fromkeys(r["model"] for r in tune):
        runs_of_model = [r for r in tune if r["model"] == model]
        base = [r for r in runs_of_model
                if r["name"] in (f"tune-{model}-1gpu-a", f"tune-{model}-1gpu-b")]
        if not base:
            continue
        base_tps = sum(r["summary"]["tokens_per_s"] for r in base) / len(base)
        md.append(f"## Tuning: {model}, T=1024, B=16 per GPU\n")
        md.append(f"Efficiency against {base_tps:.0f} tokens/s, the mean of the 1-GPU runs "
                  f"before and after.\n")
        md.append("| run | GPUs | sums | bucket | NCCL CTAs | overlap | graph | tokens/s "
                  "| efficiency | comm ms | exposed ms | step ms |")
        md.append("|---|---|---|---|---|---|---|---|---|---|---|---|")
        for run in runs_of_model:
            r, tps, efficiency, step_ms = efficiency_row(run, base_tps)
            gpus = run["world"] if run.get("gpu", "all") == "all" else f"1 (GPU {run['gpu']})"
            md.append(f"| {run['name']} | {gpus} | {run.get('grad_reduce', '')} "
                      f"| {run.get('bucket', '')} | {run.get('ctas', '')} | {run['overlap']} "
                      f"| {run.get('graph', '')} | {tps:.0f} | {100 * efficiency:.1f}% "
                      f"| {r['comm_ms']} | {r['comm_exposed_ms']} | {step_ms:.2f} |")
        md.append("")

    # --- agreement ----------------------------------------------------------------------------
    def pair(a, b):
        ra, rb = by_name.get(a), by_name.get(b)
        return (ra, rb) if ra and rb and ra["summary"] and rb["summary"] else (None, None)

    agree_lines = []
    # The agreement runs of N ranks (the job's largest world) against one GPU.
    agree_worlds = [int(r["world"]) for r in done if r["group"] == "agree" and int(r["world"]) > 1]
    n = max(agree_worlds, default=2)
    one, two = pair("agree-1gpu-fp32", f"agree-{n}gpu-fp32")
    if one:
        worst = max_difference(losses(two), losses(one), relative=True)
        if worst > 1e-5:
            failures.append(f"fp32: {n} GPUs vs 1, max relative loss difference {worst:.3g} "
                            f"> 1e-5")
        row(one), row(two, max_loss_difference_vs_1gpu=worst)
        agree_lines.append(f"| fp32 | {len(losses(one))} | {worst:.3g} (relative) | <= 1e-5 "
                           f"relative |")
    # bf16: the N-GPU run's distance from each 1-GPU run (their median) against the largest
    # distance between two 1-GPU runs (the run-to-run noise of the racing attention backward,
    # every pair of them: a single pair's largest difference varied 3x between calls).
    ones = [r for r in done if r["group"] == "agree" and int(r["world"]) == 1
            and r["name"].startswith("agree-1gpu-bf16") and r["summary"]]
    two = by_name.get(f"agree-{n}gpu-bf16")
    if ones and two and two["summary"]:
        distances = sorted(max_difference(losses(two), losses(one)) for one in ones)
        worst = distances[len(distances) // 2]
        noise = max((max_difference(losses(a), losses(b))
                     for i, a in enumerate(ones) for b in ones[i + 1:]), default=float("nan"))
        if len(ones) > 1 and worst > 3 * noise:
            failures.append(f"bf16: {n} GPUs vs 1, median max loss difference {worst:.3g} > 3x "
                            f"the largest run-to-run difference {noise:.3g}")
        row(ones[0]), row(two, max_loss_difference_vs_1gpu=worst)
        for again in ones[1:]:
            row(again, max_loss_difference_vs_1gpu=max_difference(losses(again),
                                                                  losses(ones[0])))
        agree_lines.append(f"| bf16 ({two.get('grad_reduce', '')} sums) | "
                           f"{len(losses(ones[0]))} | {worst:.3g} (median against "
                           f"{len(ones)} 1-GPU runs) | <= 3x {noise:.3g}, the largest "
                           f"difference between two of the {len(ones)} 1-GPU runs |")
    if agree_lines:
        md.append(f"## {n} GPUs x B={32 // n} against 1 GPU x B=32 (d12, T=1024, same "
                  f"windows)\n")
        md.append("| precision | steps | max loss difference | reference |")
        md.append("|---|---|---|---|")
        md += agree_lines + [""]

    # --- scaling ------------------------------------------------------------------------------
    scale = [r for r in done if r["group"] == "scale"]
    if scale:
        md.append("## Scaling, T=1024, B=16 per GPU\n")
        md.append("| model | GPUs | ZeRO | sums | overlap | tokens/s | per GPU | efficiency "
                  "| comm ms | exposed ms | step ms | peak GiB per rank |")
        md.append("|---|---|---|---|---|---|---|---|---|---|---|---|")
        for model in dict.fromkeys(r["model"] for r in scale):
            of_model = [r for r in scale if r["model"] == model]
            ones = [r["summary"]["tokens_per_s"] for r in of_model if int(r["world"]) == 1]
            if not ones:
                continue
            base_tps = sum(ones) / len(ones)  # the mean of the interleaved 1-GPU runs
            for run in of_model:
                r, tps, efficiency, step_ms = efficiency_row(run, base_tps)
                world = int(run["world"])
                md.append(f"| {run['model']} | {world} | {run['zero']} "
                          f"| {run.get('grad_reduce', '')} | {run['overlap']} | {tps:.0f} "
                          f"| {tps / world:.0f} | {100 * efficiency:.1f}% | {r['comm_ms']} "
                          f"| {r['comm_exposed_ms']} | {step_ms:.1f} "
                          f"| {r['peak_mem_gib_per_rank']:.2f} |")
        md.append("\nEfficiency: tokens/s over world size times the mean of the model's 1-GPU "
                  "runs in this table.")
        md.append("")

    # --- long context -------------------------------------------------------------------------
    long_runs = [r for r in done if r["group"] == "long"]
    if long_runs:
        md.append("## Long context: d12, T=65536, B=1 per GPU\n")
        md.append("| GPUs | tokens/s | per GPU | efficiency | comm ms | exposed ms | step ms "
                  "| peak GiB per rank | final loss |")
        md.append("|---|---|---|---|---|---|---|---|---|")
        base = by_name.get("long-1gpu")
        base_tps = base["summary"]["tokens_per_s"] if base and base["summary"] else float("nan")
        for run in long_runs:
            r, tps, efficiency, step_ms = efficiency_row(run, base_tps)
            world = int(run["world"])
            md.append(f"| {world} | {tps:.0f} | {tps / world:.0f} | {100 * efficiency:.1f}% "
                      f"| {r['comm_ms']} | {r['comm_exposed_ms']} | {step_ms:.1f} "
                      f"| {r['peak_mem_gib_per_rank']:.2f} | {r['final_loss']:.4f} |")
        md.append("")

    # --- context parallel ---------------------------------------------------------------------
    context_runs = [r for r in done if r["group"] in ("context", "context-long")]
    if context_runs:
        md.append("## Context parallelism: d12, B=1, one sequence shared by a group of GPUs\n")
        md.append("| run | T | GPUs | group | tokens/s | vs N x one GPU | step ms | comm ms "
                  "| peak GiB per rank | final loss |")
        md.append("|---|---|---|---|---|---|---|---|---|---|")
        singles = [r["summary"]["tokens_per_s"] for r in context_runs
                   if r["group"] == "context" and int(r["world"]) == 1]
        single_tps = sum(singles) / len(singles) if singles else float("nan")
        for run in context_runs:
            world = int(run["world"])
            grouped = run["group"] == "context" and world > 1
            r, tps, efficiency, step_ms = efficiency_row(run, single_tps)
            r["context"] = run.get("context", "1")
            shown = f"{100 * efficiency:.1f}%" if grouped else "-"
            md.append(f"| {run['name']} | {run['seq_len']} | {world} | {r['context']} "
                      f"| {tps:.0f} | {shown} | {step_ms:.1f} | {r['comm_ms']} "
                      f"| {r['peak_mem_gib_per_rank']:.2f} | {r['final_loss']:.4f} |")
            if grouped and efficiency < 0.90:
                failures.append(f"{run['name']}: {100 * efficiency:.1f}% of {world}x one GPU's "
                                f"tokens/s, below the 90% target")
        md.append("\nvs N x one GPU: tokens/s over N times the mean of the 1-GPU runs at that T "
                  "in this table (a group of N shares one sequence, so N x one GPU is its "
                  "ideal).")
        md.append("")

    def exit_code(name):
        try:
            with open(os.path.join(args.runs, name)) as f:
                return int(f.read().strip())
        except (OSError, ValueError):
            return None

    clean, canary = exit_code("memcheck.rc"), exit_code("memcheck_canary.rc")
    if clean is not None:
        md.append("## compute-sanitizer memcheck\n")
        md.append(f"- the 2-GPU tests (CudaDataParallel.TwoGpusGive*, NcclCommunicator.TwoGpus*, "
                  f"CudaContextParallel.*Fp32): "
                  f"{'clean' if clean == 0 else f'FAILED (exit {clean})'}")
        if clean != 0:
            failures.append(f"memcheck of the 2-GPU tests failed (exit {clean}): a real error, "
                            f"see memcheck.log (NCCL's probe errors are not reported)")
        if canary is not None:
            try:
                with open(os.path.join(args.runs, "memcheck_canary.log")) as f:
                    reported = "Invalid __global__ write" in f.read()
            except OSError:
                reported = False
            caught = canary != 0 and reported
            md.append(f"- a deliberate out-of-bounds write (SanitizerCanary), same command: "
                      f"{'caught' if caught else 'NOT caught'}")
            if not caught:
                failures.append("memcheck did not catch the deliberate error: the check is blind")
        md.append("")

    # The targets: the default multi-GPU runs keep >= 97% of N x one GPU's tokens/s at 2 GPUs
    # (issue 20) and >= 95% beyond (issue 25).
    for r in rows:
        world = int(r["world"])
        default_run = world > 1 and (
            r["name"] == f"long-{world}gpu" or
            r["name"].startswith("scale-") and r["name"].endswith((f"-{world}gpu",
                                                                   f"-{world}gpu-again")))
        target = 0.97 if world == 2 else 0.95
        if default_run and "efficiency" in r and r["efficiency"] < target:
            failures.append(f"{r['name']}: {100 * r['efficiency']:.1f}% of {world}x one GPU's "
                            f"tokens/s, below the {100 * target:.0f}% target")

    if failures:
        md.append("## Failed checks\n")
        md += [f"- {f}" for f in failures] + [""]
    text = "\n".join(md)
    print(text)
    write_text(args.markdown, text)
    if rows:
        keys = []
        for r in rows:
            keys += [k for k in r if k not in keys]
        write_csv(args.csv, [{k: r.get(k, "") for k in keys} for r in rows])
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
