"""What the test scripts share to report: failing with the tails of their outputs, reading an
output, and a free port for a server or a rendezvous."""

import socket
import sys

TAIL_CHARS = 20000  # of each output shown on a failure: the end is where the job said why


def fail(name, message, *outputs):
    """Prints the tail of each output file, then `name: FAILED: message` on stderr; exits 1."""
    for path in outputs:
        print(f"---- {path}")
        try:
            with open(path, encoding="utf-8", errors="replace") as f:
                print(f.read()[-TAIL_CHARS:])
        except OSError as e:
            print(f"(unreadable: {e})")
    print(f"{name}: FAILED: {message}", file=sys.stderr)
    sys.exit(1)


def read(path):
    """The whole text of `path` (undecodable bytes replaced)."""
    with open(path, encoding="utf-8", errors="replace") as f:
        return f.read()


def free_port():
    """A TCP port free on 127.0.0.1 now (the kernel's pick for port 0), so that tests running in
    parallel never share one."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
