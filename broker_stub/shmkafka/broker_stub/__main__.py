"""``shmkafka broker-stub``: run a broker_stub cluster in the foreground until SIGTERM or
Ctrl-C; ``shmkafka broker-stub-control``: send it one fault-injection operation.

The control port (``--port`` + ``--nodes``, or printed at start) takes one JSON object per
line, ``{"op": "fail_produce", "args": {"code": 6, "count": 3}}``, and answers one JSON line,
``{"ok": true, "result": ...}`` or ``{"ok": false, "error": "..."}``. Operations are
``BrokerStub``'s and ``Faults``' methods: fail_produce, random_produce_errors,
drop_connection, pause_node, resume_node, move_leader, kill_node, restart_node,
create_topic, add_partitions, partition_count, leader, high_watermark, auth_events, clear.

Security (plaintext by default): ``--tls-cert PATH --tls-key PATH`` make every listener speak
TLS (``--tls-ca PATH`` checks client certificates, ``--tls-require-client-cert`` demands
them); ``--sasl-mechanisms PLAIN,SCRAM-SHA-256,SCRAM-SHA-512,OAUTHBEARER`` (any subset) with
``--user NAME:PASSWORD`` (repeatable) or ``--users-file PATH`` turns SASL on, and
``--sasl-session-lifetime-ms N`` makes sessions expire (KIP-368). OAUTHBEARER takes
unsecured JWTs and needs no user.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import signal
import socket
import ssl
import sys
import threading
from collections.abc import Sequence
from functools import partial
from typing import Any

from shmkafka.broker_stub.auth import SaslConfig
from shmkafka.broker_stub.server import BrokerStub, tls_context
from shmkafka.broker_stub.storage import StorageConfig
from shmkafka.protocol.sasl import MECHANISMS


def build_parser(parser: argparse.ArgumentParser | None = None) -> argparse.ArgumentParser:
    parser = parser or argparse.ArgumentParser(prog="shmkafka broker-stub")
    parser.add_argument("--nodes", type=int, default=1)
    parser.add_argument("--port", type=int, default=9092, help="node i listens on PORT + i")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--partitions", type=int, default=1, help="for auto-created topics")
    parser.add_argument("--replication-factor", type=int, default=1)
    parser.add_argument("--min-insync-replicas", type=int, default=1)
    parser.add_argument("--replication-lag-ms", type=int, default=0)
    parser.add_argument("--no-auto-create", action="store_true")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--advertise-ports",
        metavar="P1,P2,...",
        help="Metadata gives these ports (one per node, e.g. proxies in front)",
    )
    _nodes_apart(parser)
    durable = parser.add_argument_group("durable log (in memory without --storage)")
    durable.add_argument(
        "--storage", metavar="DIR", help="keep the logs in DIR (recovered at start)"
    )
    durable.add_argument("--flush", choices=("async", "sync"), default="async")
    durable.add_argument("--flush-interval-ms", type=int, default=1000)
    durable.add_argument("--no-group-commit", action="store_true",
                         help="--flush sync: one fsync per request (the baseline)")  # fmt: skip
    durable.add_argument("--segment-bytes", type=int, default=1 << 30)
    durable.add_argument("--segment-ms", type=int, default=7 * 24 * 3600 * 1000)
    durable.add_argument("--index-interval-bytes", type=int, default=4096)
    durable.add_argument("--retention-bytes", type=int, default=-1)
    durable.add_argument("--retention-ms", type=int, default=-1)
    security = parser.add_argument_group("security (plaintext without these)")
    security.add_argument("--tls-cert", metavar="PATH", help="the listeners' certificate (PEM)")
    security.add_argument("--tls-key", metavar="PATH", help="its private key (PEM)")
    security.add_argument(
        "--tls-ca", metavar="PATH", help="CA (PEM) that client certificates are checked against"
    )
    security.add_argument(
        "--tls-require-client-cert",
        action="store_true",
        help="mutual TLS: refuse clients without a certificate from --tls-ca",
    )
    security.add_argument(
        "--sasl-mechanisms",
        metavar="LIST",
        help=f"comma-separated subset of {','.join(MECHANISMS)}",
    )
    security.add_argument(
        "--user",
        metavar="NAME:PASSWORD",
        action="append",
        default=[],
        help="a SASL user (repeatable); SCRAM keeps salted credentials only",
    )
    security.add_argument(
        "--users-file",
        metavar="PATH",
        help="SASL users, one NAME:PASSWORD a line (keeps passwords off the command line)",
    )
    security.add_argument(
        "--sasl-session-lifetime-ms",
        type=int,
        default=0,
        metavar="N",
        help="sessions expire after N ms unless re-authenticated (KIP-368)",
    )
    return parser


def _nodes_apart(parser: argparse.ArgumentParser) -> None:
    apart = parser.add_argument_group("nodes apart (Linux, root: each node in a namespace)")
    apart.add_argument(
        "--node-hosts",
        metavar="A1,A2,...",
        help="node i listens on, and is advertised at, Ai (one per node)",
    )
    apart.add_argument("--node-netns", metavar="NS1,NS2,...",
                       help="node i listens in network namespace NSi (of `ip netns`); the "
                       "nodes' links are then probed, and replication and the quorum "
                       "follow them")  # fmt: skip
    apart.add_argument(
        "--replica-lag-time-max-ms",
        type=int,
        default=0,
        help="a follower behind this long leaves the ISR (0: never)",
    )
    apart.add_argument(
        "--session-timeout-ms",
        type=int,
        default=2000,
        help="a node out of the quorum this long is fenced",
    )


def security(args: argparse.Namespace) -> tuple[ssl.SSLContext | None, SaslConfig | None]:
    """The TLS context and SASL config of the arguments; ValueError says what is wrong."""
    context = None
    if (args.tls_cert is None) != (args.tls_key is None):
        raise ValueError("--tls-cert and --tls-key go together")
    if args.tls_cert is None and (args.tls_ca or args.tls_require_client_cert):
        raise ValueError("--tls-ca and --tls-require-client-cert need --tls-cert and --tls-key")
    if args.tls_require_client_cert and not args.tls_ca:
        raise ValueError("--tls-require-client-cert needs --tls-ca")
    if args.tls_cert is not None:
        context = tls_context(args.tls_cert, args.tls_key, args.tls_ca,
                              args.tls_require_client_cert)  # fmt: skip
    if not args.sasl_mechanisms:
        if args.user or args.users_file or args.sasl_session_lifetime_ms:
            raise ValueError(
                "--user, --users-file and --sasl-session-lifetime-ms need --sasl-mechanisms"
            )
        return context, None
    users: dict[str, str] = {}
    for item in [*args.user, *_file_users(args.users_file)]:
        name, colon, password = item.partition(":")
        if not name or not colon:
            raise ValueError(f"--user {name or item!r}: expected NAME:PASSWORD")
        users[name] = password
    mechanisms = [m.strip().upper() for m in args.sasl_mechanisms.split(",") if m.strip()]
    if not users and any(m != "OAUTHBEARER" for m in mechanisms):
        raise ValueError("PLAIN and SCRAM need at least one --user NAME:PASSWORD")
    return context, SaslConfig.make(mechanisms, users, args.sasl_session_lifetime_ms)


def _file_users(path: str | None) -> list[str]:
    if path is None:
        return []
    with open(path) as f:
        return [line.rstrip("\n") for line in f if line.strip()]


def _advertised(text: str | None, nodes: int) -> list[int]:
    if text is None:
        return []
    ports = [int(p) for p in text.split(",")]
    if len(ports) != nodes:
        raise ValueError(f"--advertise-ports: {len(ports)} ports for {nodes} node(s)")
    return ports


def _per_node(flag: str, text: str | None, nodes: int) -> list[str] | None:
    if text is None:
        return None
    items = text.split(",")
    if len(items) != nodes:
        raise ValueError(f"{flag}: {len(items)} given for {nodes} node(s)")
    return items


CONTROL_OPERATIONS = (
    "fail_produce", "random_produce_errors", "drop_connection", "pause_node", "resume_node",
    "move_leader", "kill_node", "restart_node", "create_topic", "leader", "high_watermark",
    "errors_sent", "auth_events", "clear", "fail_api", "move_coordinator", "add_partitions",
    "partition_count", "fenced",
)  # fmt: skip


def control_parser(parser: argparse.ArgumentParser | None = None) -> argparse.ArgumentParser:
    parser = parser or argparse.ArgumentParser(prog="shmkafka broker-stub-control")
    parser.epilog = (
        f"operations: {', '.join(CONTROL_OPERATIONS)}. The control port is the first node's "
        "port + the number of nodes (shmkafka broker-stub prints it at start)."
    )
    parser.add_argument("--port", type=int, required=True, help="the stub's control port")
    parser.add_argument("--host", default="127.0.0.1", help="default: 127.0.0.1")
    parser.add_argument("op", choices=CONTROL_OPERATIONS, metavar="op",
                        help="the operation (listed below)")  # fmt: skip
    parser.add_argument("args", nargs="*", help="NAME=VALUE (VALUE as JSON, else a string)")
    return parser


def _serve_control(stub: BrokerStub, port: int) -> int:
    """Start the control listener on the stub's loop; returns its port."""

    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        loop = asyncio.get_running_loop()
        while line := await reader.readline():
            try:
                command = json.loads(line)
                op, fields = command["op"], command.get("args", {})
                result = await loop.run_in_executor(None, partial(stub.control, op, **fields))
                reply: dict[str, Any] = {"ok": True, "result": result}
            except Exception as exc:  # noqa: BLE001 - reported to the caller, never fatal
                reply = {"ok": False, "error": f"{type(exc).__name__}: {exc}"}
            writer.write(json.dumps(reply, default=str).encode() + b"\n")
            await writer.drain()
        writer.close()

    async def start() -> int:
        try:
            server = await asyncio.start_server(answer, stub.host, port, reuse_address=True)
        except OSError:  # PORT + nodes is taken: any free port (it is printed)
            server = await asyncio.start_server(answer, stub.host, 0)
        bound: int = server.sockets[0].getsockname()[1]
        return bound

    result: int = stub._call(start())
    return result


