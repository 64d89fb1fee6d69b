#!/usr/bin/env python3
"""tools/bench_csv_median.py on made-up passes of gpt2-attention-bench: per point the median time
(an even count: the mean of the middle two), TFLOP/s as the same work over it, NaN passes
skipped, the worst relative error, digests kept when the passes agree and "differs" when not, the
median SM clock (which differs per pass, so it is no part of the point), a point missing from one
pass; columns that differ, a missing file and no --out exit 2. Exits 0
when every check holds."""
import csv
import os
import tempfile

from tool_checks import Checks, repo_path, run_python

TOOL = repo_path("tools", "bench_csv_median.py")
HEADER = ["device", "head_size", "seq_len", "kernel", "fwd_ms", "bwd_ms", "fwd_tflops",
          "bwd_tflops", "rel_err_out", "dqkv_digest", "fwd_mhz"]
# Work: forward 100 (TFLOP/s x ms), backward 250.
PASSES = [
    [["H100", 64, 1024, "flash-hopper", 1.0, 2.0, 100.0, 125.0, 0.001, "aa", 1980],
     ["H100", 64, 1024, "flash-hopper-det", 1.0, 2.5, 100.0, 100.0, 0, "bb", 1700]],
    [["H100", 64, 1024, "flash-hopper", 2.0, "nan", 50.0, "nan", 0.003, "cc", 1740],
     ["H100", 64, 1024, "flash-hopper-det", 1.5, 2.0, 66.6667, 125.0, 0, "bb", "nan"],
     ["H100", 128, 2048, "flash-hopper", 4.0, 10.0, 25.0, 25.0, "nan", "dd", 1900]],
    [["H100", 64, 1024, "flash-hopper", 4.0, 5.0, 25.0, 50.0, 0.002, "aa", 1800],
     ["H100", 64, 1024, "flash-hopper-det", 0.5, 1.0, 200.0, 250.0, 0, "bb", 1760]],
]

checks = Checks("bench_csv_median_test")
check = checks.check


def run(*args):
    return run_python(TOOL, *args)


with tempfile.TemporaryDirectory() as tmp:
    paths = []
    for i, rows in enumerate(PASSES):
        paths.append(os.path.join(tmp, f"pass{i}.csv"))
        with open(paths[-1], "w", newline="") as f:
            writer = csv.writer(f)
            writer.writerow(HEADER)
            writer.writerows(rows)
    out = os.path.join(tmp, "median.csv")
    result = run("--out", out, *paths)
    check(result.returncode == 0, f"exit {result.returncode}: {result.stderr}")
    with open(out) as f:
        rows = list(csv.DictReader(f))
    check([(r["head_size"], r["kernel"]) for r in rows] ==
          [("64", "flash-hopper"), ("64", "flash-hopper-det"), ("128", "flash-hopper")],
          f"points: {rows}")
    racing, det, wide = rows
    check(float(racing["fwd_ms"]) == 2.0 and float(racing["fwd_tflops"]) == 50.0,
          f"median of three: {racing}")
    check(float(racing["bwd_ms"]) == 3.5 and abs(float(racing["bwd_tflops"]) - 250 / 3.5) < 1e-3,
          f"NaN skipped, even count: {racing}")
    check(float(racing["rel_err_out"]) == 0.003, f"worst error: {racing}")
    check(racing["dqkv_digest"] == "differs" and det["dqkv_digest"] == "bb",
          f"digests: {racing['dqkv_digest']} {det['dqkv_digest']}")
    check(float(det["bwd_ms"]) == 2.0 and float(det["bwd_tflops"]) == 125.0, f"det: {det}")
    check(float(wide["fwd_ms"]) == 4.0 and wide["rel_err_out"] == "nan", f"one pass: {wide}")
    check(float(racing["fwd_mhz"]) == 1800 and float(det["fwd_mhz"]) == 1730 and
          float(wide["fwd_mhz"]) == 1900, f"clocks: {racing} {det} {wide}")
    other = os.path.join(tmp, "other.csv")
    with open(other, "w") as f:
        f.write("device,seq_len,fwd_ms\nH100,1024,1.0\n")
    result = run("--out", out, paths[0], other)
    check(result.returncode == 2 and "columns differ" in result.stderr, f"columns: {result}")
    check(run("--out", out, os.path.join(tmp, "missing.csv")).returncode == 2, "missing file")
    check(run(paths[0]).returncode == 2, "no --out accepted")

checks.finish()
