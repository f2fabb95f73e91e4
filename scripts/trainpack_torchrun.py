#!/usr/bin/env python3
"""torchrun, with a bound on how long a host waits for the others after its workers end.

    python3 scripts/trainpack_torchrun.py [--exit-barrier-timeout SECONDS] <torchrun arguments>

Every torchrun agent waits, once its workers have ended (finished or failed), at an "exit
barrier" for the agents of the other hosts: 300 s, a constant that torchrun's command line does
not expose. When a host is lost, its agent never arrives, so every surviving host waits the full
300 s before torchrun exits, long after trainpack's ranks noticed the loss (within
DistributedOptions' heartbeat timeout, 20 s by default) and stopped. This wrapper runs the same
torchrun (the one of the Python that runs it: /usr/bin/python3 is Debian's python3-torch) with
that wait set to --exit-barrier-timeout (default 10 s; the environment variable
TRAINPACK_EXIT_BARRIER_TIMEOUT sets it too).

A short wait loses nothing: trainpack's ranks stop at the same step (they vote at every step
boundary), so healthy hosts reach the barrier within a second of each other, and an agent that
times out there still reports its own workers' result (success stays success). Every other
argument is torchrun's, unchanged.
"""

import os
import sys

DEFAULT_TIMEOUT = 10.0


def _parse(argv):
    """(exit barrier timeout in s, torchrun's arguments) from our command line."""
    timeout = os.environ.get("TRAINPACK_EXIT_BARRIER_TIMEOUT", str(DEFAULT_TIMEOUT))
    rest = list(argv)
    if rest and rest[0].startswith("--exit-barrier-timeout"):
        flag = rest.pop(0)
        if "=" in flag:
            timeout = flag.split("=", 1)[1]
        elif rest:
            timeout = rest.pop(0)
        else:
            sys.exit("trainpack_torchrun.py: --exit-barrier-timeout needs a number of seconds")
    try:
        seconds = float(timeout)
    except ValueError:
        sys.exit(f"trainpack_torchrun.py: the exit barrier timeout must be a number of seconds, "
                 f"got {timeout!r}")
    if not seconds > 0:
        sys.exit(f"trainpack_torchrun.py: the exit barrier timeout must be above 0 s, got {seconds}")
    return seconds, rest


def main():
    seconds, args = _parse(sys.argv[1:])
    try:
        from torch.distributed.elastic.agent.server import local_elastic_agent
        from torch.distributed import run
    except ImportError as e:
        sys.exit(f"trainpack_torchrun.py: PyTorch's torchrun cannot be imported by {sys.executable} "
                 f"({e}); run this script with the Python that has torch (Debian: "
                 "/usr/bin/python3 with python3-torch)")
    agent = local_elastic_agent.LocalElasticAgent
    original = agent.__init__

    # torchrun builds its agent with keyword arguments and leaves exit_barrier_timeout at its
    # default (PyTorch 1.13 to 2.x): set it there.
    def init(self, *a, **kw):
        kw["exit_barrier_timeout"] = seconds
        original(self, *a, **kw)

    agent.__init__ = init
    sys.argv = ["torchrun"] + args
    sys.exit(run.main())


if __name__ == "__main__":
    main()
