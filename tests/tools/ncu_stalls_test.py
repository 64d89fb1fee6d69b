#!/usr/bin/env python3
"""tools/ncu_stalls.py on a made-up Nsight Compute source-page CSV (gzipped, with the title line
ncu writes before the header): the samples by reason over the kernel, regions made of runs of
equal execution counts (a run under 1% of the samples joining the one before), instructions per
unit with --per, explicit --regions, the top instructions; a missing file, a CSV without the
columns and bad options exit 2. Exits 0 when every check holds."""
import csv
import gzip
import os
import tempfile

from tool_checks import Checks, repo_path, run_python

TOOL = repo_path("tools", "ncu_stalls.py")
HEADER = ["Address", "Source", "Warp Stall Sampling (All Samples)",
          "Warp Stall Sampling (Not-issued Samples)", "Instructions Executed", "stall_barrier",
          "stall_long_sb", "stall_math", "stall_barrier (Not Issued)"]
# (source, samples, executed, barrier, long_sb, math): a prologue, a loop of three
# instructions run 100 times, one rare instruction (0.5% of the samples) inside the loop's
# stretch, then a wait loop.
ROWS = [("LDC R1, c[0x0][0x28]", 10, 4, 0, 10, 0),
        ("HGMMA.64x64x16.F32.BF16 R24, gdesc[UR4], RZ", 200, 100, 0, 0, 200),
        ("WARPGROUP.DEPBAR.LE gsb0, 0x0", 500, 100, 500, 0, 0),
        ("FMUL R2, R2, R3", 100, 100, 0, 0, 100),
        ("@P0 BRA 0x100", 5, 7, 0, 5, 0),
        ("SYNCS.PHASECHK.TRANS64.TRYWAIT P0, [R7], R4", 185, 50, 0, 185, 0)]

checks = Checks("ncu_stalls_test")
check = checks.check


def run(*args):
    return run_python(TOOL, *args)


def region_lines(out):
    """The region table's rows: they start with a row range A-B."""
    return [l for l in out.splitlines()
            if l.split() and l.split()[0].replace("-", "", 1).isdigit() and "-" in l.split()[0]]


with tempfile.TemporaryDirectory() as tmp:
    good = os.path.join(tmp, "source.csv.gz")
    with gzip.open(good, "wt", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["Kernel Name", "void kernel<128>(Params)"])
        writer.writerow(HEADER)
        for i, (source, samples, executed, barrier, long_sb, math) in enumerate(ROWS):
            writer.writerow([hex(16 * i), f"      {source}", samples, samples, executed, barrier,
                             long_sb, math, 0])
    result = run(good, "--per", "4", "--top", "2")
    out = result.stdout
    check(result.returncode == 0, f"exit {result.returncode}: {result.stderr}")
    check(out.startswith("6 instructions, 1000 warp-stall samples"), out)
    check("barrier" in out and " 500  50.0%" in out, f"barrier total: {out}")
    lines = out.splitlines()
    regions = region_lines(out)
    # Runs: [0], [1-3], [4] (0.5%: joins 1-3), [5].
    check([l.split()[0] for l in regions] == ["0-0", "1-4", "5-5"], f"regions: {regions}")
    check(regions[1].split()[1] == "76.8" and regions[1].split()[2] == "80.5%",
          f"loop region: {regions[1]}")
    check("barrier 62%" in regions[1] and "math 37%" in regions[1], f"loop reasons: {regions[1]}")
    top = lines[lines.index("top 2 instructions by samples") + 1:]
    check(len(top) == 2 and top[0].split()[0] == "1" and top[1].split()[0] == "2", f"top: {top}")
    result = run(good, "--regions", "0:2,3:5", "--top", "0")
    regions = [l.split()[0] for l in region_lines(result.stdout)]
    check(result.returncode == 0 and regions == ["0-2", "3-5"],
          f"explicit regions: {result.stdout} {result.stderr}")
    check("top" not in result.stdout, "--top 0 printed instructions")
    for bad_args in (["--regions", "3:1"], ["--regions", "0:9"], ["--regions", "a:b"],
                     ["--per", "0"]):
        result = run(good, *bad_args)
        check(result.returncode == 2, f"{bad_args}: exit {result.returncode}")
    plain = os.path.join(tmp, "plain.csv")
    with open(plain, "w") as f:
        f.write("a,b\n1,2\n")
    result = run(plain)
    check(result.returncode == 2 and "no 'Warp Stall" in result.stderr, f"no columns: {result}")
    check(run(os.path.join(tmp, "missing.csv")).returncode == 2, "missing file accepted")

checks.finish()
