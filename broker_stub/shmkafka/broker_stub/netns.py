"""Sockets made in another network namespace: each node of one broker_stub process can
listen on an address of its own namespace (``--node-netns``), so the kernel's network, and
its faults, lie between the nodes as between separate machines.

Rules:
- Linux only, and root (``setns`` into a named namespace of ``ip netns``, i.e. a file under
  /run/netns). A socket keeps the namespace it was made in: the thread enters the
  namespace, makes the socket and goes back at once, whatever happened.
- Only the socket's creation is here; binding, connecting and I/O are the caller's, from
  any thread.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import socket
from collections.abc import Iterator

CLONE_NEWNET = 0x40000000
NETNS_DIR = "/run/netns"

_libc = ctypes.CDLL(None, use_errno=True)


def _setns(fd: int) -> None:
    if _libc.setns(fd, CLONE_NEWNET) != 0:
        errno = ctypes.get_errno()
        raise OSError(errno, f"setns: {os.strerror(errno)}")


@contextlib.contextmanager
def entered(namespace: str) -> Iterator[None]:
    """The calling thread in network namespace ``namespace`` for the block."""
    home = os.open("/proc/thread-self/ns/net", os.O_RDONLY)
    try:
        target = os.open(os.path.join(NETNS_DIR, namespace), os.O_RDONLY)
        try:
            _setns(target)
        finally:
            os.close(target)
        try:
            yield
        finally:
            _setns(home)
    finally:
        os.close(home)


def tcp_socket(namespace: str | None) -> socket.socket:
    """A TCP socket of ``namespace`` (this thread's own with None)."""
    if namespace is None:
        return socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    with entered(namespace):
        return socket.socket(socket.AF_INET, socket.SOCK_STREAM)


def listening(namespace: str | None, host: str, port: int) -> socket.socket:
    """A listening TCP socket on ``host:port`` of ``namespace``."""
    sock = tcp_socket(namespace)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen(128)
        sock.setblocking(False)
    except OSError:
        sock.close()
        raise
    return sock
