#!/usr/bin/env python3
"""tools/ptx_compare.py on made-up PTX: an entry that differs only in its register and label
numbers, the anonymous namespace's hash, comments and register declarations is identical, one with another instruction differs
(and --show prints its diff), one only in a file is named so; exit 0 when all are identical, 1
otherwise, 2 for a missing file, a file without .entry, or wrong arguments. Exits 0 when every
check holds."""
import os
import shutil
import tempfile

from tool_checks import Checks, repo_path, run_python

TOOL = repo_path("tools", "ptx_compare.py")
checks = Checks("ptx_compare checks")
check = checks.check


def entry(name, body, namespace="1a2b3c"):
    return (f".visible .entry _ZN4gpt23gpu60_GLOBAL__N__{namespace}_1k{name}Ev(\n"
            f"\t.param .u64 p0\n)\n{{\n{body}}}\n")


SAME_BASE = ("\t.reg .b32 \t%r<4>;\n\tmov.u32 \t%r1, %tid.x;\n"
             "$L__BB0_1:\n\tadd.s32 \t%r2, %r1, 1;  // a comment\n\t@%p1 bra \t$L__BB0_1;\n")
SAME_NEW = ("\t.reg .b32 \t%r<9>;\n\tmov.u32 \t%r7, %tid.x;\n\n"
            "$L__BB3_4:\n\tadd.s32 \t%r8, %r7, 1;\n\t@%p2 bra \t$L__BB3_4;\n")
CHANGED_NEW = SAME_NEW.replace("\tadd.s32", "\tshl.b32 \t%r5, %r7, 7;\n\tadd.s32")
# The data flow changes, not only the numbers: the add reads its own result.
FLOW_NEW = SAME_NEW.replace("add.s32 \t%r8, %r7, 1", "add.s32 \t%r8, %r8, 1")

with tempfile.TemporaryDirectory() as tmp:
    def write(name, text):
        path = os.path.join(tmp, name)
        with open(path, "w") as f:
            f.write(text)
        return path

    base = write("base.ptx", "//\n.version 9.0\n" + entry("same", SAME_BASE) +
                 entry("changed", SAME_BASE) + entry("flow", SAME_BASE) + entry("gone", SAME_BASE))
    new = write("new.ptx", ".version 9.0\n" + entry("same", SAME_NEW, "ffff") +
                entry("changed", CHANGED_NEW, "ffff") + entry("flow", FLOW_NEW, "ffff") +
                entry("added", SAME_NEW, "ffff"))
    result = run_python(TOOL, base, new)
    lines = dict(line.split(": ", 1) for line in result.stdout.splitlines() if ": " in line)
    check(result.returncode == 1, f"exit {result.returncode}: {result.stderr}")
    check(len(lines) == 5, f"five entries: {result.stdout}")
    named = {key: next((v for n, v in lines.items() if key in n), None)
             for key in ("same", "changed", "flow", "gone", "added")}
    check(named["same"] == "identical", f"same: {named['same']}")
    check((named["changed"] or "").startswith("differs"), f"changed: {named['changed']}")
    check((named["flow"] or "").startswith("differs"), f"flow: {named['flow']}")
    check(named["gone"] == "only in base", f"gone: {named['gone']}")
    check(named["added"] == "only in new", f"added: {named['added']}")

    result = run_python(TOOL, base, new, "--show", "changed")
    check("+shl.b32" in result.stdout, f"--show prints the diff: {result.stdout}")
    check(result.stdout.count("--- base") == 1, f"the diff of that entry alone: {result.stdout}")

    only_same = write("only_same.ptx", entry("same", SAME_NEW, "ffff"))
    result = run_python(TOOL, write("base_same.ptx", entry("same", SAME_BASE)), only_same)
    check(result.returncode == 0 and "identical" in result.stdout,
          f"all identical: {result.returncode} {result.stdout}")

    result = run_python(TOOL, os.path.join(tmp, "none.ptx"), new)
    check(result.returncode == 2 and "none.ptx" in result.stderr,
          f"missing file: {result.returncode} {result.stderr}")
    result = run_python(TOOL, write("text.ptx", "not ptx\n"), new)
    check(result.returncode == 2 and "no .entry" in result.stderr,
          f"no entry: {result.returncode} {result.stderr}")
    result = run_python(TOOL, base)
    check(result.returncode == 2 and "BASE.ptx NEW.ptx" in result.stderr,
          f"one file: {result.returncode} {result.stderr}")
    result = run_python(TOOL, "--source", "kernels/x.cu")
    check(result.returncode == 2 and "--base-tree" in result.stderr,
          f"--source without a tree: {result.returncode} {result.stderr}")
    result = run_python(TOOL, "--source", "none.cu", "--base-tree", tmp, "--new-tree", tmp)
    check(result.returncode == 2 and "no such file" in result.stderr,
          f"--source missing: {result.returncode} {result.stderr}")

    # --source: both trees' copies compiled by nvcc; a template argument the kernel does not use
    # leaves its PTX as it was, a changed constant does not.
    if shutil.which("nvcc"):
        kernel = ("template <int kUnused> __global__ void scale(float* x) {{\n"
                  "  x[threadIdx.x] *= {factor};\n}}\n"
                  "template __global__ void scale<{unused}>(float*);\n")
        for tree, factor, unused in (("a", "2.f", 1), ("b", "2.f", 1), ("c", "3.f", 1)):
            os.makedirs(os.path.join(tmp, tree))
            write(os.path.join(tree, "k.cu"), kernel.format(factor=factor, unused=unused))
        result = run_python(TOOL, "--source", "k.cu", "--base-tree", os.path.join(tmp, "a"),
                            "--new-tree", os.path.join(tmp, "b"), "--arch", "sm_80")
        check(result.returncode == 0 and "scale<1>: identical" in result.stdout,
              f"--source, the same kernel: {result.returncode} {result.stdout} {result.stderr}")
        result = run_python(TOOL, "--source", "k.cu", "--base-tree", os.path.join(tmp, "a"),
                            "--new-tree", os.path.join(tmp, "c"), "--arch", "sm_80")
        check(result.returncode == 1 and "differs" in result.stdout,
              f"--source, another constant: {result.returncode} {result.stdout} {result.stderr}")
    else:
        print("ptx_compare: --source not checked: no nvcc on PATH")

checks.finish()
