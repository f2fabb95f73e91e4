#!/usr/bin/env python3
"""torchrun, with a bound on how long a host waits for the others after its workers end.

    python3 scripts/trainpack_torchrun.py [--exit-barrier-timeout SECONDS] [--agent-grace SECONDS]
        <torchrun arguments>

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
times out there still reports its own workers' result (success stays success).

It also ends an agent that its rendezvous store leaves blocked. When the link to the store's host
is cut silently (no reset), torchrun's keep-alive thread waits in a store operation that has no
timeout, until TCP gives up (about 15 minutes), and the agent's loop waits behind it. So a
watchdog thread: once every worker of this host has ended, an agent that has not looked at its
workers again (or, after its exit barrier, has not exited) within --agent-grace seconds (default
30; TRAINPACK_AGENT_GRACE) is ended with status 1 and a line saying why. While workers run, and
while torchrun restarts them (a new rendezvous, bounded by torchrun's own join timeout), the
watchdog does nothing.

And it lets a host join a running job (`--nnodes MIN:MAX`, a scale-up). Since PyTorch 2.4 the
agents share the rendezvous' TCP store with the workers, and an agent whose first rendezvous is a
later round (the joining host) waits for rank 0 to publish that store's address, which rank 0
publishes only in its own first round: the joining host waits out the 60 s store timeout and the
whole group fails to restart. The wrapper sets TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1 (torchrun's
own switch; unless the environment sets it), so that every round publishes the address and rank
0's worker serves the workers' store, as PyTorch 1.13 always did. Every other argument is
torchrun's, unchanged.
"""

import os
import sys
import threading
import time

DEFAULT_TIMEOUT = 10.0
DEFAULT_GRACE = 30.0


def _seconds(name, text):
    try:
        seconds = float(text)
    except ValueError:
        sys.exit(f"trainpack_torchrun.py: {name} must be a number of seconds, got {text!r}")
    if not seconds > 0:
        sys.exit(f"trainpack_torchrun.py: {name} must be above 0 s, got {seconds}")
    return seconds


def _parse(argv):
    """(exit barrier timeout, agent grace, torchrun's arguments) from our command line: our
    flags come first."""
    values = {"--exit-barrier-timeout": os.environ.get("TRAINPACK_EXIT_BARRIER_TIMEOUT",
                                                       str(DEFAULT_TIMEOUT)),
              "--agent-grace": os.environ.get("TRAINPACK_AGENT_GRACE", str(DEFAULT_GRACE))}
    rest = list(argv)
    while rest and rest[0].split("=", 1)[0] in values:
        flag = rest.pop(0)
        name = flag.split("=", 1)[0]
        if "=" in flag:
            values[name] = flag.split("=", 1)[1]
        elif rest:
            values[name] = rest.pop(0)
        else:
            sys.exit(f"trainpack_torchrun.py: {name} needs a number of seconds")
    return (_seconds("--exit-barrier-timeout", values["--exit-barrier-timeout"]),
            _seconds("--agent-grace", values["--agent-grace"]), rest)


class _Watchdog:
    """Ends an agent left blocked after its workers ended (see the top of this file)."""

    def __init__(self, grace, exit_barrier):
        self.grace = grace
        self.exit_barrier = exit_barrier
        self.lock = threading.Lock()
        self.agent = None
        self.last_look = time.monotonic()  # the agent's last look at its workers
        self.final_since = None  # when the agent entered its exit barrier
        self.restarting = False  # torchrun is starting the workers again (a new rendezvous)
        self.state = None

    def restart(self):
        with self.lock:
            self.restarting = True

    def looked(self, agent, state):
        with self.lock:
            self.agent = agent
            self.last_look = time.monotonic()
            self.restarting = False
            self.state = state

    def final(self, agent):
        with self.lock:
            self.agent = agent
            self.final_since = time.monotonic()
            self.state = getattr(getattr(agent, "_worker_group", None), "state", None)

    def _workers_ended(self):
        context = getattr(self.agent, "_pcontext", None)
        if context is None:
            return False
        try:
            pids = list(context.pids().values())
        except Exception:
            return False
        for pid in pids:
            try:
                with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as f:
                    if f.read().rsplit(")", 1)[1].split()[0] != "Z":
                        return False
            except OSError:
                continue  # gone
        return True

    def run(self):
        while True:
            time.sleep(1)
            with self.lock:
                now = time.monotonic()
                if self.final_since is not None:
                    blocked = now - self.final_since > self.grace + self.exit_barrier
                    where = "in its exit barrier or while closing the rendezvous"
                else:
                    blocked = (self.agent is not None and not self.restarting and
                               now - self.last_look > self.grace and self._workers_ended())
                    where = "on the rendezvous store"
                if not blocked:
                    continue
                state = getattr(self.state, "name", str(self.state))
            print(f"trainpack_torchrun.py: every worker of this host has ended ({state}), but "
                  f"torchrun's agent has been blocked {where} for more than {self.grace:.0f} s "
                  "(its host is unreachable, or the link to it is cut); ending the agent with "
                  "status 1", file=sys.stderr, flush=True)
            os._exit(0 if state == "SUCCEEDED" else 1)


def main():
    seconds, grace, args = _parse(sys.argv[1:])
    os.environ.setdefault("TORCH_DISABLE_SHARE_RDZV_TCP_STORE", "1")
    try:
        from torch.distributed.elastic.agent.server import api
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

    # The watchdog sees the agent look at its workers and enter its exit barrier.
    watchdog = _Watchdog(grace, seconds)
    simple = api.SimpleElasticAgent
    if all(hasattr(simple, name) for name in ("_monitor_workers", "_exit_barrier",
                                               "_restart_workers")):
        monitor, barrier = agent._monitor_workers, simple._exit_barrier
        restart = simple._restart_workers

        def restart_workers(self, *a, **kw):
            watchdog.restart()
            return restart(self, *a, **kw)

        def monitor_workers(self, *a, **kw):
            result = monitor(self, *a, **kw)
            watchdog.looked(self, getattr(result, "state", None))
            return result

        def exit_barrier(self, *a, **kw):
            watchdog.final(self)
            return barrier(self, *a, **kw)

        agent._monitor_workers = monitor_workers
        simple._exit_barrier = exit_barrier
        simple._restart_workers = restart_workers
        threading.Thread(target=watchdog.run, name="trainpack-watchdog", daemon=True).start()
    sys.argv = ["torchrun"] + args
    sys.exit(run.main())


if __name__ == "__main__":
    main()
