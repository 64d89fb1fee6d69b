"""What the tool tests (tests/tools/*_test.py, each run as a script by ctest) share: the
repository's root, a tool run by path, and checks that collect failures and end the script
with its exit status (0 when every check held)."""
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def repo_path(*parts):
    """A path inside the repository: repo_path("tools", "clock_summary.py")."""
    return os.path.join(ROOT, *parts)


def run_python(script, *args, cwd=None):
    """script run by this Python with args; stdout and stderr captured as text."""
    return subprocess.run([sys.executable, script, *args], capture_output=True, text=True,
                          cwd=cwd)


class Checks:
    """check() collects what failed; finish() prints it and exits the script."""

    def __init__(self, name, echo=False):
        self.name = name
        self.echo = echo  # print a failure when it happens, not only at the end
        self.failures = []

    def check(self, condition, what):
        if not condition:
            self.failures.append(what)
            if self.echo:
                print("FAILED:", what)
        return bool(condition)

    def status(self):
        """Prints the failures and the verdict; 1 if any check failed, else 0."""
        if not self.echo:
            for failure in self.failures:
                print("FAILED:", failure)
        print(f"{self.name}:", f"{len(self.failures)} FAILED" if self.failures else "passed")
        return 1 if self.failures else 0

    def finish(self):
        sys.exit(self.status())
