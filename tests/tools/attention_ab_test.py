#!/usr/bin/env python3
"""tools/attention_ab_summary.py on made-up benchmark CSVs, and tools/attention_ab.sh's checks of
its arguments (before it builds anything): every pass's TFLOP/s and new / base of the medians
per point, "same bits" only where the digests agree in every pass, a point one side lacks or a
NaN listed rather than compared, and exit 2 for a missing file, a CSV without the bench's
columns, passes from two devices, no base, an unknown base, --csv given, or PASSES=0.
Exits 0 when every check holds."""
import os
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SUMMARY = os.path.join(ROOT, "tools", "attention_ab_summary.py")
SCRIPT = os.path.join(ROOT, "tools", "attention_ab.sh")
HEADER = ("device,head_size,seq_len,batch,heads,kernel,deterministic,sets,fwd_ms,bwd_ms,"
          "fwdbwd_ms,fwd_tflops,bwd_tflops,fwdbwd_tflops,rel_err_out,rel_err_dqkv,out_digest,"
          "dqkv_digest\n")


def row(head_size, seq_len, kernel, fwd, bwd, fwdbwd, digest, device="GPU A"):
    return (f'"{device}",{head_size},{seq_len},1,12,{kernel},0,3,1,1,1,{fwd},{bwd},{fwdbwd},'
            f"nan,nan,aaaa,{digest}\n")


failures = []


def check(condition, what):
    if not condition:
        failures.append(what)


def run(command):
    return subprocess.run(command, capture_output=True, text=True, cwd=ROOT)


def table(stdout):
    """{(head size, T, kernel): cells} of the summary's table."""
    rows = {}
    for line in stdout.splitlines():
        cells = [c.strip() for c in line.strip("|").split("|")]
        if len(cells) == 13 and cells[0].isdigit():
            rows[(cells[0], cells[1], cells[2])] = cells[3:]
    return rows


with tempfile.TemporaryDirectory() as tmp:
    def write(name, text):
        path = os.path.join(tmp, name)
        with open(path, "w") as f:
            f.write(text)
        return path

    # Each pass's points: (head size, T, kernel, fwd, bwd, f+b TFLOP/s, dqkv digest).
    passes = {
        "base_1": [(64, 1024, "det", 300, 240, 260, "d1"),
                   (64, 1024, "racing", 300, 230, 250, "r1"),
                   (128, 4096, "det", 500, 400, 420, "d2")],
        "base_2": [(64, 1024, "det", 302, 250, 262, "d1"),
                   (64, 1024, "racing", 298, 232, 252, "r2"),
                   (128, 4096, "det", "nan", "nan", "nan", "d2")],
        "new_1": [(64, 1024, "det", 303, 260, 270, "d1"), (64, 1024, "racing", 300, 240, 255, "r3"),
                  (128, 4096, "det", 510, 410, 430, "d9"), (128, 8192, "det", 600, 450, 480, "d3")],
        "new_2": [(64, 1024, "det", 301, 270, 280, "d1"), (64, 1024, "racing", 302, 236, 257, "r4"),
                  (128, 4096, "det", 512, 412, 432, "d9")],
    }
    paths = {name: write(f"{name}.csv", HEADER + "".join(row(*point) for point in points))
             for name, points in passes.items()}
    base = [paths["base_1"], paths["base_2"]]
    new = [paths["new_1"], paths["new_2"]]
    markdown = os.path.join(tmp, "summary.md")
    result = run([sys.executable, SUMMARY, "--base", *base, "--new", *new, "--markdown", markdown])
    check(result.returncode == 0, f"exit {result.returncode}: {result.stderr}")
    rows = table(result.stdout)
    # (head size, T, kernel), the first cell checked (0-8: fwd, bwd, f+b as base, new, ratio;
    # 9: bits), the cells from there.
    expected = [(("64", "1024", "det"), 3, ["240.0/250.0", "260.0/270.0", "1.082"]),
                (("64", "1024", "det"), 9, ["same bits"]),
                (("64", "1024", "racing"), 2, ["1.007"]),
                (("64", "1024", "racing"), 9, ["differ"]),
                (("128", "4096", "det"), 0, ["500.0", "510.0/512.0", "1.022"]),  # NaN left out
                (("128", "4096", "det"), 9, ["differ"]),
                (("128", "8192", "det"), 9, ["missing in base"])]
    for key, first, cells in expected:
        got = rows.get(key, [])
        check(got[first:first + len(cells)] == cells, f"{key} from cell {first}: {got}")
    check("GPU A" in result.stdout.splitlines()[0], f"device named: {result.stdout[:80]}")
    with open(markdown) as f:
        check(f.read().strip() == result.stdout.strip(), "markdown differs from the output")

    other = write("other.csv", HEADER + row(64, 1024, "det", 1, 1, 1, "x", device="GPU B"))
    result = run([sys.executable, SUMMARY, "--base", base[0], "--new", other])
    check(result.returncode == 2 and "different devices" in result.stderr,
          f"two devices: {result.returncode} {result.stderr}")
    result = run([sys.executable, SUMMARY, "--base", os.path.join(tmp, "none.csv"),
                  "--new", new[0]])
    check(result.returncode == 2 and "none.csv" in result.stderr,
          f"missing file: {result.returncode} {result.stderr}")
    alien = write("alien.csv", "a,b\n1,2\n")
    result = run([sys.executable, SUMMARY, "--base", alien, "--new", new[0]])
    check(result.returncode == 2 and "not a gpt2-attention-bench CSV" in result.stderr,
          f"alien CSV: {result.returncode} {result.stderr}")
    result = run([sys.executable, SUMMARY, "--base", base[0]])
    check(result.returncode == 2, f"no --new: {result.returncode}")

    # The script's argument checks, all before any build.
    for args, env, expect in (([], {}, ""), (["no-such-revision-or-dir"], {}, "neither"),
                              ([tmp, "--csv", "x.csv"], {}, "--csv"),
                              ([tmp], {"PASSES": "0"}, "PASSES"),
                              ([tmp], {}, "no CMakeLists.txt")):
        result = subprocess.run(["bash", SCRIPT, *args], capture_output=True, text=True,
                                cwd=ROOT, env={**os.environ, "OUT_DIR": os.path.join(tmp, "out"),
                                               **env})
        check(result.returncode == 2 and expect in result.stderr,
              f"attention_ab.sh {args} {env}: {result.returncode} {result.stderr[-200:]}")
    result = subprocess.run(["bash", SCRIPT, "--help"], capture_output=True, text=True, cwd=ROOT)
    check(result.returncode == 0 and "interleaved" in result.stdout, "--help")

for failure in failures:
    print("FAILED:", failure)
print("attention_ab checks:", "all passed" if not failures else f"{len(failures)} failed")
sys.exit(1 if failures else 0)
