#!/usr/bin/env python3
"""tools/same_machine_code.py on a throwaway git repository holding one small kernel file:
a comment-only change keeps the machine code (exit 0, "identical"), a changed constant does not
(exit 1, "DIFFERENT"), nor does a changed header the file includes (each side compiles against
its own revision's headers), a kernel renamed by a template parameter matches again under
--map, a directory as the base compiles against its own headers, and bad arguments exit 2 with
a message. Needs nvcc (NVCC, or /usr/local/cuda/bin/nvcc)
and git; ctest runs it where CMake found CUDA. Exits 0 when every check holds."""
import os
import subprocess
import sys
import tempfile

from tool_checks import Checks, repo_path

TOOL = repo_path("tools", "same_machine_code.py")

KERNEL = """// scale: y = a * x
template <int kUnroll>
__global__ void scale(float* y, const float* x, float a, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = a * x[i] + %s;
}
template __global__ void scale<1>(float*, const float*, float, int);
"""

RENAMED = KERNEL.replace("template <int kUnroll>", "template <int kUnroll, bool kExtra = false>")
RENAMED = RENAMED.replace("scale<1>(", "scale<1, false>(")

checks = Checks("same_machine_code_test", echo=True)
check = checks.check


def run(args, cwd):
    return subprocess.run([sys.executable, TOOL, *args], cwd=cwd, capture_output=True, text=True)


def git(repo, *args):
    subprocess.run(["git", "-C", repo, *args], check=True, capture_output=True)


def main():
    with tempfile.TemporaryDirectory() as repo:
        git(repo, "init", "-q")
        git(repo, "config", "user.email", "test@example.com")
        git(repo, "config", "user.name", "test")
        path = os.path.join(repo, "scale.cu")
        with open(path, "w") as f:
            f.write(KERNEL % "0.f")
        git(repo, "add", "scale.cu")
        git(repo, "commit", "-q", "-m", "scale")

        def expect(source, args, returncode, needle, what):
            """Writes source (None: leaves the file) and runs the tool: rc and needle expected."""
            if source is not None:
                with open(path, "w") as f:
                    f.write(source)
            result = run(args, repo)
            output = result.stdout + result.stderr
            check(result.returncode == returncode and needle in output,
                  f"{what}: rc {result.returncode}, {output}")

        identical = "1 of 1 kernels identical"
        expect("// a new comment\n" + KERNEL % "0.f", ["scale.cu"], 0, identical,
               "a comment keeps the code")
        expect(KERNEL % "1.f", ["scale.cu", "HEAD"], 1, "DIFFERENT", "a constant changes it")
        expect(RENAMED % "0.f", ["scale.cu"], 1, "only in", "a renamed kernel is unmatched")
        expect(None, ["--map", "ILi1ELb0EE=ILi1EE", "scale.cu"], 0, identical,
               "--map matches it")
        expect(None, ["nope.cu"], 2, "no file", "a missing file")
        expect(None, ["--map", "nothing", "scale.cu"], 2, "REGEX=REPLACEMENT",
               "a --map without '='")
        expect(None, ["scale.cu", "no-such-revision"], 2, "no-such-revision",
               "an unknown revision")

        # A header's change counts: each side compiles against its own revision's headers.
        header = os.path.join(repo, "offset.h")
        shifted = os.path.join(repo, "shifted.cu")
        with open(header, "w") as f:
            f.write("constexpr float kOffset = 0.f;\n")
        with open(shifted, "w") as f:
            f.write('#include "offset.h"\n' + (KERNEL % "kOffset").replace("scale", "shifted"))
        git(repo, "add", "offset.h", "shifted.cu")
        git(repo, "commit", "-q", "-m", "shifted")
        with open(header, "w") as f:
            f.write("constexpr float kOffset = 2.f;\n")
        result = run(["shifted.cu"], repo)
        check(result.returncode == 1 and "DIFFERENT" in result.stdout,
              f"a header's change: rc {result.returncode}, {result.stdout}{result.stderr}")

        # A directory as the base: its own copy of the file and headers.
        with tempfile.TemporaryDirectory() as tree:
            with open(os.path.join(tree, "offset.h"), "w") as f:
                f.write("constexpr float kOffset = 2.f;\n")
            with open(shifted) as f, open(os.path.join(tree, "shifted.cu"), "w") as g:
                g.write(f.read())
            result = run(["shifted.cu", tree], repo)
            check(result.returncode == 0 and "1 of 1 kernels identical" in result.stdout,
                  f"a tree with the same header: rc {result.returncode}, {result.stdout}"
                  f"{result.stderr}")
            with open(os.path.join(tree, "offset.h"), "w") as f:
                f.write("constexpr float kOffset = 0.f;\n")
            result = run(["shifted.cu", tree], repo)
            check(result.returncode == 1 and "DIFFERENT" in result.stdout,
                  f"a tree with its own header: rc {result.returncode}, {result.stdout}"
                  f"{result.stderr}")
            result = run(["scale.cu", tree], repo)
            check(result.returncode == 2 and "has no scale.cu" in result.stderr,
                  f"a tree without the file: rc {result.returncode}, {result.stderr}")
    return checks.status()


if __name__ == "__main__":
    sys.exit(main())
