"""aiokafka.helpers.create_ssl_context, whose context remembers the files it was made from:
the pool's Sender, another process, makes its own from them (an SSLContext cannot cross)."""

from __future__ import annotations

import os
import ssl
from typing import Any


class _RememberedContext(ssl.SSLContext):
    shmkafka_files: dict[str, Any]


def create_ssl_context(
    *, cafile: Any = None, capath: Any = None, cadata: Any = None, certfile: Any = None,
    keyfile: Any = None, password: Any = None,
) -> ssl.SSLContext:  # fmt: skip
    """aiokafka's: a client context that checks the broker's host name, loading ``cafile``
    (or the system's), ``certfile``/``keyfile`` with ``password``."""
    if capath is not None or cadata is not None:
        raise ValueError("shmkafka's Sender loads CA files: give cafile (not capath or cadata)")
    if callable(password):
        password = password()
    if isinstance(password, (bytes, bytearray)):
        password = bytes(password).decode()
    context = _RememberedContext(ssl.PROTOCOL_TLS_CLIENT)
    if cafile:
        context.load_verify_locations(cafile=cafile)
    else:
        context.load_default_certs(ssl.Purpose.SERVER_AUTH)
    if certfile:
        context.load_cert_chain(certfile, keyfile, password)
    context.shmkafka_files = {
        "ssl_cafile": os.fspath(cafile) if cafile else None,
        "ssl_certfile": os.fspath(certfile) if certfile else None,
        "ssl_keyfile": os.fspath(keyfile) if keyfile else None,
        "ssl_password": password,
        "ssl_check_hostname": True,
    }
    return context
