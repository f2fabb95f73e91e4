"""Test hosts on one machine: network namespaces joined by a bridge, with faults on demand.

    with Hosts(2) as hosts:                    # host0 10.213.0.1, host1 10.213.0.2
        p = hosts.popen(1, ["torchrun", ...])  # runs inside host1
        hosts.cut(1)                           # host1's link loses every packet, no reset
        hosts.restore(1)
        hosts.kill(0)                          # SIGKILL to every process of host0

Each host is a network namespace `tp<pid>h<k>` with loopback and one interface, `eth0`, whose
address is 10.213.0.<k+1>/24; its other end sits on a bridge in a namespace of its own
(`tp<pid>sw`, the switch), so that the machine's own network namespace is never touched: traffic
flows only between the hosts and on each host's loopback. Each host also has its own host name
(`host<k>`, a UTS namespace), and `ip netns exec` gives it an /etc/hosts naming every host (from
/etc/netns/<namespace>/hosts), so that programs that find their address from the host name (as
torchrun 1.13's agent does) find the host's own.

Everything made is removed on exit, also when the test fails or is interrupted: the processes
left in a host are killed, the namespaces deleted (which deletes their interfaces) and the
/etc/netns entries removed. Namespaces left by a test that was itself killed (SIGKILL) are
removed by the next Hosts() once their owner's process is gone.

Needs root (CAP_NET_ADMIN and CAP_SYS_ADMIN): `unavailable()` says why not, for a skip.
"""

import os
import re
import shutil
import signal
import subprocess
import sys
import time

SUBNET = "10.213.0"
NETNS_ETC = "/etc/netns"
_NAME = re.compile(r"^tp(\d+)(sw|h\d+)$")


def _ip(*args, check=True):
    return subprocess.run(["ip", *args], check=check, capture_output=True, text=True)


def unavailable():
    """Why hosts cannot be made here (a sentence), or None when they can."""
    if os.geteuid() != 0:
        return "network namespaces need root (CAP_NET_ADMIN); run as root"
    for tool in ("ip", "tc", "unshare"):
        if shutil.which(tool) is None:
            return f"`{tool}` is missing (Debian: apt-get install iproute2 util-linux)"
    probe = f"tp{os.getpid()}probe"
    made = _ip("netns", "add", probe, check=False)
    if made.returncode != 0:
        return f"`ip netns add` failed: {made.stderr.strip()}"
    _ip("netns", "del", probe, check=False)
    return None


def _namespaces():
    listed = _ip("netns", "list", check=False).stdout.split("\n")
    return [line.split()[0] for line in listed if line.strip()]


def _kill_all(namespace):
    pids = _ip("netns", "pids", namespace, check=False).stdout.split()
    for pid in pids:
        try:
            os.kill(int(pid), signal.SIGKILL)
        except (ProcessLookupError, ValueError):
            pass
    return len(pids)


def _remove(namespace):
    # Killed processes leave the namespace once reaped; deleting it meanwhile is fine (the kernel
    # frees it when the last one exits).
    _kill_all(namespace)
    _ip("netns", "del", namespace, check=False)
    shutil.rmtree(os.path.join(NETNS_ETC, namespace), ignore_errors=True)


def remove_stale():
    """Removes the namespaces of earlier runs whose process is gone; returns their names."""
    removed = []
    for namespace in _namespaces():
        m = _NAME.match(namespace)
        if m and not os.path.exists(f"/proc/{m.group(1)}"):
            _remove(namespace)
            removed.append(namespace)
    return removed


