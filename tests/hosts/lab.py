"""Hosts on one machine: network namespaces on one switch, each host with its own IPC and
mount namespaces and its own /dev/shm (so a pool and a Sender of its own), and the faults the
kernel makes between them: iptables in a namespace, and netem's impairments on its link.

Rules:
- Needs root, ``ip`` (iproute2), ``iptables``, ``unshare``, ``ss`` and /dev/net/tun. Where
  any is missing, ``NetLab`` raises ``LabUnavailable``, which a test lets fail: it never
  passes silently.
- The switch is netem.py's process: each namespace's link is a TAP device whose other end
  is that process, so every frame between namespaces crosses it, and ``impair`` makes its
  delay, jitter, loss, duplication, reordering and corruption (this kernel has no
  ``sch_netem``; the switch is netem's stand-in, at the same place on the link).
- Every name (namespaces, TAP devices) carries the lab's id; ``close`` removes all of
  them, and the processes spawned into them, whatever happened.
- The root namespace has the lab's first address on a port of the switch, so the test
  process (the checker's consumer, the broker's control port) reaches every node.
- A host (``boot``) has IPC and mount namespaces of its own, with a fresh tmpfs on /dev/shm,
  and optionally a time namespace, held by an idle process; ``spawn`` enters them with
  ``nsenter``, so a host's processes share its pools and semaphores, and no other host's.
- iptables faults are rules in a node's own namespace, each added with ``-I`` and removed
  with ``-D`` by the same arguments (``Rule``), so healing one leaves the others.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import select
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

TOOLS = ("ip", "iptables", "unshare", "nsenter", "ss")
SWITCH_ANSWER_S = 30  # the switch answers a command at once; a silence this long is a fault
PRIVATE_SHM = 'mount -t tmpfs -o size=512m,mode=1777 tmpfs /dev/shm && exec "$@"'


def command_of(pid: int) -> list[str]:
    """A process's command line ([] once it is gone)."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return [part.decode() for part in f.read().split(b"\0") if part]
    except OSError:
        return []


class LabUnavailable(RuntimeError):
    """The machine cannot make the lab (not root, or a tool missing)."""


@dataclass(frozen=True)
class Node:
    name: str
    namespace: str
    address: str


@dataclass(frozen=True)
class Rule:
    """One iptables rule in a node's namespace (its chain and match)."""

    node: Node
    chain: str
    match: tuple[str, ...]


def _run(*argv: str) -> str:
    done = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)}: {done.stderr.strip()}")
    return done.stdout


