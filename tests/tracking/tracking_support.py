"""What the tracking tests share: failing with the outputs shown, a free port (both the test
scripts' own, test_report), and running the test again with the Python of
scripts/tracking_venv.sh's venv when the one that started it lacks the servers' packages."""

import os
import signal
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "examples", "fashion_mnist", "chaos"))
from test_report import fail, free_port, read  # noqa: E402,F401  (the tracking tests' names)

SKIP = 77


def stop_server(proc):
    """Ends a server started with start_new_session=True, its children too: SIGTERM to its
    process group, SIGKILL after 20 s. Nothing when `proc` is None or has ended."""
    if proc is None or proc.poll() is not None:
        return
    os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout=20)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


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
