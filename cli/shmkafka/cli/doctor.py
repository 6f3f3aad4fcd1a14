"""``shmkafka doctor``: checks what a pool needs on this host and says, for each check, "ok"
or what to change.

Rules:
- A check reads and probes; it never changes a pool. The probes it makes (a semaphore, a
  file in /dev/shm) are its own, named ``shmkafka-doctor-<pid>``, and removed at once.
- Each check gives one ``Finding``: ``ok``, ``warn`` (works, but something will bite) or
  ``fail`` (a pool cannot work so), with what it found and, unless ok, what to change.
- The exit status is 0 when nothing failed, 1 when a check failed (warnings leave it 0),
  2 for a usage error. ``--json`` prints the findings as one object for scripts.
- The broker check uses the Sender's own connection code (admin.py's session over
  ``NetworkClient``): the same TLS context, SASL exchange and ApiVersions negotiation, from
  the same properties a producer takes. No secret is printed: a failure names the broker's
  answer, never the credentials.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.metadata
import json
import os
import resource
import stat
import sys
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

from shmkafka.cli.properties import add_property_arguments, read_properties
from shmkafka.pool.config import Config, SenderConfig
from shmkafka.protocol.errors import KafkaError
from shmkafka.shm.layout import Layout
from shmkafka.shm.segment import PREFIX, list_pools

SHM = "/dev/shm"
MIN_SEGMENT_BYTES = 4096  # (a pool's header page)
MIN_OPEN_FILES = 1024  # a Sender holds a socket per broker, apps a few descriptors each
PEERS = ("kafka-python", "confluent-kafka", "aiokafka")
DEFAULT_BOOTSTRAP = "localhost:9092"  # (only to size the pool when none is given)


@dataclass(frozen=True)
class Finding:
    check: str
    status: str  # "ok", "warn" or "fail"
    found: str
    change: str = ""


def ok(check: str, found: str) -> Finding:
    return Finding(check, "ok", found)


def warn(check: str, found: str, change: str) -> Finding:
    return Finding(check, "warn", found, change)


def fail(check: str, found: str, change: str) -> Finding:
    return Finding(check, "fail", found, change)


# ---------------------------------------------------------------------- the command


def build_parser(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    parser.add_argument(
        "--bootstrap-server",
        dest="bootstrap",
        metavar="HOST:PORT[,...]",
        help="also connect to these brokers, with the TLS and SASL the properties set",
    )
    parser.add_argument("--pool", help="also check this pool's health")
    parser.add_argument(
        "--api",
        choices=("kafka-python", "confluent"),
        default="kafka-python",
        help="whose argument names the properties use",
    )
    parser.add_argument("--timeout-ms", type=int, default=10_000, help="the broker check's bound")
    parser.add_argument("--json", action="store_true", help="print the findings as JSON")
    add_property_arguments(parser, "security_protocol=SASL_SSL")
    return parser


def run(args: argparse.Namespace) -> int:
    try:
        properties = read_properties(args.producer_property, args.producer_config)
        settings = _settings(args.api, args.bootstrap, properties, args.pool)
    except (KafkaError, OSError, ValueError) as exc:
        print(f"shmkafka doctor: {exc}", file=sys.stderr)
        return 2
    findings = diagnose(settings, args.bootstrap, args.pool, args.timeout_ms)
    failed = any(f.status == "fail" for f in findings)
    if args.json:
        print(json.dumps({"ok": not failed, "findings": [asdict(f) for f in findings]}, indent=2))
    else:
        print(format_findings(findings))
    return 1 if failed else 0


def _settings(
    api: str, bootstrap: str | None, properties: dict[str, str], pool: str | None
) -> Config:
    from shmkafka.cli.sidecar import settings_for

    return settings_for(api, bootstrap or DEFAULT_BOOTSTRAP, properties, pool or "doctor")


def diagnose(
    settings: Config, bootstrap: str | None, pool: str | None, timeout_ms: int
) -> list[Finding]:
    """Every check, in the order a user fixes them."""
    checks: list[Callable[[], Finding | list[Finding]]] = [
        lambda: check_shm(Layout.for_config(settings.pool)),
        check_shm_writable,
        check_semaphores,
        check_open_files,
        check_pools,
        check_namespaces,
        check_c_extensions,
        check_peers,
    ]
    if bootstrap:
        checks.append(lambda: check_brokers(settings.sender, timeout_ms))
    if pool:
        checks.append(lambda: check_pool(pool))
    findings: list[Finding] = []
    for check in checks:
        result = check()
        findings.extend(result if isinstance(result, list) else [result])
    return findings


def format_findings(findings: list[Finding]) -> str:
    width = max(len(f.check) for f in findings)
    lines = []
    for f in findings:
        lines.append(f"{f.status.upper():4}  {f.check:{width}}  {f.found}")
        if f.change:
            lines.append(f"{'':4}  {'':{width}}  -> {f.change}")
    failed = sum(f.status == "fail" for f in findings)
    warned = sum(f.status == "warn" for f in findings)
    lines.append(f"{failed} failed, {warned} warnings, {len(findings) - failed - warned} ok")
    return "\n".join(lines)


# ---------------------------------------------------------------------- the checks


def _mib(n: float) -> str:
    return f"{n / (1 << 20):,.0f} MiB"


def _mib_up(n: float) -> str:
    """For "at least": rounded up, so that following the advice is enough."""
    return f"{-(-int(n) // (1 << 20)):,} MiB"


def check_shm(layout: Layout) -> Finding:
    """/dev/shm's size and free space against the pool these settings make: what creation
    takes at once. The rest of the map is address space, taken a page at a time as
    processes, topics and partitions come (28 KiB a process, 49 bytes a partition): named,
    not required, as a full /dev/shm then fails only what needed the page."""
    name = "/dev/shm space"
    try:
        fs = os.statvfs(SHM)
    except OSError as exc:
        return fail(name, f"{SHM}: {exc.strerror}", "mount a tmpfs at /dev/shm")
    size, free = fs.f_blocks * fs.f_frsize, fs.f_bavail * fs.f_frsize
    grown_from, grown_to = layout.grown_regions
    at_creation = layout.size - (grown_to - grown_from)
    found = (
        f"{_mib(size)}, {_mib(free)} free; a pool with these settings takes "
        f"{_mib_up(at_creation)} when made (buffer_memory {_mib(layout.config.buffer_memory)}), "
        f"and grows with use up to {_mib_up(layout.size)} at its limits"
    )
    if free < at_creation:
        need = _mib_up(at_creation + (size - free))
        return fail(
            name,
            found,
            f"make /dev/shm at least {need} (Docker: --shm-size; "
            "Kubernetes: an emptyDir with medium: Memory), or lower buffer_memory",
        )
    if free < 2 * at_creation:
        return warn(name, found, "room for one such pool only: make /dev/shm larger")
    return ok(name, found)


def check_shm_writable() -> Finding:
    name = "/dev/shm writable"
    probe = os.path.join(SHM, f"shmkafka-doctor-{os.getpid()}")
    try:
        fd = os.open(probe, os.O_CREAT | os.O_EXCL | os.O_RDWR, 0o600)
    except OSError as exc:
        return fail(
            name,
            f"cannot create a file in {SHM}: {exc.strerror}",
            f"give this user write access to {SHM} (mode 1777, as a tmpfs is made)",
        )
    os.close(fd)
    os.unlink(probe)
    mode = stat.S_IMODE(os.stat(SHM).st_mode)
    if mode & 0o1000 == 0 and mode & 0o002:
        return warn(
            name,
            f"{SHM} is mode {mode:o}: without the sticky bit any user can remove another's pool",
            f"chmod 1777 {SHM}",
        )
    return ok(name, f"{SHM} is mode {mode:o}")


def check_semaphores() -> Finding:
    """A pool's locks are POSIX named semaphores: one is made and removed."""
    import posix_ipc

    name = "semaphores"
    probe = f"/shmkafka-doctor-{os.getpid()}"
    try:
        sem = posix_ipc.Semaphore(probe, posix_ipc.O_CREX, 0o600, 1)
    except (posix_ipc.Error, OSError) as exc:
        return fail(
            name,
            f"cannot make a POSIX semaphore: {exc}",
            "mount /dev/shm (POSIX semaphores live there) and allow sem_open",
        )
    sem.unlink()
    sem.close()
    return ok(name, "POSIX named semaphores work")


