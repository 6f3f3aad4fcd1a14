"""The Sender's TLS client context, from its settings (Python's ``ssl``).

Rules:
- Verification is on by default: the broker's certificate must chain to the CA given (or
  the system's), and its name must match the host the Sender connects to, as librdkafka
  ≥ 2.0 (``ssl.endpoint.identification.algorithm=https``) and kafka-python
  (``ssl_check_hostname=True``) do.
- PEM texts given inline (librdkafka's ``ssl.*.pem``) are loaded from a private temporary
  directory (mode 0700) that is removed at once: ``ssl`` loads key pairs from files only.
"""

from __future__ import annotations

import os
import ssl
import tempfile

from shmkafka.pool.config import SenderConfig


def client_context(config: SenderConfig) -> ssl.SSLContext:
    context = ssl.create_default_context(cafile=config.ssl_cafile, cadata=config.ssl_ca_pem)
    if not config.ssl_verify:
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    else:
        context.check_hostname = config.ssl_check_hostname
    if config.ssl_crlfile:
        context.load_verify_locations(config.ssl_crlfile)
        context.verify_flags |= ssl.VERIFY_CRL_CHECK_LEAF
    if config.ssl_ciphers:
        context.set_ciphers(config.ssl_ciphers)
    if config.ssl_cert_pem or config.ssl_key_pem:
        _load_inline_pair(context, config)
    elif config.ssl_certfile:
        context.load_cert_chain(config.ssl_certfile, config.ssl_keyfile, config.ssl_password)
    return context


def _load_inline_pair(context: ssl.SSLContext, config: SenderConfig) -> None:
    with tempfile.TemporaryDirectory(prefix="shmkafka-tls-") as private:  # mode 0700
        cert = os.path.join(private, "cert.pem")
        key = os.path.join(private, "key.pem")
        for path, text in ((cert, config.ssl_cert_pem), (key, config.ssl_key_pem)):
            if text:
                descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
                with os.fdopen(descriptor, "w") as f:
                    f.write(text)
        certfile = cert if config.ssl_cert_pem else config.ssl_certfile
        keyfile = key if config.ssl_key_pem else config.ssl_keyfile
        assert certfile is not None
        context.load_cert_chain(certfile, keyfile, config.ssl_password)