class Hosts:
    """`count` test hosts on one bridge (see the top of this file)."""

    def __init__(self, count):
        if not 1 <= count <= 9:
            raise ValueError(f"Hosts: {count} hosts; 1 to 9")
        self.count = count
        self.prefix = f"tp{os.getpid()}"
        self.switch = f"{self.prefix}sw"
        self.namespaces = [f"{self.prefix}h{k}" for k in range(count)]
        self._made = []

    def address(self, host):
        return f"{SUBNET}.{host + 1}"

    def name(self, host):
        return f"host{host}"

    def __enter__(self):
        # A SIGTERM (ctest's or a user's) unwinds through __exit__ instead of leaving the hosts.
        if signal.getsignal(signal.SIGTERM) == signal.SIG_DFL:
            signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
        remove_stale()
        try:
            self._make()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc):
        self.close()
        return False

    def _make(self):
        _ip("netns", "add", self.switch)
        self._made.append(self.switch)
        _ip("-n", self.switch, "link", "add", "br0", "type", "bridge")
        _ip("-n", self.switch, "link", "set", "br0", "up")
        hosts_file = "127.0.0.1 localhost\n" + "".join(
            f"{self.address(k)} {self.name(k)}\n" for k in range(self.count))
        for k, ns in enumerate(self.namespaces):
            _ip("netns", "add", ns)
            self._made.append(ns)
            os.makedirs(os.path.join(NETNS_ETC, ns), exist_ok=True)
            with open(os.path.join(NETNS_ETC, ns, "hosts"), "w", encoding="utf-8") as f:
                f.write(hosts_file)
            _ip("-n", ns, "link", "set", "lo", "up")
            _ip("-n", self.switch, "link", "add", f"p{k}", "type", "veth", "peer", "name", "eth0",
                "netns", ns)
            _ip("-n", self.switch, "link", "set", f"p{k}", "master", "br0", "up")
            _ip("-n", ns, "addr", "add", f"{self.address(k)}/24", "dev", "eth0")
            _ip("-n", ns, "link", "set", "eth0", "up")

    def close(self):
        for ns in reversed(self._made):
            _remove(ns)
        self._made = []

    def command(self, host, argv):
        """`argv` as run inside `host`: its network, its host name."""
        return ["ip", "netns", "exec", self.namespaces[host], "unshare", "--uts", "sh", "-c",
                f'hostname {self.name(host)} && exec "$@"', "sh", *argv]

    def popen(self, host, argv, **kwargs):
        """subprocess.Popen of `argv` inside `host`, in a session of its own."""
        kwargs.setdefault("start_new_session", True)
        return subprocess.Popen(self.command(host, argv), **kwargs)

    def run(self, host, argv, **kwargs):
        return subprocess.run(self.command(host, argv), **kwargs)

    def pids(self, host):
        return [int(p) for p in _ip("netns", "pids", self.namespaces[host]).stdout.split()]

    def kill(self, host):
        """SIGKILL to every process of `host` (its agent and its workers at once, as a power loss
        would end them); returns how many there were."""
        return _kill_all(self.namespaces[host])

    def kill_all(self):
        """SIGKILL to every process of every host."""
        return sum(_kill_all(ns) for ns in self.namespaces)

    def cut(self, host):
        """Every packet to and from `host` lost from now on, with no reset and no error: its port
        leaves the bridge (a cable pulled at the switch). The host's own interface stays up, as
        the far end of a dead link looks from a host. (This kernel has no netem qdisc: `loss
        100%` is not available.)"""
        _ip("-n", self.switch, "link", "set", f"p{host}", "nomaster")

    def restore(self, host):
        """`host`'s link as made: on the bridge, no rate limit."""
        _ip("-n", self.switch, "link", "set", f"p{host}", "master", "br0")
        for ns, dev in ((self.namespaces[host], "eth0"), (self.switch, f"p{host}")):
            _ip("netns", "exec", ns, "tc", "qdisc", "del", "dev", dev, "root", check=False)

    def shape(self, host, rate_mbit, latency_ms=50):
        """`host`'s link limited to `rate_mbit` each way by a token bucket (tc tbf) that queues up
        to `latency_ms` of traffic: what a slow or shared link does to a burst of gradients."""
        self.restore(host)
        for ns, dev in ((self.namespaces[host], "eth0"), (self.switch, f"p{host}")):
            out = _ip("netns", "exec", ns, "tc", "qdisc", "add", "dev", dev, "root", "tbf", "rate",
                      f"{rate_mbit}mbit", "burst", "32kbit", "latency", f"{latency_ms}ms",
                      check=False)
            if out.returncode != 0:
                raise RuntimeError(f"tc tbf on {dev} of host{host}: {out.stderr.strip()}")


def wait_for(predicate, timeout, interval=0.1):
    """Polls `predicate` until it returns something true (returned) or `timeout` s pass (None)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    return None