def check_open_files() -> Finding:
    name = "open files"
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    found = f"RLIMIT_NOFILE soft {soft}, hard {hard}"
    if soft != resource.RLIM_INFINITY and soft < MIN_OPEN_FILES:
        return warn(
            name,
            found,
            f"raise it to {MIN_OPEN_FILES} or more (ulimit -n; "
            "Docker: --ulimit nofile=...; systemd: LimitNOFILE=)",
        )
    return ok(name, found)


def check_pools() -> list[Finding]:
    """Every pool in /dev/shm: this user's (mode 0600, as made) or another's."""
    findings = []
    me = os.getuid()
    for pool in list_pools():
        name = f"pool {pool}"
        path = os.path.join(SHM, PREFIX + pool)
        try:
            st = os.lstat(path)
        except FileNotFoundError:
            continue  # (removed meanwhile)
        mode = stat.S_IMODE(os.stat(path).st_mode) if os.path.exists(path) else 0
        if st.st_uid != me:
            findings.append(
                warn(
                    name,
                    f"belongs to uid {st.st_uid}, not this user (uid {me})",
                    f"run the producers of pool {pool!r} as uid {st.st_uid}, or give this "
                    "user's producers another pool name",
                )
            )
        elif mode & 0o077:
            findings.append(
                fail(
                    name,
                    f"mode {mode:o}: other users can read it (it may hold SASL secrets)",
                    f"chmod 600 {path}",
                )
            )
        elif stat.S_ISLNK(st.st_mode) and not os.path.exists(path):
            findings.append(
                warn(
                    name,
                    f"links to {os.readlink(path)}, which is gone",
                    f"shmkafka cleanup --pool {pool}",
                )
            )
        else:
            findings.append(ok(name, f"this user's, mode {mode:o}"))
    return findings or [ok("pools", f"none in {SHM} yet")]


