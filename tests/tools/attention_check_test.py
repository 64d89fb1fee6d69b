#!/usr/bin/env python3
"""tools/attention_check.sh's benchmark flow with stand-ins for cmake, nvidia-smi, the
benchmark and PyTorch's script: one pass runs ours, then PyTorch (each layout and timing); with
two passes the second runs PyTorch first (its backends reversed) and our kernels in reverse
order, every pass gets its comparison tables, and the medians of the passes get theirs;
WARMUP_MS reaches both programs as --warmup-ms, and a bad one exits 2. Exits 0 when every check
holds."""
import os
import subprocess
import sys
import tempfile

from tool_checks import ROOT, Checks

SCRIPT = os.path.join(ROOT, "tools", "attention_check.sh")
OURS_HEADER = ("device,head_size,seq_len,batch,heads,kernel,deterministic,sets,fwd_ms,bwd_ms,"
               "fwdbwd_ms,fwd_tflops,bwd_tflops,fwdbwd_tflops,rel_err_out,rel_err_dqkv,"
               "out_digest,dqkv_digest,fwd_mhz,bwd_mhz,fwdbwd_mhz\n")
TORCH_HEADER = ("device,head_size,seq_len,batch,heads,kernel,layout,timing,fwd_ms,bwd_ms,"
                "fwdbwd_ms,fwd_tflops,bwd_tflops,fwdbwd_tflops\n")

checks = Checks("attention_check checks")
check = checks.check


def write(path, text, executable=False):
    with open(path, "w") as f:
        f.write(text)
    if executable:
        os.chmod(path, 0o755)


