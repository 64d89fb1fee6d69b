#!/usr/bin/env python3
"""SM clock and board power per phase of a GPU run, from an nvidia-smi log and phase marks.

  tools/clock_summary.py CLOCKS.csv PHASES.txt

CLOCKS.csv: `nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw --format=csv,noheader,nounits
-lms 100` (lines `2026/11/26 21:15:01.123, 1980, 350.12`). PHASES.txt: lines `YYYY/MM/DD
HH:MM:SS.fraction NAME start|end` (date '+%Y/%m/%d %H:%M:%S.%N'), each phase a start and an end.
Prints, per phase, the samples inside it and their median, lowest and highest SM clock (MHz) and
median power (W), so that two programs compared at free clocks can be seen to have run at the
same clocks, or not. Lines it cannot read are counted and skipped; a phase without samples says
so. Exit 0, or 2 for a missing file or a bad phase line.
"""
import datetime
import statistics
import sys


def parse_time(text):
    """'2026/11/26 21:15:01.123' or with nanoseconds ('.123456789') -> datetime."""
    date, _, clock = text.strip().partition(" ")
    whole, _, fraction = clock.partition(".")
    micro = int((fraction + "000000")[:6]) if fraction else 0
    stamp = datetime.datetime.strptime(f"{date} {whole}", "%Y/%m/%d %H:%M:%S")
    return stamp.replace(microsecond=micro)


def read_samples(path):
    samples, unreadable = [], 0
    with open(path) as f:
        for line in f:
            fields = [x.strip() for x in line.split(",")]
            try:
                samples.append((parse_time(fields[0]), float(fields[1]), float(fields[2])))
            except (ValueError, IndexError):
                unreadable += 1
    return samples, unreadable


def read_phases(path):
    """[(name, start, end)] in the order the phases started."""
    starts, phases = {}, []
    with open(path) as f:
        for number, line in enumerate(f, 1):
            parts = line.split()
            if not parts:
                continue
            if len(parts) != 4 or parts[3] not in ("start", "end"):
                raise ValueError(f"{path}:{number}: expected 'DATE TIME NAME start|end': {line!r}")
            when, name = parse_time(f"{parts[0]} {parts[1]}"), parts[2]
            if parts[3] == "start":
                starts[name] = when
            elif name in starts:
                phases.append((name, starts.pop(name), when))
            else:
                raise ValueError(f"{path}:{number}: '{name}' ends without a start")
    return sorted(phases, key=lambda p: p[1])


def main(argv):
    if len(argv) != 3:
        print(__doc__.strip().split("\n\n")[1], file=sys.stderr)
        return 2
    try:
        samples, unreadable = read_samples(argv[1])
        phases = read_phases(argv[2])
    except (OSError, ValueError) as e:
        print(f"clock_summary: {e}", file=sys.stderr)
        return 2
    print(f"{'phase':<24} {'samples':>7} {'SM MHz median':>13} {'min':>6} {'max':>6} {'W median':>9}")
    for name, start, end in phases:
        inside = [s for s in samples if start <= s[0] <= end]
        if not inside:
            print(f"{name:<24} {0:>7} (no samples)")
            continue
        clocks = [s[1] for s in inside]
        power = statistics.median(s[2] for s in inside)
        print(f"{name:<24} {len(inside):>7} {statistics.median(clocks):>13.0f} {min(clocks):>6.0f} "
              f"{max(clocks):>6.0f} {power:>9.1f}")
    if unreadable:
        print(f"({unreadable} unreadable lines of {argv[1]} skipped)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