def check_namespaces() -> list[Finding]:
    """Processes that share a pool must see each other's pids: a pool whose Sender runs but
    is out of this PID namespace's sight refuses this process."""
    # (the processes of a pool share it by sharing /dev/shm, which a container runtime ties
    # to the IPC namespace: Docker's --ipc=shareable and --ipc=container:NAME)
    found = f"pid {_namespace('pid')}, ipc {_namespace('ipc')}, mnt {_namespace('mnt')}"
    findings = [ok("namespaces", found)]
    for pool in list_pools():
        if _sender_out_of_sight(pool):
            findings.append(
                fail(
                    f"pool {pool} namespace",
                    "its Sender runs in a PID namespace this process cannot see into",
                    "share the PID namespace (Kubernetes: shareProcessNamespace: true; "
                    "Docker: --pid=container:NAME), or give each container its own pool",
                )
            )
    return findings


def _namespace(kind: str) -> str:
    try:
        return os.readlink(f"/proc/self/ns/{kind}").split(":", 1)[-1]
    except OSError:
        return "unknown"


def check_c_extensions() -> Finding:
    name = "C extensions"
    from shmkafka.pool.native import PURE_PYTHON_ENV, turned_off

    missing = []
    for module in _extension_modules():
        try:
            importlib.import_module(module)
        except ImportError as exc:
            missing.append(f"{module} ({exc})")
    if missing:
        return warn(
            name,
            "not loaded, sends run in Python (slower): " + "; ".join(missing),
            "install a wheel for this platform, or build from the sdist with a C "
            "compiler and Python's headers",
        )
    if turned_off():
        return warn(
            name,
            f"loaded, but {PURE_PYTHON_ENV} is set: sends run in Python",
            f"unset {PURE_PYTHON_ENV}",
        )
    return ok(name, "loaded: " + ", ".join(m.rsplit(".", 1)[1] for m in _extension_modules()))


def _extension_modules() -> list[str]:
    """The C extensions' modules, from the one list the ``shmkafka`` command keeps."""
    from shmkafka.cli import C_EXTENSIONS

    return ["shmkafka." + folder.replace("/", ".") for folder in C_EXTENSIONS]


def check_peers() -> Finding:
    versions = []
    for peer in PEERS:
        try:
            versions.append(f"{peer} {importlib.metadata.version(peer)}")
        except importlib.metadata.PackageNotFoundError:
            versions.append(f"{peer} not installed")
    return ok("peers", "; ".join(versions) + " (shmkafka's facades need none of them)")


