#!/usr/bin/env python3
"""tools/device_call.sh with stand-ins for cmake and nvidia-smi: call_begin sends the call's
files to $OUT/s and packs them into $OUT/s.tgz at exit, whatever the script's end; call_build
reports its time, or the first errors and status 1 when the build fails; without OUT,
call_begin says so and returns 2. Exits 0 when every check holds."""
import os
import subprocess
import tarfile
import tempfile

from tool_checks import ROOT, Checks

checks = Checks("device_call checks")
check = checks.check


def write(path, text):
    with open(path, "w") as f:
        f.write(text)
    os.chmod(path, 0o755)


with tempfile.TemporaryDirectory() as tmp:
    fake_bin = os.path.join(tmp, "bin")
    os.makedirs(fake_bin)
    write(os.path.join(fake_bin, "nvidia-smi"),
          "#!/usr/bin/env bash\necho 'GPU A, 1980 MHz, 700 W'\n")
    # The build fails when a target is named "broken".
    write(os.path.join(fake_bin, "cmake"), """#!/usr/bin/env bash
if [ "$1" = "-S" ]; then exit 0; fi
for arg in "$@"; do
  if [ "$arg" = broken ]; then echo "error: broken.cu:1: no such thing"; exit 2; fi
done
echo "warning: a remark"
""")

    def call(body, out):
        script = f"set -u\nsource tools/device_call.sh\n{body}\n"
        env = {**os.environ, "PATH": fake_bin + os.pathsep + os.environ["PATH"],
               "BUILD_DIR": os.path.join(tmp, "build")}
        if out:
            os.makedirs(out, exist_ok=True)
            env["OUT"] = out
        else:
            env.pop("OUT", None)
        return subprocess.run(["bash", "-c", script], capture_output=True, text=True, cwd=ROOT,
                              env=env)

    def archived(out):
        path = os.path.join(out, "s.tgz")
        if not os.path.isfile(path):
            return []
        with tarfile.open(path) as tar:
            return sorted(tar.getnames())

    out = os.path.join(tmp, "ok")
    result = call('call_begin\ncall_build gpt2-attention-bench || exit 1\necho 1 > "$S/x.txt"',
                  out)
    check(result.returncode == 0, f"a good call: exit {result.returncode}: {result.stderr}")
    check("GPU A" in result.stdout and "build of gpt2-attention-bench:" in result.stdout
          and "warning: a remark" in result.stdout, f"a good call's output: {result.stdout}")
    names = archived(out)
    check(all(n in names for n in ("s/x.txt", "s/gpu.txt", "s/cfg.log", "s/build.log")),
          f"a good call's archive: {names}")
    check(not os.path.exists(os.path.join(out, "s")), "the call's folder is removed once packed")

    out = os.path.join(tmp, "broken")
    result = call("call_begin\ncall_build broken || exit 1\necho unreachable", out)
    check(result.returncode == 1 and "no such thing" in result.stdout
          and "failed" in result.stdout and "unreachable" not in result.stdout,
          f"a failed build: exit {result.returncode}: {result.stdout}")
    check("s/build.log" in archived(out), f"a failed build is still archived: {archived(out)}")

    result = call("call_begin || exit $?", None)
    check(result.returncode == 2 and "OUT is not set" in result.stderr,
          f"without OUT: exit {result.returncode}: {result.stderr}")

checks.finish()
