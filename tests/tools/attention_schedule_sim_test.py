#!/usr/bin/env python3
"""bench/attention_schedule_sim.py --fit on a made-up benchmark CSV whose forward TFLOP/s come
from the model itself (3.0 us per item + 1.5 us per key tile at head size 128, on 132 SMs):
the fit finds those costs back and prints model and measurement alike; rows of another kernel
are left out, and a CSV without the kernel's rows exits with a message. Exits 0 when every
check holds."""
import os
import re
import subprocess
import sys
import tempfile

from tool_checks import Checks, repo_path

BENCH = repo_path("bench")
sys.path.insert(0, BENCH)
import attention_schedule_sim as sim  # noqa: E402

checks = Checks("attention_schedule_sim --fit")
check = checks.check


HEADER = ("device,head_size,seq_len,batch,heads,kernel,deterministic,sets,fwd_ms,bwd_ms,"
          "fwdbwd_ms,fwd_tflops,bwd_tflops,fwdbwd_tflops,rel_err_out,rel_err_dqkv,out_digest,"
          "dqkv_digest\n")
FIXED, PER_TILE, NH, SMS = 3.0, 1.5, 12, 132
lines = [HEADER]
for T in (1024, 4096, 16384):
    B = 16384 // T
    costs = [FIXED + PER_TILE * u for u in sim.item_costs(T, 128, B, NH, SMS, 0.0)]
    greedy_us = sim.makespans(costs, SMS)[1]
    tflops = sim.forward_flops(B, NH, T, 128) / (greedy_us * 1e6)
    lines.append(f"GPU,128,{T},{B},{NH},flash-hopper,0,3,0,0,0,{tflops:.3f},0,0,0,0,x,y\n")
    lines.append(f"GPU,128,{T},{B},{NH},naive,0,3,0,0,0,1.0,0,0,0,0,x,y\n")  # left out

with tempfile.TemporaryDirectory() as tmp:
    path = os.path.join(tmp, "bench.csv")
    with open(path, "w") as f:
        f.writelines(lines)
    run = subprocess.run([sys.executable, os.path.join(BENCH, "attention_schedule_sim.py"),
                          "--fit", path], capture_output=True, text=True)
    check(run.returncode == 0, f"fit exit {run.returncode}: {run.stderr}")
    found = re.search(r"head size 128: ([\d.]+) us per item \+ ([\d.]+) us per key tile",
                      run.stdout)
    check(found is not None, f"no fit line in: {run.stdout}")
    if found:
        check(abs(float(found.group(1)) - FIXED) < 0.05, f"fixed cost {found.group(1)}")
        check(abs(float(found.group(2)) - PER_TILE) < 0.01, f"per tile {found.group(2)}")
    rows = re.findall(r"^\s+(\d+)\s+(\d+)\s+(\d+)\s+[\d.]+\s+([\d.]+)$", run.stdout, re.M)
    check(len(rows) == 3, f"rows: {rows}")
    check(all(model == measured for _, model, measured, _ in rows), f"model != measured: {rows}")
    check("head size 64" not in run.stdout, "a head size without rows printed")

    with open(path, "w") as f:
        f.writelines([HEADER, lines[2]])  # the naive row only
    run = subprocess.run([sys.executable, os.path.join(BENCH, "attention_schedule_sim.py"),
                          "--fit", path], capture_output=True, text=True)
    check(run.returncode == 2 and "no rows of kernel flash-hopper" in run.stderr,
          f"no rows: exit {run.returncode}, {run.stderr}")
    for bad, expected in ((os.path.join(tmp, "missing.csv"), "cannot read"),
                          (os.path.join(tmp, "other.csv"), "not a gpt2-attention-bench CSV")):
        if bad.endswith("other.csv"):
            with open(bad, "w") as f:
                f.write("a,b\n1,2\n")
        run = subprocess.run([sys.executable, os.path.join(BENCH, "attention_schedule_sim.py"),
                              "--fit", bad], capture_output=True, text=True)
        check(run.returncode == 2 and expected in run.stderr,
              f"{bad}: exit {run.returncode}, {run.stderr}")

checks.finish()