with tempfile.TemporaryDirectory() as tmp:
    fake_bin = os.path.join(tmp, "bin")
    os.makedirs(fake_bin)
    order = os.path.join(tmp, "order.txt")
    warmups = os.path.join(tmp, "warmups.txt")  # each timing program's --warmup-ms
    # The benchmark: logs its kernels, writes one row per kernel.
    bench = os.path.join(fake_bin, "fake_bench.py")
    write(bench, f"""import sys
args = sys.argv[1:]
kernels = args[args.index("--kernels") + 1] if "--kernels" in args else "all"
with open({order!r}, "a") as f:
    f.write("ours " + kernels + "\\n")
with open({warmups!r}, "a") as f:
    f.write("ours " + args[args.index("--warmup-ms") + 1] + "\\n")
with open(args[args.index("--csv") + 1], "w") as f:
    f.write({OURS_HEADER!r})
    for k in (kernels.split(",") if kernels != "all" else ["racing"]):
        f.write('"GPU A",64,1024,16,12,%s,0,3,1,1,1,300,250,260,nan,nan,aa,bb,'
                '1980,1980,1980\\n' % k)
""")
    # PyTorch's script: logs each timing run and each comparison, writes its CSV or table.
    torch_script = os.path.join(fake_bin, "fake_pytorch_attention.py")
    write(torch_script, f"""import sys
args = sys.argv[1:]
value = lambda flag: args[args.index(flag) + 1]
with open({order!r}, "a") as f:
    if "--compare" in args:
        f.write("compare " + value("--compare").rsplit("/", 1)[1] + " " +
                value("--ours").rsplit("/", 1)[1] + "\\n")
        with open(value("--markdown"), "w") as md:
            md.write("| table |\\n")
    else:
        f.write("pytorch " + value("--layout") + " " + value("--timing") +
                (" reversed" if "--reverse-backends" in args else "") + "\\n")
        with open({warmups!r}, "a") as w:
            w.write("pytorch " + value("--warmup-ms") + "\\n")
        with open(value("--csv"), "w") as out:
            out.write({TORCH_HEADER!r})
            for k in ("torch-fa2", "torch-cudnn"):
                out.write('"GPU A",64,1024,16,12,%s,%s,%s,1,1,1,200,150,160\\n'
                          % (k, value("--layout"), value("--timing")))
""")
    write(os.path.join(fake_bin, "python3"), f"""#!/usr/bin/env bash
if [ "$1" = bench/pytorch_attention.py ]; then shift; exec {sys.executable} {torch_script} "$@"; fi
exec {sys.executable} "$@"
""", executable=True)
    write(os.path.join(fake_bin, "cmake"), f"""#!/usr/bin/env bash
if [ "$1" = "-S" ]; then mkdir -p "$4"; exit 0; fi
printf '#!/usr/bin/env bash\\nexec {sys.executable} {bench} "$@"\\n' > "$2/gpt2-attention-bench"
chmod +x "$2/gpt2-attention-bench"
""", executable=True)
    write(os.path.join(fake_bin, "nvidia-smi"), "#!/usr/bin/env bash\necho 'GPU A'\n",
          executable=True)

    def run(passes, warmup_ms=None, expect_status=0):
        out_dir = os.path.join(tmp, f"out{passes}")
        for log in (order, warmups):
            if os.path.exists(log):
                os.remove(log)
        env = {**os.environ, "PATH": fake_bin + os.pathsep + os.environ["PATH"],
               "BUILD_DIR": os.path.join(tmp, "build"), "OUT_DIR": out_dir, "SKIP_TESTS": "1",
               "PASSES": str(passes), "KERNELS": "flash-hopper,flash-hopper-det",
               "TORCH_LAYOUTS": "separate", "TORCH_TIMINGS": "kernels,graph",
               "SEQ_LENS": "1024", "HEAD_SIZES": "64"}
        if warmup_ms is not None:
            env["WARMUP_MS"] = warmup_ms
        result = subprocess.run(["bash", SCRIPT], capture_output=True, text=True, cwd=ROOT,
                                env=env)
        check(result.returncode == expect_status,
              f"PASSES={passes} WARMUP_MS={warmup_ms}: exit {result.returncode}: "
              f"{result.stdout[-400:]} {result.stderr[-400:]}")
        if expect_status != 0:
            return result.stderr, []
        with open(order) as f:
            return out_dir, [line.strip() for line in f]

    def warmups_run():
        with open(warmups) as f:
            return [line.strip() for line in f]

    out_dir, runs = run(1)
    check(runs == ["ours flash-hopper,flash-hopper-det", "pytorch separate kernels",
                   "pytorch separate graph",
                   "compare pytorch_attention_separate.csv attention_bench.csv",
                   "compare pytorch_attention_separate_graph.csv attention_bench.csv"],
          f"one pass: {runs}")
    for name in ("attention_vs_pytorch_separate.md", "attention_vs_pytorch_separate_graph.md"):
        check(os.path.isfile(os.path.join(out_dir, name)), f"one pass: {name}")
    check(warmups_run() == ["ours 0", "pytorch 0", "pytorch 0"],
          f"no WARMUP_MS: --warmup-ms 0 everywhere: {warmups_run()}")

    run(1, warmup_ms="750")
    check(warmups_run() == ["ours 750", "pytorch 750", "pytorch 750"],
          f"WARMUP_MS=750 reaches both programs: {warmups_run()}")
    for bad in ("1.5", "-3", "soon"):
        stderr, _ = run(1, warmup_ms=bad, expect_status=2)
        check("WARMUP_MS must be a whole number" in stderr, f"WARMUP_MS={bad}: {stderr}")

    out_dir, runs = run(2)
    check(runs[:5] == ["ours flash-hopper,flash-hopper-det", "pytorch separate kernels",
                       "pytorch separate graph",
                       "compare pytorch_attention_separate_p1.csv attention_bench_p1.csv",
                       "compare pytorch_attention_separate_graph_p1.csv attention_bench_p1.csv"],
          f"pass 1: {runs[:5]}")
    check(runs[5:10] == ["pytorch separate kernels reversed", "pytorch separate graph reversed",
                         "ours flash-hopper-det,flash-hopper",
                         "compare pytorch_attention_separate_p2.csv attention_bench_p2.csv",
                         "compare pytorch_attention_separate_graph_p2.csv "
                         "attention_bench_p2.csv"],
          f"pass 2, PyTorch first and each one's kernels reversed: {runs[5:10]}")
    check(runs[10:] == ["compare pytorch_attention_separate.csv attention_bench.csv",
                        "compare pytorch_attention_separate_graph.csv attention_bench.csv"],
          f"the medians' tables: {runs[10:]}")
    for name in ("attention_bench.csv", "pytorch_attention_separate.csv",
                 "pytorch_attention_separate_graph.csv", "attention_vs_pytorch_separate_p2.md",
                 "attention_vs_pytorch_separate_graph.md"):
        check(os.path.isfile(os.path.join(out_dir, name)), f"two passes: {name}")

checks.finish()
