#!/usr/bin/env python3
"""tools/clock_summary.py on a made-up nvidia-smi log: samples fall into the phases whose span
holds them (medians, lowest and highest clock, median power), an unreadable line is counted and
skipped, a phase without samples says so, and a missing argument or a bad phase line exits 2.
Exits 0 when every check holds."""
import os
import tempfile

from tool_checks import Checks, repo_path, run_python

TOOL = repo_path("tools", "clock_summary.py")

CLOCKS = """2026/11/26 21:15:01.000, 1980, 300.0
2026/11/26 21:15:01.100, 1900, 500.5
2026/11/26 21:15:01.200, 1755, 690.0
[N/A], x, y
2026/11/26 21:15:02.000, 1980, 650.0
2026/11/26 21:15:02.100, 1980, 640.0
"""
PHASES = """2026/11/26 21:15:01.050000000 ours start
2026/11/26 21:15:01.250000000 ours end
2026/11/26 21:15:01.950000000 pytorch start
2026/11/26 21:15:02.150000000 pytorch end
2026/11/26 21:15:03.000000000 idle start
2026/11/26 21:15:03.500000000 idle end
"""

checks = Checks("clock_summary_test")
check = checks.check


def run(*args):
    return run_python(TOOL, *args)


with tempfile.TemporaryDirectory() as tmp:
    clocks, phases, bad = (os.path.join(tmp, n) for n in ("clocks.csv", "phases.txt", "bad.txt"))
    for path, text in ((clocks, CLOCKS), (phases, PHASES), (bad, "ours begins\n")):
        with open(path, "w") as f:
            f.write(text)
    result = run(clocks, phases)
    rows = {line.split()[0]: line.split() for line in result.stdout.splitlines()[1:] if line}
    check(result.returncode == 0, f"exit {result.returncode}: {result.stderr}")
    check(rows.get("ours") == ["ours", "2", "1828", "1755", "1900", "595.2"], f"ours: {rows}")
    check(rows.get("pytorch") == ["pytorch", "2", "1980", "1980", "1980", "645.0"],
          f"pytorch: {rows}")
    check(rows.get("idle", [])[1:3] == ["0", "(no"], f"idle: {rows}")
    check("1 unreadable lines" in result.stdout, result.stdout)
    check(run(clocks).returncode == 2, "one argument accepted")
    result = run(clocks, bad)
    check(result.returncode == 2 and "bad.txt:1" in result.stderr, f"bad phases: {result}")
    check(run(clocks, os.path.join(tmp, "missing.txt")).returncode == 2, "missing file accepted")

checks.finish()