def run(args: argparse.Namespace) -> int:
    try:
        ssl_context, sasl = security(args)
        advertised = _advertised(args.advertise_ports, args.nodes)
        node_hosts = _per_node("--node-hosts", args.node_hosts, args.nodes)
        node_netns = _per_node("--node-netns", args.node_netns, args.nodes)
    except (ValueError, OSError) as exc:  # OSError: a certificate or key file unreadable
        print(f"broker_stub: error: {exc}", file=sys.stderr, flush=True)
        return 2
    stub = BrokerStub(
        args.nodes, port=args.port, host=args.host, seed=args.seed, partitions=args.partitions,
        replication_factor=args.replication_factor,
        min_insync_replicas=args.min_insync_replicas,
        replication_lag_ms=args.replication_lag_ms, auto_create_topics=not args.no_auto_create,
        storage_dir=args.storage, flush=args.flush, flush_interval_ms=args.flush_interval_ms,
        group_commit=not args.no_group_commit, ssl_context=ssl_context, sasl=sasl,
        node_hosts=node_hosts, node_netns=node_netns,
        replica_lag_time_max_ms=args.replica_lag_time_max_ms,
        session_timeout_ms=args.session_timeout_ms,
        storage=StorageConfig(
            segment_bytes=args.segment_bytes, segment_ms=args.segment_ms,
            index_interval_bytes=args.index_interval_bytes,
            retention_bytes=args.retention_bytes, retention_ms=args.retention_ms,
        ),
    )  # fmt: skip
    stop = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stop.set())
    for node, port in zip(stub.cluster.node_ids, advertised, strict=False):
        stub.advertise(node, port)
    with stub:
        control = _serve_control(stub, args.port + args.nodes if args.port else 0)
        mechanisms = f" ({','.join(sasl.mechanisms)})" if sasl else ""
        print(f"broker_stub: {args.nodes} node(s) at {stub.bootstrap}; control port {control}; "
              f"{stub.security_protocol}{mechanisms}", flush=True)  # fmt: skip
        stop.wait()
    print("broker_stub: stopped", flush=True)
    return 0


def control(args: argparse.Namespace) -> int:
    fields: dict[str, Any] = {}
    for item in args.args:
        name, _, value = item.partition("=")
        try:
            fields[name] = json.loads(value)
        except json.JSONDecodeError:
            fields[name] = value
    with socket.create_connection((args.host, args.port), timeout=30) as sock:
        sock.sendall(json.dumps({"op": args.op, "args": fields}).encode() + b"\n")
        reply = json.loads(sock.makefile().readline())
    print(json.dumps(reply))
    return 0 if reply.get("ok") else 1


def main(argv: Sequence[str] | None = None) -> int:
    return run(build_parser().parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