def check_brokers(sender: SenderConfig, timeout_ms: int) -> Finding:
    """Metadata from the bootstrap servers, over the Sender's own connection code."""
    from shmkafka.sender.admin import AdminSession
    from shmkafka.sender.authentication import SaslSettings
    from shmkafka.sender.tls import client_context

    name = "brokers"
    servers = ",".join(f"{h}:{p}" for h, p in sender.bootstrap_addresses())
    how = sender.security_protocol
    try:
        context = client_context(sender) if sender.tls else None
        sasl = None
        if sender.sasl:
            if sender.sasl_mechanism == "OAUTHBEARER":
                return warn(
                    name,
                    f"{servers} ({how}, OAUTHBEARER) not checked: the token comes "
                    "from the producer (its token callback, or the OIDC endpoint)",
                    "check it with a producer",
                )
            sasl = SaslSettings(sender.sasl_mechanism, sender.sasl_username, sender.sasl_password)
        with AdminSession(servers, timeout_ms, context, sasl) as session:
            metadata = session.refresh_metadata()
    except (KafkaError, OSError, ValueError) as exc:
        return fail(
            name,
            f"{servers} ({how}): {_named(exc)}",
            "check the address, the port's listener, its security protocol, and the credentials",
        )
    return ok(
        name,
        f"{servers} ({how}): {len(metadata.brokers)} brokers, controller {metadata.controller_id}",
    )


def _named(exc: BaseException) -> str:
    """The error with its type's name, once (a KafkaError's text already starts with it)."""
    text, kind = str(exc), type(exc).__name__
    return text if text.startswith(kind) else f"{kind}: {text}"


def check_pool(pool: str) -> list[Finding]:
    """One pool's health, as ``shmkafka stat`` reads it."""
    from shmkafka.pool.stat import pool_stat
    from shmkafka.shm.errors import ShmError

    name = f"pool {pool} health"
    try:
        s = pool_stat(pool)
    except (ShmError, OSError) as exc:
        return [fail(name, str(exc), "start a producer or `shmkafka sender --create` for it")]
    findings = [_sender_health(pool, s["sender"]), _slot_health(pool, s)]
    errors = s["internal_errors"]
    if errors:
        findings.append(
            fail(
                f"pool {pool} errors",
                f"{errors} internal errors recorded",
                "see the Sender's log; report it with `shmkafka stat --json`",
            )
        )
    else:
        findings.append(ok(f"pool {pool} errors", "no internal errors"))
    return findings


def _sender_health(pool: str, sender: dict[str, Any]) -> Finding:
    name = f"pool {pool} Sender"
    if sender["alive"]:
        return ok(name, f"pid {sender['pid']}, up {sender['uptime_s']} s")
    if _sender_out_of_sight(pool):
        return fail(
            name,
            "a Sender runs, in a PID namespace this process cannot see into",
            "share the PID namespace with the pool's other processes, or use a pool of your own",
        )
    return fail(
        name,
        "no Sender is running",
        f"a producer starts one on its next send; or run `shmkafka sender --pool {pool}`",
    )


def _sender_out_of_sight(pool: str) -> bool:
    from shmkafka.shm.errors import ShmError
    from shmkafka.shm.namespaces import sender_out_of_sight
    from shmkafka.shm.segment import Segment

    try:
        if os.stat(os.path.join(SHM, PREFIX + pool)).st_size < MIN_SEGMENT_BYTES:
            return False  # (being made, or not a pool: attaching would wait for its header)
        segment = Segment.attach(pool)
    except (ShmError, OSError):
        return False  # (another user's, or being made: check_pools names it)
    try:
        return sender_out_of_sight(segment)
    finally:
        segment.close()


def _slot_health(pool: str, s: dict[str, Any]) -> Finding:
    """Each process attached holds a slot until it exits; a dead one's is reclaimed by the
    next process to attach. A pool whose slots are all held by live processes refuses more."""
    name = f"pool {pool} processes"
    processes, limit = s["processes"], s["max_processes"]
    dead = [p["pid"] for p in processes if not p["alive"]]
    live = len(processes) - len(dead)
    found = f"{len(processes)} of {limit} slots taken, {len(dead)} by dead processes"
    if dead:
        found += f" (pids {dead[:8]})"
    more = "make the pool with a larger max_processes (under a new name: its size is fixed)"
    if live >= limit:
        return fail(name, found, f"no process can attach: {more}")
    if live >= 0.9 * limit:
        return warn(name, found, f"close to full: {more}")
    if dead:
        return warn(name, found, "the next process to attach reclaims their slots")
    return ok(name, found)