class NetLab:
    def __init__(self, subnet: int | None = None) -> None:
        if os.geteuid() != 0:
            raise LabUnavailable("the hosts lab needs root (network and mount namespaces)")
        missing = [tool for tool in TOOLS if shutil.which(tool) is None]
        if missing:
            raise LabUnavailable(f"the hosts lab needs {', '.join(missing)} "
                                 "(apt-get install iproute2 iptables)")  # fmt: skip
        if not os.path.exists("/dev/net/tun"):
            raise LabUnavailable("the hosts lab needs /dev/net/tun (the switch's links)")
        self.id = secrets.token_hex(2)
        self.subnet = subnet if subnet is not None else 200 + secrets.randbelow(50)
        self.nodes: dict[str, Node] = {}
        self.processes: list[subprocess.Popen[bytes]] = []
        self.rules: list[Rule] = []
        self.links: dict[str, str] = {}  # node name → its TAP device
        self.holders: dict[str, int] = {}  # host name → the process holding its namespaces
        self.clock_offsets: dict[str, int] = {}
        self._switch_lock = threading.Lock()
        self.switch = subprocess.Popen([sys.executable, "-m", "tests.hosts.netem"],
                                       stdin=subprocess.PIPE, stdout=subprocess.PIPE)  # fmt: skip
        self.root_link = f"shk{self.id}r"
        self._switch("add", name=self.root_link)
        _run("ip", "addr", "add", f"{self.address(1)}/24", "dev", self.root_link)
        _run("ip", "link", "set", self.root_link, "up")

    def _switch(self, op: str, **args: Any) -> dict[str, Any]:
        """One command to the switch and its answer. One at a time: the nemesis's thread and
        the run's both ask (a report's counters while a late fault is healed), and two
        commands interleaved would each read the other's answer, or wait for ever."""
        assert self.switch.stdin is not None and self.switch.stdout is not None
        with self._switch_lock:
            self.switch.stdin.write(json.dumps({"op": op, **args}).encode() + b"\n")
            self.switch.stdin.flush()
            ready, _, _ = select.select([self.switch.stdout], [], [], SWITCH_ANSWER_S)
            if not ready:
                raise RuntimeError(f"switch {op}: no answer within {SWITCH_ANSWER_S} s")
            answer: dict[str, Any] = json.loads(self.switch.stdout.readline() or b"null")
        if not answer or not answer.get("ok"):
            raise RuntimeError(f"switch {op} {args}: {answer}")
        return answer

    def address(self, index: int) -> str:
        return f"10.{self.subnet}.{int(self.id[:2], 16)}.{index}"

    def add_node(self, name: str) -> Node:
        """A namespace on the switch with the next address."""
        node = Node(name, f"shk{self.id}-{name}", self.address(len(self.nodes) + 2))
        link = f"shk{self.id}{len(self.nodes)}"
        _run("ip", "netns", "add", node.namespace)
        self.nodes[name] = node
        self._switch("add", name=link)
        self.links[name] = link
        _run("ip", "link", "set", link, "netns", node.namespace)
        inside = ("ip", "netns", "exec", node.namespace)
        _run(*inside, "ip", "link", "set", "lo", "up")
        _run(*inside, "ip", "addr", "add", f"{node.address}/24", "dev", link)
        _run(*inside, "ip", "link", "set", link, "up")
        return node

    def boot(self, node: Node, clock_offset_s: int = 0) -> None:
        """Make ``node`` a host: IPC and mount namespaces of its own, with a fresh tmpfs on
        /dev/shm, held by one idle process; with ``clock_offset_s``, a time namespace too,
        whose monotonic and boot-time clocks read that much ahead (the kernel sets them only
        as the namespace is made). Everything ``spawn`` starts on the host then shares them."""
        clocks = (["--time", "--monotonic", str(clock_offset_s), "--boottime",
                   str(clock_offset_s)] if clock_offset_s else [])  # fmt: skip
        holder = subprocess.Popen(
            ["ip", "netns", "exec", node.namespace, "unshare", "--ipc", "--mount", *clocks,
             "--propagation", "private", "sh", "-c", PRIVATE_SHM, "sh", "sleep", "infinity"],
            stdin=subprocess.DEVNULL,
        )  # fmt: skip
        self.processes.append(holder)
        for _ in range(200):  # (until its /dev/shm is mounted: then it is sleep)
            if command_of(holder.pid)[:1] == ["sleep"]:
                break
            time.sleep(0.01)
        else:
            raise RuntimeError(f"host {node.name} did not boot")
        self.holders[node.name] = holder.pid
        self.clock_offsets[node.name] = clock_offset_s

    def spawn(self, node: Node, argv: Sequence[str], **popen: Any) -> subprocess.Popen[bytes]:
        """``argv`` on the node: in its network namespace, and in its host's IPC, mount and
        time namespaces once it was booted."""
        holder = self.holders.get(node.name)
        if holder is None:
            command = ["ip", "netns", "exec", node.namespace, *argv]
        else:
            clock = ["--time"] if self.clock_offsets[node.name] else []
            where = popen.pop("cwd", None) or os.getcwd()  # (entering a mount namespace
            # moves to its root: nsenter goes back to the directory given)
            command = ["nsenter", "-t", str(holder), "--net", "--ipc", "--mount", *clock,
                       f"--wd={where}", "--", *argv]  # fmt: skip
        process = subprocess.Popen(command, **popen)
        self.processes.append(process)
        return process

    # ------------------------------------------------------------------ faults

    def add_rule(self, rule: Rule) -> Rule:
        _run("ip", "netns", "exec", rule.node.namespace, "iptables", "-I", rule.chain,
             *rule.match)  # fmt: skip
        self.rules.append(rule)
        return rule

    def remove_rule(self, rule: Rule) -> None:
        _run("ip", "netns", "exec", rule.node.namespace, "iptables", "-D", rule.chain,
             *rule.match)  # fmt: skip
        self.rules.remove(rule)

    def cut(self, node: Node, address: str, port: int | None = None) -> list[Rule]:
        """Packets between ``node`` and ``address`` (one port of it, or all) dropped."""
        out = ("-d", address, *(("-p", "tcp", "--dport", str(port)) if port else ()))
        back = ("-s", address, *(("-p", "tcp", "--sport", str(port)) if port else ()))
        first = self.add_rule(Rule(node, "OUTPUT", (*out, "-j", "DROP")))
        try:
            return [first, self.add_rule(Rule(node, "INPUT", (*back, "-j", "DROP")))]
        except Exception:  # (never half a cut left behind)
            self.remove_rule(first)
            raise

    def lose(self, node: Node, probability: float) -> list[Rule]:
        """Each packet in or out of ``node`` dropped with ``probability``."""
        match = ("-m", "statistic", "--mode", "random", "--probability", f"{probability:.3f}",
                 "-j", "DROP")  # fmt: skip
        return [self.add_rule(Rule(node, chain, match)) for chain in ("INPUT", "OUTPUT")]

    def impair(self, node: Node, **impairment: float) -> None:
        """netem's impairments on ``node``'s link, both ways (delay_ms, jitter_ms, loss,
        duplicate, reorder, corrupt); none clears them."""
        self._switch("set", name=self.links[node.name], **impairment)

    def link_counters(self) -> dict[str, dict[str, int]]:
        """Frames each node's link carried, lost, duplicated, reordered and corrupted."""
        ports = self._switch("counters")["ports"]
        return {name: ports[link] for name, link in self.links.items()}

    def heal(self, rules: Sequence[Rule]) -> None:
        for rule in rules:
            self.remove_rule(rule)

    def connections(self, node: Node, address: str) -> list[int]:
        """The pid holding each TCP connection established from ``node`` to ``address``."""
        out = _run("ip", "netns", "exec", node.namespace, "ss", "-Htnp", "state",
                   "established", "dst", address)  # fmt: skip
        return [int(line.split("pid=", 1)[1].split(",", 1)[0])
                for line in out.splitlines() if "pid=" in line]  # fmt: skip

    def pids(self, node: Node) -> list[int]:
        """Every process in the node's network namespace."""
        out = subprocess.run(["ip", "netns", "pids", node.namespace], capture_output=True,
                             text=True, timeout=30).stdout  # fmt: skip
        return [int(pid) for pid in out.split()]

    def kill_all(self, node: Node) -> None:
        for pid in self.pids(node):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, 9)

    # ------------------------------------------------------------------ teardown

    def close(self) -> None:
        for process in self.processes:
            if process.poll() is None:
                process.kill()
                with contextlib.suppress(subprocess.TimeoutExpired):
                    process.wait(30)
            for pipe in (process.stdin, process.stdout, process.stderr):
                if pipe is not None:
                    pipe.close()
        for node in self.nodes.values():  # (a Sender a worker started is in there too)
            self.kill_all(node)
        if self.switch.stdin is not None:
            self.switch.stdin.close()  # (the switch ends, and its TAP devices with it)
        try:
            self.switch.wait(30)
        except subprocess.TimeoutExpired:
            self.switch.kill()
            self.switch.wait(30)
        if self.switch.stdout is not None:
            self.switch.stdout.close()
        for node in self.nodes.values():
            subprocess.run(["ip", "netns", "del", node.namespace], capture_output=True)

    def __enter__(self) -> NetLab:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()
