#!/usr/bin/env python3
"""Where a kernel's warps wait, by stretch of SASS: a summary of Nsight Compute's source page.

  ncu --set full --import-source no -k regex:NAME -c 1 -o REPORT PROGRAM ...
  ncu -i REPORT.ncu-rep --page source --print-source sass --csv | gzip > SOURCE.csv.gz
  tools/ncu_stalls.py SOURCE.csv[.gz] [--regions auto|A:B,C:D,...] [--per N] [--top K]

The CSV holds one row per SASS instruction: its warp-stall samples in total and by reason
(stall_*), and how often it executed. The summary prints the samples by reason over the kernel,
then per region: its instructions (row indices), the instructions it executed (divided by --per:
e.g. the loop's trips times its warps, for instructions per warp and trip), its share of the
samples and its three main stall reasons; then the --top instructions by samples.
Regions: --regions auto (the default) makes one of each run of consecutive rows that executed
equally often (a loop's straight-line stretches, split where a branch skips part of them), runs
under 1% of the samples merged into the previous; or A:B,... gives index ranges (inclusive).
Exit 0, or 2 for a missing file, a CSV without the expected columns or a bad option.
Session eighteen's reading of the head size 128 backward (bench/NOTES.md) came from this.
"""
import argparse
import csv
import gzip
import sys

SAMPLES = "Warp Stall Sampling (All Samples)"
EXECUTED = "Instructions Executed"
SOURCE = "Source"


def fail(message):
    print(f"ncu_stalls: {message}", file=sys.stderr)
    sys.exit(2)


def read_rows(path):
    """The instruction rows as dicts, and the stall-reason columns (all samples)."""
    opener = gzip.open if path.endswith(".gz") else open
    try:
        with opener(path, "rt", newline="") as f:
            lines = list(csv.reader(f))
    except OSError as error:
        fail(f"cannot read {path}: {error}")
    header_at = next((i for i, row in enumerate(lines) if SAMPLES in row and SOURCE in row), None)
    if header_at is None:
        fail(f"{path}: no '{SAMPLES}' and '{SOURCE}' columns (ncu --page source --csv?)")
    header = lines[header_at]
    reasons = [h for h in header if h.startswith("stall_") and "(Not Issued)" not in h]

    def number(text):
        try:
            return int(float(text))
        except ValueError:
            return 0

    rows = []
    for line in lines[header_at + 1:]:
        if len(line) != len(header):
            continue
        cells = dict(zip(header, line))
        rows.append({"source": cells[SOURCE].strip(), "samples": number(cells[SAMPLES]),
                     "executed": number(cells.get(EXECUTED, "0")),
                     "reasons": {r: number(cells[r]) for r in reasons}})
    if not rows:
        fail(f"{path}: no instruction rows")
    return rows, reasons


def auto_regions(rows, total):
    """Runs of equal execution counts; those under 1% of the samples join the run before."""
    runs = []
    for i, row in enumerate(rows):
        if runs and rows[runs[-1][1]]["executed"] == row["executed"]:
            runs[-1][1] = i
        else:
            runs.append([i, i])
    merged = []
    for a, b in runs:
        share = sum(r["samples"] for r in rows[a:b + 1]) / max(total, 1)
        if merged and share < 0.01:
            merged[-1][1] = b
        else:
            merged.append([a, b])
    return [tuple(x) for x in merged]


def parse_regions(text, count):
    regions = []
    for part in text.split(","):
        a, sep, b = part.partition(":")
        try:
            a, b = int(a), int(b)
        except ValueError:
            fail(f"--regions takes A:B ranges of row indices, got '{part}'")
        if not sep or a < 0 or b < a or b >= count:
            fail(f"--regions: {part} is not a range inside rows 0..{count - 1}")
        regions.append((a, b))
    return regions


def top_reasons(counter, total, k=3):
    ranked = sorted(counter.items(), key=lambda x: -x[1])[:k]
    return ", ".join(f"{name[6:]} {100 * v / max(total, 1):.0f}%" for name, v in ranked if v)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("csv")
    parser.add_argument("--regions", default="auto")
    parser.add_argument("--per", type=float, default=1.0)
    parser.add_argument("--top", type=int, default=10)
    args = parser.parse_args()
    if args.per <= 0 or args.top < 0:
        fail("--per must be > 0 and --top >= 0")
    rows, reasons = read_rows(args.csv)
    total = sum(r["samples"] for r in rows)
    print(f"{len(rows)} instructions, {total} warp-stall samples")
    overall = {r: sum(row["reasons"][r] for row in rows) for r in reasons}
    for name, v in sorted(overall.items(), key=lambda x: -x[1]):
        if v:
            print(f"  {name[6:]:<18} {v:>9} {100 * v / max(total, 1):5.1f}%")
    regions = auto_regions(rows, total) if args.regions == "auto" else parse_regions(
        args.regions, len(rows))
    print(f"\n{'rows':>11} {'instr/unit':>10} {'samples':>8}  main reasons; first instruction")
    for a, b in regions:
        part = rows[a:b + 1]
        samples = sum(r["samples"] for r in part)
        executed = sum(r["executed"] for r in part) / args.per
        counter = {x: sum(r["reasons"][x] for r in part) for x in reasons}
        print(f"{a:>5}-{b:<5} {executed:>10.1f} {100 * samples / max(total, 1):7.1f}%  "
              f"{top_reasons(counter, samples)}; {part[0]['source'][:48]}")
    if args.top:
        print(f"\ntop {args.top} instructions by samples")
        ranked = sorted(range(len(rows)), key=lambda i: -rows[i]["samples"])[:args.top]
        for i in sorted(ranked):
            r = rows[i]
            print(f"{i:>5} {100 * r['samples'] / max(total, 1):5.1f}%  {r['source'][:60]:<60} "
                  f"{top_reasons(r['reasons'], r['samples'], 2)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
