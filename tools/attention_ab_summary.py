#!/usr/bin/env python3
"""Two builds of gpt2-attention-bench compared, from the CSVs of interleaved passes.

  tools/attention_ab_summary.py --base BASE.csv [BASE.csv ...] --new NEW.csv [NEW.csv ...]
                                [--markdown OUT.md]

Each CSV is one pass of `gpt2-attention-bench --csv` (tools/attention_ab.sh runs the passes,
base and new taking turns). Per head size, T and kernel: the forward, backward and
forward+backward TFLOP/s of each pass, base then new, the ratio of their medians (new / base),
and whether the two builds' digests of out and dqkv agree in every pass ("same bits"), which for
a deterministic kernel shows that a change left its results bit for bit; else per tensor "same",
"differ", or "varies in base" where the base's own passes disagree (the racing backward's dqkv
from 4K). A point that
one side lacks, or that a pass did not time (NaN: it ran out of memory or its time), is listed
as missing rather than compared. Exit 0; 2 for a missing or unreadable file, a CSV without the
bench's columns or with a row it does not write, or one device name in base and another in new
(timings from two devices do not compare).
"""
import argparse
import csv
import math
import statistics
import sys

COLUMNS = ("device", "head_size", "seq_len", "kernel", "fwd_tflops", "bwd_tflops",
           "fwdbwd_tflops", "out_digest", "dqkv_digest")
METRICS = (("fwd", "fwd_tflops"), ("bwd", "bwd_tflops"), ("f+b", "fwdbwd_tflops"))


class Unusable(Exception):
    pass


def read_passes(paths):
    """{(head size, T, kernel): [row of each pass that has it]}, and the devices named."""
    points, devices = {}, set()
    for path in paths:
        try:
            with open(path, newline="") as f:
                reader = csv.DictReader(f)
                missing = [c for c in COLUMNS if c not in (reader.fieldnames or [])]
                if missing:
                    raise Unusable(f"{path}: not a gpt2-attention-bench CSV "
                                   f"(no {', '.join(missing)})")
                for row in reader:
                    try:
                        key = (int(row["head_size"]), int(row["seq_len"]), row["kernel"])
                        for _, column in METRICS:
                            float(row[column])
                    except (TypeError, ValueError):
                        raise Unusable(f"{path}:{reader.line_num}: a row the bench does not "
                                       f"write: {row}") from None
                    points.setdefault(key, []).append(row)
                    devices.add(row["device"])
        except OSError as e:
            raise Unusable(f"{path}: {e.strerror}") from e
        except ValueError as e:
            raise Unusable(f"{path}: {e}") from e
    return points, devices


def timed(rows, column):
    """The pass values of a metric that were timed (not NaN)."""
    values = [float(r[column]) for r in rows]
    return [v for v in values if not math.isnan(v)]


def compare(base, new):
    """Markdown table lines, one per point either side has."""
    lines = ["| head size | T | kernel | " + " | ".join(
        f"{name} base | {name} new | {name} new/base" for name, _ in METRICS) + " | bits |",
             "|" + "---|" * (4 + 3 * len(METRICS))]
    for key in sorted(set(base) | set(new)):
        head_size, seq_len, kernel = key
        cells = [str(head_size), str(seq_len), kernel]
        if key not in base or key not in new:
            side = "base" if key not in base else "new"
            cells += ["-"] * (3 * len(METRICS)) + [f"missing in {side}"]
            lines.append("| " + " | ".join(cells) + " |")
            continue
        for _, column in METRICS:
            b, n = timed(base[key], column), timed(new[key], column)
            cells.append("/".join(f"{v:.1f}" for v in b) or "-")
            cells.append("/".join(f"{v:.1f}" for v in n) or "-")
            cells.append(f"{statistics.median(n) / statistics.median(b):.3f}" if b and n else "-")
        cells.append(bits(base[key], new[key]))
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def bits(base_rows, new_rows):
    """Whether the two builds' results agree bit for bit at one point: "same bits" when every
    pass of both has one out digest and one dqkv digest; else per tensor, "same", "varies in
    base" (the base build's own passes disagree: a kernel that accumulates atomically, such as
    the racing backward, whose bits say nothing about the change) or "differ"."""
    states = []
    for column in ("out_digest", "dqkv_digest"):
        if len({r[column] for r in base_rows + new_rows}) == 1:
            states.append("same")
        elif len({r[column] for r in base_rows}) > 1:
            states.append("varies in base")
        else:
            states.append("differ")
    if states == ["same", "same"]:
        return "same bits"
    return f"out {states[0]}, dqkv {states[1]}"


def main(argv):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--base", nargs="+", required=True, help="the base build's pass CSVs")
    parser.add_argument("--new", nargs="+", required=True, help="the new build's pass CSVs")
    parser.add_argument("--markdown", help="also write the table here")
    try:
        args = parser.parse_args(argv)
    except SystemExit as e:
        return 2 if e.code else 0
    try:
        base, base_devices = read_passes(args.base)
        new, new_devices = read_passes(args.new)
    except Unusable as e:
        print(f"attention_ab_summary: {e}", file=sys.stderr)
        return 2
    devices = base_devices | new_devices
    if len(devices) > 1:
        print("attention_ab_summary: the passes ran on different devices ("
              + ", ".join(sorted(devices)) + "); they do not compare", file=sys.stderr)
        return 2
    device = next(iter(devices), "no device")
    lines = [f"gpt2-attention-bench, {device}: base {len(args.base)} pass(es), new "
             f"{len(args.new)}; TFLOP/s of each pass, new/base of the medians", ""]
    lines += compare(base, new)
    print("\n".join(lines))
    if args.markdown:
        with open(args.markdown, "w") as f:
            f.write("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
