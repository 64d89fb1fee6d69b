#!/usr/bin/env python3
"""Compares the sm_90a machine code of a CUDA file's kernels between two revisions, no GPU needed:
a refactor whose kernels compile to the same bytes behaves and runs exactly as before (ptxas is
deterministic), which no benchmark can show as firmly. Each side's file is compiled to a
cubin with the project's CUDA flags (CMakeLists.txt), next to its own side's headers: the base
revision's tracked files (git archive into a temporary directory), and the working tree of the
git repository holding the file; the kernels are matched by name (the anonymous
namespace's hash aside) and their code (.text), attributes (.nv.info), parameter bank
(.nv.constant0) and static shared memory (.nv.shared) compared byte for byte. Exits 0 when
every kernel is identical, 1 otherwise (listing them).

  tools/same_machine_code.py [--map REGEX=REPLACEMENT] FILE.cu [BASE]
      (BASE: a revision, default HEAD, or a directory holding a source tree, e.g. `before/`
      made with git archive and a patch applied, as tools/attention_ab.sh takes; --map renames
      the working tree's kernels before matching, e.g. a template parameter added with its
      default: --map 'ELb1ELb0E=ELb1E')

A change to a header is compared by giving a .cu file that includes it. (Until 2026-11-26 both
sides took the working tree's headers, so a header's change went unseen.) Example:
tools/same_machine_code.py kernels/gpu/attention_hopper_forward.cu main
"""
import os
import re
import shutil
import struct
import subprocess
import sys
import tempfile

NVCC = os.environ.get("NVCC", "/usr/local/cuda/bin/nvcc")
# CMakeLists.txt's flags for the kernels (Release, sm_90a only).
FLAGS = ["-DGPT2_HAVE_CUBLAS", "-DGPT2_HAVE_CUDA", "-DGPT2_HOPPER_ATTENTION", "-O3", "-DNDEBUG",
         "--generate-code=arch=compute_90a,code=sm_90a", "-Xptxas=--warn-on-spills", "-lineinfo",
         "--expt-relaxed-constexpr", "-std=c++17"]


def elf_sections(data):
    """{name: bytes} of a 64-bit little-endian ELF file's sections."""
    if data[:4] != b"\x7fELF" or data[4] != 2:
        raise ValueError("not a 64-bit ELF file")
    shoff = struct.unpack_from("<Q", data, 0x28)[0]
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", data, 0x3A)
    headers = [struct.unpack_from("<IIQQQQIIQQ", data, shoff + i * shentsize)
               for i in range(shnum)]
    names_offset = headers[shstrndx][4]

    def name(offset):
        start = names_offset + offset
        return data[start:data.index(b"\0", start)].decode()

    return {name(h[0]): data[h[4]:h[4] + h[5]] for h in headers}


# A kernel's sections besides its code: its attributes (launch bounds, parameters, barriers),
# its parameter bank's size and its static shared memory. Debug sections are left out: they
# hold line numbers, which any edit above a kernel moves.
KERNEL_SECTIONS = (".text.", ".nv.info.", ".nv.constant0.", ".nv.shared.")


EIATTR_PARAM_CBANK = 0x0A  # .nv.info record: the parameter bank's section symbol, offset, size


def without_symbol_indices(info):
    """A kernel's .nv.info records with the parameter bank's symbol index zeroed: the index
    counts the file's symbols, so it moves when kernels are added to or removed from the file.
    Records: format byte, attribute byte, then for format 4 a 16-bit size and that many bytes,
    for format 3 a 16-bit value, for formats 1 and 2 two bytes. Unparsed data is kept as is."""
    if info is None:
        return None
    out, i = bytearray(info), 0
    while i + 2 <= len(out):
        fmt, attr = out[i], out[i + 1]
        if fmt == 4:
            if i + 4 > len(out):
                break
            size = struct.unpack_from("<H", out, i + 2)[0]
            if attr == EIATTR_PARAM_CBANK and size >= 4:
                out[i + 4:i + 8] = b"\0\0\0\0"
            i += 4 + size
        elif fmt in (1, 2, 3):
            i += 4
        else:
            break
    return bytes(out)


def kernel_code(cubin_path):
    """{kernel key: (machine code, the rest of its sections)}; the key drops the anonymous
    namespace's per-file hash."""
    with open(cubin_path, "rb") as f:
        sections = elf_sections(f.read())
    kernels = {}
    for name in sections:
        if name.startswith(".text."):
            symbol = name[len(".text."):]
            info = without_symbol_indices(sections.get(".nv.info." + symbol))
            rest = (info,) + tuple(sections.get(prefix + symbol) for prefix in KERNEL_SECTIONS[2:])
            kernels[re.sub(r"_GLOBAL__N__[0-9a-f]+_", "_GLOBAL__N_", symbol)] = (
                sections[name], rest)
    return kernels


