"""Hosts on one machine: network namespaces on a bridge, each host with its own IPC and mount
namespaces and its own /dev/shm (so a pool and a Sender of its own), and the faults the
kernel makes between them (iptables in the host's namespace).

Rules:
- Needs root, ``ip`` (iproute2), ``iptables`` and ``unshare``. Where any is missing,
  ``NetLab`` raises ``LabUnavailable``, which a test lets fail: it never passes silently.
- Every name (namespaces, bridge, veths) carries the lab's id; ``close`` removes all of
  them, and the processes spawned into them, whatever happened.
- The bridge has the lab's first address in the root namespace, so the test process (the
  checker's consumer, the broker's control port) reaches every node directly.
- A spawned process runs under ``ip netns exec NS unshare --ipc --mount`` with a fresh tmpfs
  on /dev/shm: its pools and semaphores are the host's alone, and go with its last process.
- Faults are iptables rules in a node's own namespace, each added with ``-I`` and removed
  with ``-D`` by the same arguments (``Rule``), so healing one leaves the others.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

TOOLS = ("ip", "iptables", "unshare", "ss")
PRIVATE_SHM = 'mount -t tmpfs -o size=512m,mode=1777 tmpfs /dev/shm && exec "$@"'


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
        self.id = secrets.token_hex(2)
        self.subnet = subnet if subnet is not None else 200 + secrets.randbelow(50)
        self.bridge = f"shk{self.id}br"
        self.nodes: dict[str, Node] = {}
        self.processes: list[subprocess.Popen[bytes]] = []
        self.rules: list[Rule] = []
        _run("ip", "link", "add", self.bridge, "type", "bridge")
        _run("ip", "addr", "add", f"{self.address(1)}/24", "dev", self.bridge)
        _run("ip", "link", "set", self.bridge, "up")

    def address(self, index: int) -> str:
        return f"10.{self.subnet}.{int(self.id[:2], 16)}.{index}"

    def add_node(self, name: str) -> Node:
        """A namespace on the bridge with the next address."""
        node = Node(name, f"shk{self.id}-{name}", self.address(len(self.nodes) + 2))
        veth = f"shk{self.id}{len(self.nodes)}"
        _run("ip", "netns", "add", node.namespace)
        self.nodes[name] = node
        _run("ip", "link", "add", veth, "type", "veth", "peer", "name", veth + "p")
        _run("ip", "link", "set", veth + "p", "netns", node.namespace)
        _run("ip", "link", "set", veth, "master", self.bridge, "up")
        inside = ("ip", "netns", "exec", node.namespace)
        _run(*inside, "ip", "link", "set", "lo", "up")
        _run(*inside, "ip", "addr", "add", f"{node.address}/24", "dev", veth + "p")
        _run(*inside, "ip", "link", "set", veth + "p", "up")
        return node

    def spawn(self, node: Node, argv: Sequence[str], **popen: Any) -> subprocess.Popen[bytes]:
        """``argv`` in the node's network namespace, with IPC, mounts and /dev/shm its own."""
        command = ["ip", "netns", "exec", node.namespace, "unshare", "--ipc", "--mount",
                   "--propagation", "private", "sh", "-c", PRIVATE_SHM, "sh", *argv]  # fmt: skip
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
        return [self.add_rule(Rule(node, "OUTPUT", (*out, "-j", "DROP"))),
                self.add_rule(Rule(node, "INPUT", (*back, "-j", "DROP")))]  # fmt: skip

    def lose(self, node: Node, probability: float) -> list[Rule]:
        """Each packet in or out of ``node`` dropped with ``probability``."""
        match = ("-m", "statistic", "--mode", "random", "--probability", f"{probability:.3f}",
                 "-j", "DROP")  # fmt: skip
        return [self.add_rule(Rule(node, chain, match)) for chain in ("INPUT", "OUTPUT")]

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
                process.wait(30)
            for pipe in (process.stdin, process.stdout, process.stderr):
                if pipe is not None:
                    pipe.close()
        for node in self.nodes.values():  # (a Sender a worker started is in there too)
            self.kill_all(node)
            subprocess.run(["ip", "netns", "del", node.namespace], capture_output=True)
        subprocess.run(["ip", "link", "del", self.bridge], capture_output=True)

    def __enter__(self) -> NetLab:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()
