#!/usr/bin/env python3
"""tools/same_machine_code.py on a throwaway git repository holding one small kernel file:
a comment-only change keeps the machine code (exit 0, "identical"), a changed constant does not
(exit 1, "DIFFERENT"), a kernel renamed by a template parameter matches again under --map, and
bad arguments exit 2 with a message. Needs nvcc (NVCC, or /usr/local/cuda/bin/nvcc) and git;
ctest runs it where CMake found CUDA. Exits 0 when every check holds."""
import os
import subprocess
import sys
import tempfile

TOOL = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
                    "tools", "same_machine_code.py")

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

failures = []


def check(condition, what):
    if not condition:
        failures.append(what)
        print("FAILED:", what)


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

        with open(path, "w") as f:
            f.write("// a new comment\n" + KERNEL % "0.f")
        same = run(["scale.cu"], repo)
        check(same.returncode == 0 and "1 of 1 kernels identical" in same.stdout,
              f"a comment keeps the code: rc {same.returncode}, {same.stdout}{same.stderr}")

        with open(path, "w") as f:
            f.write(KERNEL % "1.f")
        changed = run(["scale.cu", "HEAD"], repo)
        check(changed.returncode == 1 and "DIFFERENT" in changed.stdout,
              f"a constant changes it: rc {changed.returncode}, {changed.stdout}")

        with open(path, "w") as f:
            f.write(RENAMED % "0.f")
        renamed = run(["scale.cu"], repo)
        check(renamed.returncode == 1 and "only in" in renamed.stdout,
              f"a renamed kernel is unmatched: rc {renamed.returncode}, {renamed.stdout}")
        mapped = run(["--map", "ILi1ELb0EE=ILi1EE", "scale.cu"], repo)
        check(mapped.returncode == 0 and "1 of 1 kernels identical" in mapped.stdout,
              f"--map matches it: rc {mapped.returncode}, {mapped.stdout}{mapped.stderr}")

        missing = run(["nope.cu"], repo)
        check(missing.returncode == 2 and "no file" in missing.stderr,
              f"a missing file: rc {missing.returncode}, {missing.stderr}")
        bad_map = run(["--map", "nothing", "scale.cu"], repo)
        check(bad_map.returncode == 2 and "REGEX=REPLACEMENT" in bad_map.stderr,
              f"a --map without '=': rc {bad_map.returncode}, {bad_map.stderr}")
        bad_rev = run(["scale.cu", "no-such-revision"], repo)
        check(bad_rev.returncode == 2 and "no-such-revision" in bad_rev.stderr,
              f"an unknown revision: rc {bad_rev.returncode}, {bad_rev.stderr}")
    print("same_machine_code_test:", "FAILED" if failures else "all checks passed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