def compile_cubin(source_text, root, relative_path, work_dir, tag):
    """Compiles source_text as root/relative_path would be (same include paths) to a cubin."""
    # The same base name on both sides: it is part of the kernels' mangled names.
    os.makedirs(os.path.join(work_dir, tag))
    path = os.path.join(work_dir, tag, os.path.basename(relative_path))
    with open(path, "w", encoding="utf-8") as f:
        f.write(source_text)
    out = os.path.join(work_dir, tag + ".cubin")
    include_dir = os.path.dirname(os.path.join(root, relative_path))
    command = [NVCC, *FLAGS, "-I" + root, "-I" + include_dir, "-cubin", path, "-o", out]
    result = subprocess.run(command, capture_output=True, text=True)
    if result.returncode != 0:
        sys.exit(f"same_machine_code: compiling {tag} failed:\n{result.stderr}")
    return out


def main():
    args = sys.argv[1:]
    renames = []
    while len(args) >= 2 and args[0] == "--map":
        pattern, sep, replacement = args[1].partition("=")
        if not sep:
            print("same_machine_code: --map takes REGEX=REPLACEMENT", file=sys.stderr)
            return 2
        renames.append((re.compile(pattern), replacement))
        args = args[2:]
    if len(args) not in (1, 2) or args[0] in ("-h", "--help"):
        print(__doc__.strip())
        return 2
    source = os.path.abspath(args[0])
    base = args[1] if len(args) == 2 else "HEAD"
    if not os.path.isfile(source):
        print(f"same_machine_code: no file {args[0]}", file=sys.stderr)
        return 2
    toplevel = subprocess.run(["git", "-C", os.path.dirname(source), "rev-parse",
                               "--show-toplevel"], capture_output=True, text=True)
    if toplevel.returncode != 0:
        print(f"same_machine_code: {args[0]} is not in a git repository", file=sys.stderr)
        return 2
    root = toplevel.stdout.strip()
    relative = os.path.relpath(os.path.realpath(source), os.path.realpath(root))
    base_is_tree = os.path.isdir(base)
    if base_is_tree:
        base_file = os.path.join(base, relative)
        if not os.path.isfile(base_file):
            print(f"same_machine_code: the base tree {base} has no {relative}", file=sys.stderr)
            return 2
        with open(base_file, encoding="utf-8") as f:
            base_text = f.read()
    else:
        shown = subprocess.run(["git", "-C", root, "show", f"{base}:{relative}"],
                               capture_output=True, text=True)
        if shown.returncode != 0:
            print(f"same_machine_code: {base}:{relative}: {shown.stderr.strip()}",
                  file=sys.stderr)
            return 2
        base_text = shown.stdout
    with open(source, encoding="utf-8") as f:
        current = f.read()
    work_dir = tempfile.mkdtemp(prefix="same_machine_code_")
    try:
        if base_is_tree:
            base_root = os.path.abspath(base)
        else:
            base_root = os.path.join(work_dir, "base-tree")
            os.makedirs(base_root)
            archive = subprocess.run(["git", "-C", root, "archive", base], capture_output=True)
            unpacked = subprocess.run(["tar", "-x", "-C", base_root], input=archive.stdout,
                                      capture_output=True)
            if archive.returncode != 0 or unpacked.returncode != 0:
                print(f"same_machine_code: unpacking {base}: "
                      f"{(archive.stderr + unpacked.stderr).decode(errors='replace').strip()}",
                      file=sys.stderr)
                return 2
        before = kernel_code(compile_cubin(base_text, base_root, relative, work_dir, "base"))
        after = kernel_code(compile_cubin(current, root, relative, work_dir, "tree"))
        for pattern, replacement in renames:
            after = {pattern.sub(replacement, key): code for key, code in after.items()}
    finally:
        shutil.rmtree(work_dir)
    differing = []
    for key in sorted(set(before) | set(after)):
        if key not in before or key not in after:
            state = "only in " + ("the working tree" if key in after else base)
        elif before[key] == after[key]:
            state = f"identical ({len(after[key][0])} bytes)"
        else:
            state = f"DIFFERENT ({len(before[key][0])} -> {len(after[key][0])} bytes of code)"
        if not state.startswith("identical"):
            differing.append(key)
        print(f"{state}: {key}")
    print(f"{len(before | after) - len(differing)} of {len(before | after)} kernels identical "
          f"to {base}")
    return 1 if differing else 0


if __name__ == "__main__":
    sys.exit(main())
