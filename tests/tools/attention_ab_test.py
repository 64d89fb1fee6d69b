#!/usr/bin/env python3
"""tools/attention_ab_summary.py on made-up benchmark CSVs, and tools/attention_ab.sh: every
pass's TFLOP/s and new / base of the medians per point, "same bits" only where the digests agree
in every pass, a point one side lacks or a NaN listed rather than compared; exit 2 for a missing
file, a CSV without the bench's columns or with a short row, passes from two devices, no base,
an unknown base, --csv given, or PASSES=0; and the script's whole flow (a revision unpacked,
both trees "built" by a stand-in cmake, passes interleaved in alternating order, the summary)
with a stand-in benchmark. Exits 0 when every check holds."""
import os
import subprocess
import sys
import tempfile

from tool_checks import ROOT, Checks

SUMMARY = os.path.join(ROOT, "tools", "attention_ab_summary.py")
SCRIPT = os.path.join(ROOT, "tools", "attention_ab.sh")
HEADER = ("device,head_size,seq_len,batch,heads,kernel,deterministic,sets,fwd_ms,bwd_ms,"
          "fwdbwd_ms,fwd_tflops,bwd_tflops,fwdbwd_tflops,rel_err_out,rel_err_dqkv,out_digest,"
          "dqkv_digest\n")


def row(head_size, seq_len, kernel, fwd, bwd, fwdbwd, digest, device="GPU A"):
    return (f'"{device}",{head_size},{seq_len},1,12,{kernel},0,3,1,1,1,{fwd},{bwd},{fwdbwd},'
            f"nan,nan,aaaa,{digest}\n")


