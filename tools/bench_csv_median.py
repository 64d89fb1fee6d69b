#!/usr/bin/env python3
"""One benchmark CSV from several passes of the same benchmark: the median of each timing.

  tools/bench_csv_median.py --out OUT.csv PASS1.csv PASS2.csv ...

For CSVs of gpt2-attention-bench or bench/pytorch_attention.py (one row per point, the same
columns in every pass). A row's point is every column but the measured ones; per point:
  X_ms       the median over the passes that measured it (NaN skipped; NaN when none did);
  X_tflops   the same work over that median time (tflops x ms is the row's work in any pass),
             so that the two columns stay consistent with an even number of passes;
  X_mhz      the median over the passes (gpt2-attention-bench's SM clock after the timing);
  rel_err_*  the largest (the worst pass);
  *_digest   the value when every pass agrees, else "differs".
Rows come in the first pass's order; a point missing from a later pass uses the passes that
have it. Exit 0, or 2 for a missing file, no input or inputs whose columns differ.
"""
import argparse
import csv
import math
import statistics
import sys


def fail(message):
    print(f"bench_csv_median: {message}", file=sys.stderr)
    sys.exit(2)


def measured(column):
    return (column.endswith("_ms") or column.endswith("_tflops") or column.startswith("rel_err")
            or column.endswith("_digest") or column.endswith("_mhz"))


def number(text):
    try:
        return float(text)
    except ValueError:
        return math.nan


def merge(header, rows):
    """rows: one point's rows, a pass each -> the merged row."""
    merged = dict(rows[0])
    for column in header:
        if column.endswith("_ms"):
            times = [number(r[column]) for r in rows]
            finite = [t for t in times if math.isfinite(t)]
            median = statistics.median(finite) if finite else math.nan
            merged[column] = f"{median:.6g}"
            rate = column[:-3] + "_tflops"
            if rate in header:
                works = [number(r[rate]) * t for r, t in zip(rows, times)]
                work = next((w for w in works if math.isfinite(w)), math.nan)
                merged[rate] = f"{work / median:.6g}" if finite else "nan"
        elif column.endswith("_mhz"):
            clocks = [c for c in (number(r[column]) for r in rows) if math.isfinite(c)]
            merged[column] = f"{statistics.median(clocks):.6g}" if clocks else "nan"
        elif column.startswith("rel_err"):
            errors = [number(r[column]) for r in rows]
            finite = [e for e in errors if math.isfinite(e)]
            merged[column] = f"{max(finite):.6g}" if finite else "nan"
        elif column.endswith("_digest"):
            values = {r[column] for r in rows}
            merged[column] = values.pop() if len(values) == 1 else "differs"
    return merged


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("passes", nargs="+")
    args = parser.parse_args()
    header, points, order = None, {}, []
    for path in args.passes:
        try:
            with open(path, newline="") as f:
                reader = csv.DictReader(f)
                rows = list(reader)
                columns = reader.fieldnames
        except OSError as error:
            fail(f"cannot read {path}: {error}")
        if not columns:
            fail(f"{path}: empty")
        if header is None:
            header = columns
        elif columns != header:
            fail(f"{path}: its columns differ from {args.passes[0]}'s")
        for row in rows:
            key = tuple(row[c] for c in header if not measured(c))
            if key not in points:
                points[key] = []
                order.append(key)
            points[key].append(row)
    try:
        with open(args.out, "w", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=header)
            writer.writeheader()
            for key in order:
                writer.writerow(merge(header, points[key]))
    except OSError as error:
        fail(f"cannot write {args.out}: {error}")
    print(f"{args.out}: {len(order)} points, the median of {len(args.passes)} passes")
    return 0


if __name__ == "__main__":
    sys.exit(main())
