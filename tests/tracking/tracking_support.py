"""What the tracking tests share: failing with the outputs shown, a free port, and running the
test again with the Python of scripts/tracking_venv.sh's venv when the one that started it lacks
the servers' packages."""

import os
import socket
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SKIP = 77


def fail(name, message, *outputs):
    """Prints the tail of each output file, then `name: FAILED: message`; exits 1."""
    for path in outputs:
        print(f"---- {path}")
        try:
            with open(path, encoding="utf-8", errors="replace") as f:
                print(f.read()[-20000:])
        except OSError as e:
            print(f"(unreadable: {e})")
    print(f"{name}: FAILED: {message}", file=sys.stderr)
    sys.exit(1)


def read(path):
    with open(path, encoding="utf-8", errors="replace") as f:
        return f.read()


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def use_venv(what):
    """Runs this program again with the venv's Python; exits 77 saying how to make the venv when
    there is none. Call it when importing `what` failed."""
    found = subprocess.run(["bash", os.path.join(ROOT, "scripts", "tracking_venv.sh"), "--python"],
                           capture_output=True, text=True)
    venv_python = found.stdout.strip()
    if found.returncode == 0 and venv_python and venv_python != sys.executable:
        os.execv(venv_python, [venv_python] + sys.argv)
    print(f"SKIPPED: {what} is not installed for {sys.executable} and there is no venv: make it "
          "with `bash scripts/tracking_venv.sh` (scripts/setup.sh --test does)")
    sys.exit(SKIP)