checks = Checks("attention_ab checks")
check = checks.check


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
                (("64", "1024", "racing"), 9, ["out same, dqkv varies in base"]),
                (("128", "4096", "det"), 0, ["500.0", "510.0/512.0", "1.022"]),  # NaN left out
                (("128", "4096", "det"), 9, ["out same, dqkv differ"]),
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
    short = write("short.csv", HEADER + '"GPU A",64,1024\n')
    result = run([sys.executable, SUMMARY, "--base", short, "--new", new[0]])
    check(result.returncode == 2 and "short.csv:2" in result.stderr,
          f"a short row: {result.returncode} {result.stderr}")
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

    # The whole flow with a stand-in cmake whose "build" is a benchmark that writes one row
    # (head size 64, T 1024) per run, faster when built from the working tree, and logs the
    # runs' order: base from a revision (git archive, into an absolute OUT_DIR), 3 passes.
    fake_bin = os.path.join(tmp, "bin")
    os.makedirs(fake_bin)
    bench = os.path.join(fake_bin, "fake_bench.py")
    write(bench, f"""import os, sys
here = os.path.dirname(sys.argv[1])
with open(os.path.join(here, "source")) as f:
    source = f.read().strip()
bwd = 220 if source == "." else 200  # the working tree is built from "."
mark = os.path.join(source, "variant_bwd")  # a variant's patch adds this file
if source != "." and os.path.isfile(mark):
    with open(mark) as f:
        bwd = int(f.read())
bwd = int(os.environ.get("FAKE_BWD", bwd))  # BASE_ENV / NEW_ENV
csv_path = sys.argv[sys.argv.index("--csv") + 1]
with open(os.path.join(os.path.dirname(csv_path), "order.txt"), "a") as f:
    f.write(here + "\\n")
with open(csv_path, "w") as f:
    f.write({HEADER!r} + '"GPU A",64,1024,16,12,det,1,3,1,1,1,300,%d,250,0,0,aa,bb\\n' % bwd)
""")
    write(os.path.join(fake_bin, "cmake"), f"""#!/usr/bin/env bash
if [ "$1" = "-S" ]; then mkdir -p "$4"; echo "$2" > "$4/source"; exit 0; fi
printf '#!/usr/bin/env bash\\nexec {sys.executable} {bench} "$0" "$@"\\n' \\
  > "$2/gpt2-attention-bench"
chmod +x "$2/gpt2-attention-bench"
""")
    os.chmod(os.path.join(fake_bin, "cmake"), 0o755)
    out_dir = os.path.join(tmp, "flow")
    result = subprocess.run(["bash", SCRIPT, "HEAD", "--seq-lens", "1024"],
                            capture_output=True, text=True, cwd=ROOT,
                            env={**os.environ, "PATH": fake_bin + os.pathsep
                                 + os.environ["PATH"], "OUT_DIR": out_dir, "PASSES": "3"})
    flow = table(result.stdout).get(("64", "1024", "det"), [])
    check(result.returncode == 0, f"flow: exit {result.returncode}: {result.stderr[-300:]}")
    check(flow[3:6] == ["200.0/200.0/200.0", "220.0/220.0/220.0", "1.100"], f"flow: {flow}")
    check(flow[-1:] == ["same bits"], f"flow bits: {flow}")
    with open(os.path.join(out_dir, "order.txt")) as f:
        order = [os.path.basename(line.strip()) for line in f]
    check(order == ["build-new", "build-base", "build-base", "build-new", "build-new",
                    "build-base"], f"flow order: {order}")
    check(os.path.isfile(os.path.join(out_dir, "base-src", "CMakeLists.txt")),
          "flow: the revision unpacked into OUT_DIR/base-src")

    # VARIANTS: a third tree, this one plus a patch, built and run in the same passes (the
    # order reversed in the second) and summarized against base; bad entries exit 2.
    patch = os.path.join(tmp, "faster.diff")
    write(patch, "diff --git a/variant_bwd b/variant_bwd\nnew file mode 100644\n--- /dev/null\n"
                 "+++ b/variant_bwd\n@@ -0,0 +1 @@\n+240\n")
    out_dir = os.path.join(tmp, "variants")
    env = {**os.environ, "PATH": fake_bin + os.pathsep + os.environ["PATH"], "OUT_DIR": out_dir,
           "PASSES": "2"}
    result = subprocess.run(["bash", SCRIPT, "HEAD", "--seq-lens", "1024"], capture_output=True,
                            text=True, cwd=ROOT, env={**env, "VARIANTS": f"fast={patch}"})
    check(result.returncode == 0, f"variants: exit {result.returncode}: {result.stderr[-300:]}")
    new_part, _, fast_part = result.stdout.partition("==== variant fast against base")
    check(table(new_part).get(("64", "1024", "det"), [])[5:6] == ["1.100"],
          f"variants, new: {new_part[-600:]}")
    check(table(fast_part).get(("64", "1024", "det"), [])[5:6] == ["1.200"],
          f"variants, fast: {fast_part[-600:]}")
    check(os.path.isfile(os.path.join(out_dir, "summary_fast.md")), "variants: summary_fast.md")
    with open(os.path.join(out_dir, "order.txt")) as f:
        order = [os.path.basename(line.strip()) for line in f]
    check(order == ["build-new", "build-base", "build-fast", "build-fast", "build-base",
                    "build-new"], f"variants order: {order}")
    for entry, expect in (("base=" + patch, "NAME"), ("v1=" + os.path.join(tmp, "none.diff"),
                                                      "no patch file"), ("v1", "no patch file")):
        result = subprocess.run(["bash", SCRIPT, "HEAD"], capture_output=True, text=True,
                                cwd=ROOT, env={**env, "VARIANTS": entry})
        check(result.returncode == 2 and expect in result.stderr,
              f"VARIANTS={entry}: {result.returncode} {result.stderr[-200:]}")

    # BASE `.`: one build of this tree runs as both sides, base with BASE_ENV and new with
    # NEW_ENV; entries that are not NAME=VALUE exit 2.
    out_dir = os.path.join(tmp, "envs")
    env = {**os.environ, "PATH": fake_bin + os.pathsep + os.environ["PATH"], "OUT_DIR": out_dir,
           "PASSES": "2"}
    result = subprocess.run(["bash", SCRIPT, ".", "--seq-lens", "1024"], capture_output=True,
                            text=True, cwd=ROOT, env={**env, "BASE_ENV": "FAKE_BWD=200",
                                                      "NEW_ENV": "FAKE_BWD=230 OTHER_KNOB=1"})
    check(result.returncode == 0, f"envs: exit {result.returncode}: {result.stderr[-300:]}")
    check(table(result.stdout).get(("64", "1024", "det"), [])[3:6]
          == ["200.0/200.0", "230.0/230.0", "1.150"], f"envs: {result.stdout[-600:]}")
    check(not os.path.exists(os.path.join(out_dir, "build-base")), "envs: base was built apart")
    with open(os.path.join(out_dir, "order.txt")) as f:
        order = [os.path.basename(line.strip()) for line in f]
    check(order == ["build-new"] * 4, f"envs order: {order}")
    for name, entry in (("BASE_ENV", "1X=2"), ("NEW_ENV", "NO_VALUE"), ("NEW_ENV", "A-B=1")):
        result = subprocess.run(["bash", SCRIPT, "."], capture_output=True, text=True, cwd=ROOT,
                                env={**env, name: entry})
        check(result.returncode == 2 and "NAME=VALUE" in result.stderr,
              f"{name}={entry}: {result.returncode} {result.stderr[-200:]}")

checks.finish()
