#!/usr/bin/env python3
"""Whether two builds of a CUDA file emit the same PTX, kernel by kernel.

  tools/ptx_compare.py BASE.ptx NEW.ptx [--show SUBSTRING] [--lines N]
  tools/ptx_compare.py --source kernels/gpu/attention_hopper_forward.cu --base-tree before \\
                       [--new-tree .] [--arch sm_90a] [--show SUBSTRING]

For a change meant to leave some kernels alone (a feature behind a compile-time trait, a
refactor): per kernel entry, "identical" when the two PTX bodies agree once the numbering of
virtual registers and labels and the anonymous namespace's hash are set aside (so the same
instructions on the same data flow: ptxas gets the same program), else "differs" with the count
of changed lines, or "only in base" / "only in new". --show prints the unified diff of the
entries whose name (as printed) holds SUBSTRING (normalized; the first --lines lines, 80). With --source,
both trees' copies of the file are compiled to PTX with nvcc (-std=c++20 -O3, the tree as
include root, --expt-relaxed-constexpr) first. Session twenty-two used it to show that the
early-scores change left every other forward kernel's PTX as main's.

Exit 0 when every entry in both is identical, 1 when one differs or is only in one, 2 for a
missing or unreadable file, a file with no .entry, or a failed compile.
"""
import argparse
import difflib
import os
import re
import shutil
import subprocess
import sys
import tempfile

ENTRY = re.compile(r"(?m)^\s*(?:\.visible\s+|\.weak\s+)?\.entry\s+")
REGISTER = re.compile(r"%(rd|rs|r|fd|f|p|hh|h|b)(\d+)\b")
LABEL = re.compile(r"\$L__\w+")
ANONYMOUS = re.compile(r"_GLOBAL__N__[0-9a-f]+_")


class Unusable(Exception):
    pass


def entries(text, path):
    """{entry name: body} of one PTX file."""
    parts = ENTRY.split(text)
    if len(parts) < 2:
        raise Unusable(f"{path}: no .entry (not PTX, or no kernels)")
    found = {}
    for part in parts[1:]:
        found[part.split("(", 1)[0].strip()] = part
    return found


def by_key(found):
    """{the name without the anonymous namespace's hash, which differs between trees: (name,
    body)}."""
    return {ANONYMOUS.sub("_GLOBAL__N__", name): (name, body) for name, body in found.items()}


def normalized(body):
    """The body's lines with registers and labels renumbered by first use; comments, blank lines
    and the register declarations (counts that follow the numbering) left out."""
    body = ANONYMOUS.sub("_GLOBAL__N__", body)
    numbers = {}

    def register(match):
        kind = numbers.setdefault(match.group(1), {})
        return kind.setdefault(match.group(0), f"%{match.group(1)}#{len(kind)}")

    labels = {}
    body = REGISTER.sub(register, body)
    body = LABEL.sub(lambda m: labels.setdefault(m.group(0), f"$L#{len(labels)}"), body)
    lines = (line.split("//", 1)[0].strip() for line in body.splitlines())
    return [line for line in lines if line and not line.startswith(".reg")]


def readable(name):
    """A mangled entry name demangled by c++filt when it is there, without namespaces and the
    parameter list."""
    if shutil.which("c++filt"):
        name = subprocess.run(["c++filt", name], capture_output=True, text=True).stdout.strip()
        name = re.sub(r"\(anonymous namespace\)::|\w+::", "", name)
        name = re.sub(r"^void ", "", name)
        depth, cut = 0, len(name)
        for i, ch in enumerate(name):  # the parameter list: the first '(' outside <>
            depth += ch == "<"
            depth -= ch == ">"
            if ch == "(" and depth == 0:
                cut = i
                break
        name = name[:cut]
    return name


def read(path):
    try:
        with open(path) as f:
            return entries(f.read(), path)
    except OSError as e:
        raise Unusable(f"{path}: {e.strerror}")


def compile_ptx(tree, source, arch, out_dir, tag):
    path = os.path.join(tree, source)
    if not os.path.isfile(path):
        raise Unusable(f"{path}: no such file")
    out = os.path.join(out_dir, f"{tag}.ptx")
    command = ["nvcc", "-std=c++20", "-O3", f"-arch={arch}", "-I", tree,
               "--expt-relaxed-constexpr", "-ptx", "-o", out, path]
    result = subprocess.run(command, capture_output=True, text=True)
    if result.returncode != 0:
        raise Unusable(f"nvcc failed on {path}:\n{result.stderr[-2000:]}")
    return out


def compare(base, new, show, lines):
    """The report's lines and whether every entry is identical."""
    report, same = [], True
    base, new = by_key(base), by_key(new)
    for key in sorted(set(base) | set(new)):
        name = readable((base.get(key) or new.get(key))[0])
        if key not in new or key not in base:
            verdict = "only in base" if key not in new else "only in new"
            same = False
        else:
            a, b = normalized(base[key][1]), normalized(new[key][1])
            diff = list(difflib.unified_diff(a, b, "base", "new", lineterm="", n=1))
            changed = sum(1 for d in diff[2:] if d[:1] in "+-")
            verdict = "identical" if a == b else f"differs ({changed} lines changed)"
            same = same and a == b
            if show is not None and show in name and a != b:
                verdict += "\n" + "\n".join(diff[:lines])
        report.append(f"{name}: {verdict}")
    return report, same


def main(argv):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("ptx", nargs="*", help="BASE.ptx NEW.ptx (without --source)")
    parser.add_argument("--source", help="a .cu file, relative to both trees")
    parser.add_argument("--base-tree", help="the base tree's root (with --source)")
    parser.add_argument("--new-tree", default=".", help="the new tree's root (default .)")
    parser.add_argument("--arch", default="sm_90a", help="nvcc -arch (default sm_90a)")
    parser.add_argument("--show", help="print the diff of entries whose name holds this")
    parser.add_argument("--lines", type=int, default=80, help="diff lines shown (default 80)")
    try:
        args = parser.parse_args(argv)
    except SystemExit as e:
        return 2 if e.code else 0
    if args.source is None and len(args.ptx) != 2:
        print("ptx_compare: give BASE.ptx NEW.ptx, or --source with --base-tree",
              file=sys.stderr)
        return 2
    if args.source is not None and (args.ptx or args.base_tree is None):
        print("ptx_compare: --source takes --base-tree (and --new-tree), not PTX files",
              file=sys.stderr)
        return 2
    try:
        with tempfile.TemporaryDirectory() as tmp:
            if args.source is not None:
                paths = [compile_ptx(args.base_tree, args.source, args.arch, tmp, "base"),
                         compile_ptx(args.new_tree, args.source, args.arch, tmp, "new")]
            else:
                paths = args.ptx
            base, new = read(paths[0]), read(paths[1])
    except Unusable as e:
        print(f"ptx_compare: {e}", file=sys.stderr)
        return 2
    report, same = compare(base, new, args.show, args.lines)
    print("\n".join(report))
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
