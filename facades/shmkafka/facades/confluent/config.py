"""The confluent-kafka ``Producer``'s configuration, checked as librdkafka checks it: the same
properties (librdkafka_properties.py), value syntax, ranges, checks across properties and
error texts, then mapped onto shmkafka's settings.

Rules:
- ``parse`` raises ``ConfigError`` with librdkafka's text (the caller makes it a
  ``KafkaException(_INVALID_ARG)``), or the Python exception confluent-kafka raises for the
  Python-only keys (``error_cb`` and so on). The first bad property raises, in dict order;
  the checks across properties run after all are set, prefixed "Failed to create producer: ".
- A property is looked up in the global table, then (without a ``topic.`` prefix) in the
  topic table; aliases resolve to their property, whose name the messages use.
- Every valid property is accepted. Those in ``SETTINGS`` take effect; the others are
  checked and reported once as having no effect here (consumer properties as librdkafka
  warns of them). ``transactional.id`` gives the producer a pool of its own.
- Defaults differ from librdkafka's where the pool is shared memory reserved when it is
  made: ``queue.buffering.max.kbytes`` 32768 (1048576), ``max.in.flight`` 5 (1000000).
  ``batch.size`` (1000000) and ``batch.num.messages`` (10000) are librdkafka's: a batch
  grows from one slab up to them.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from shmkafka.facades.confluent.librdkafka_properties import GLOBAL, TOPIC, Property
from shmkafka.pool.config import normalize_bootstrap

INT32_MAX = 2**31 - 1
INFINITE_TIMEOUT_MS = INT32_MAX  # message.timeout.ms=0 (no limit): about 24.8 days


class ConfigError(ValueError):
    """A property or value librdkafka refuses; the message is librdkafka's."""


PARTITIONERS = (
    "random", "consistent", "consistent_random", "murmur2", "murmur2_random", "fnv1a",
    "fnv1a_random",
)  # fmt: skip

# librdkafka property → the setting it drives (every other valid property has no effect here)
SETTINGS = {
    "metadata.broker.list": "bootstrap_servers",
    "client.id": "client_id",
    "request.required.acks": "acks",
    "queue.buffering.max.ms": "linger_ms",
    "batch.size": "batch_size",
    "batch.num.messages": "batch_max_records",
    "compression.codec": "compression_type",
    "compression.level": "compression_level",
    "enable.idempotence": "enable_idempotence",
    "message.timeout.ms": "delivery_timeout_ms",
    "request.timeout.ms": "request_timeout_ms",
    "message.send.max.retries": "retries",
    "retry.backoff.ms": "retry_backoff_ms",
    "retry.backoff.max.ms": "retry_backoff_max_ms",
    "max.in.flight.requests.per.connection": "max_in_flight_requests_per_connection",
    "message.max.bytes": "max_request_size",
    "metadata.max.age.ms": "metadata_max_age_ms",
    "reconnect.backoff.ms": "reconnect_backoff_ms",
    "reconnect.backoff.max.ms": "reconnect_backoff_max_ms",
    "queue.buffering.max.kbytes": "buffer_kbytes",
    "queue.buffering.max.messages": "max_messages",
    "partitioner": "partitioner",
    "security.protocol": "security_protocol",
    "statistics.interval.ms": "statistics_interval_ms",
    "ssl.ca.location": "ssl_cafile",
    "ssl.certificate.location": "ssl_certfile",
    "ssl.key.location": "ssl_keyfile",
    "ssl.key.password": "ssl_password",
    "ssl.ca.pem": "ssl_ca_pem",
    "ssl.certificate.pem": "ssl_cert_pem",
    "ssl.key.pem": "ssl_key_pem",
    "ssl.crl.location": "ssl_crlfile",
    "ssl.cipher.suites": "ssl_ciphers",
    "enable.ssl.certificate.verification": "ssl_verify",
    "ssl.endpoint.identification.algorithm": "ssl_endpoint",
    "sasl.mechanisms": "sasl_mechanism",
    "sasl.username": "sasl_username",
    "sasl.password": "sasl_password",
    "sasl.oauthbearer.method": "oauth_method",
    "sasl.oauthbearer.token.endpoint.url": "oauth_token_endpoint_url",
    "sasl.oauthbearer.client.id": "oauth_client_id",
    "sasl.oauthbearer.client.secret": "oauth_client_secret",
    "sasl.oauthbearer.scope": "oauth_scope",
    "enable.sasl.oauthbearer.unsecure.jwt": "oauth_unsecured",
    "sasl.oauthbearer.config": "oauth_config",
    "transactional.id": "transactional_id",
    "transaction.timeout.ms": "transaction_timeout_ms",
}
# the Sender's settings (SenderConfig) made from librdkafka's: name → the setting's name
SECURITY_KEYS = (
    "security_protocol", "ssl_cafile", "ssl_certfile", "ssl_keyfile", "ssl_password",
    "ssl_ca_pem", "ssl_cert_pem", "ssl_key_pem", "ssl_crlfile", "ssl_ciphers", "ssl_verify",
    "ssl_check_hostname", "sasl_mechanism", "sasl_username", "sasl_password", "oauth_method",
    "oauth_token_endpoint_url", "oauth_client_id", "oauth_client_secret", "oauth_scope",
    "oauth_unsecured_principal", "oauth_unsecured_lifetime_s",
)  # fmt: skip
NOT_SUPPORTED: dict[str, str] = {}
JAVA_ONLY = {
    "ssl.truststore.location": "Java TrustStores are not supported, use `ssl.ca.location` "
    "and a certificate file instead. See "
    "https://github.com/confluentinc/librdkafka/wiki/Using-SSL-with-librdkafka for more "
    "information.",
    "sasl.jaas.config": "Java JAAS configuration is not supported, see "
    "https://github.com/confluentinc/librdkafka/wiki/Using-SASL-with-librdkafka for more "
    "information.",
}
DEFAULTS: dict[str, Any] = {
    "bootstrap_servers": None,
    "client_id": "rdkafka",
    "acks": -1,
    "linger_ms": 5,
    "batch_size": 1_000_000,  # librdkafka's
    "batch_max_records": 10_000,  # librdkafka's batch.num.messages
    "compression_type": "none",
    "compression_level": -1,
    "enable_idempotence": False,
    "transactional_id": None,
    "transaction_timeout_ms": 60_000,
    "delivery_timeout_ms": 300_000,
    "request_timeout_ms": 30_000,
    "retries": INT32_MAX,
    "retry_backoff_ms": 100,
    "retry_backoff_max_ms": 1000,
    "max_in_flight_requests_per_connection": 5,
    "max_request_size": 1_000_000,
    "metadata_max_age_ms": 900_000,
    "metadata_max_idle_ms": 300_000,  # shmkafka.metadata.max.idle.ms
    "reconnect_backoff_ms": 100,
    "reconnect_backoff_max_ms": 10_000,
    "buffer_kbytes": 32 * 1024,
    "max_messages": 100_000,
    "partitioner": "consistent_random",
    "report_only_errors": False,
    "security_protocol": "plaintext",
    "error_cb": None,
    "stats_cb": None,
    "throttle_cb": None,
    "oauth_cb": None,
    "on_delivery": None,
    "logger": None,
    "statistics_interval_ms": 0,
    "pool": None,
    "max_topics": 65536,
    "max_partitions": 1 << 20,
    "max_processes": 4096,
    "sender_log": None,
    "ssl_cafile": None,
    "ssl_certfile": None,
    "ssl_keyfile": None,
    "ssl_password": None,
    "ssl_ca_pem": None,
    "ssl_cert_pem": None,
    "ssl_key_pem": None,
    "ssl_crlfile": None,
    "ssl_ciphers": None,
    "ssl_verify": True,
    "ssl_endpoint": "https",  # librdkafka >= 2.0: the broker's host name is verified
    "ssl_check_hostname": True,
    "sasl_mechanism": "GSSAPI",
    "sasl_username": None,
    "sasl_password": None,
    "oauth_method": "default",
    "oauth_token_endpoint_url": None,
    "oauth_client_id": None,
    "oauth_client_secret": None,
    "oauth_scope": None,
    "oauth_unsecured": False,
    "oauth_config": None,
    "oauth_unsecured_principal": "admin",
    "oauth_unsecured_lifetime_s": 3600,
}


# ----------------------------------------------------------------------------- values


def _int(prop: Property, text: str) -> int:
    if not text:
        raise ConfigError(
            f'Integer configuration property "{prop.name}" cannot be set to empty value'
        )
    match = re.match(r"\s*([+-]?)(0[xX][0-9a-fA-F]+|0[0-7]*|[1-9][0-9]*)", text)
    if match is None:
        if prop.name == "request.required.acks" and text.strip().lower() == "all":
            return -1
        raise ConfigError(f'Invalid value for configuration property "{prop.name}"')
    digits = match.group(2)
    base = 16 if digits[:2].lower() == "0x" else 8 if digits[0] == "0" else 10  # strtol's
    value = int(digits, base)
    value = -value if match.group(1) == "-" else value
    value = (value + 2**31) % 2**32 - 2**31  # strtol's long, stored in an int
    lo, hi = (int(x) for x in prop.values.split(".."))
    if not lo <= value <= hi:
        raise ConfigError(
            f'Configuration property "{prop.name}" value {value} is outside allowed range '
            f"{lo}..{hi}\n"
        )
    return value


def _float(prop: Property, text: str) -> float:
    match = re.match(r"\s*[+-]?(nan|inf(inity)?|(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?)", text, re.I)
    if not text or match is None:
        raise ConfigError(f'Invalid value for configuration property "{prop.name}"')
    value = float(match.group(0))
    lo, hi = (float(x) for x in prop.values.split(".."))
    if not lo <= value <= hi and value == value:  # (nan passes, as in librdkafka)
        raise ConfigError(
            f'Configuration property "{prop.name}" value {value:g} is outside allowed range '
            f"{lo:g}..{hi:g}\n"
        )
    return value


def _bool(prop: Property, text: str) -> bool:
    if not text:
        raise ConfigError(f'Bool configuration property "{prop.name}" cannot be set to empty value')
    if text.lower() in ("true", "t") or text == "1":
        return True
    if text.lower() in ("false", "f") or text == "0":
        return False
    raise ConfigError(f'Expected bool value for "{prop.name}": true or false')


def _enum(prop: Property, text: str) -> str:
    if not text:
        raise ConfigError(f'Configuration property "{prop.name}" cannot be set to empty value')
    value = text.lstrip().lower()
    if value not in prop.values.split(","):
        raise ConfigError(
            f'Invalid value "{text.lstrip()}" for configuration property "{prop.name}"'
        )
    return value


def _string(prop: Property, text: str) -> str | None:
    value = text.lstrip()
    if prop.name == "partitioner" and value not in PARTITIONERS:
        raise ConfigError(
            f'Invalid value for configuration property "partitioner": {value or "(null)"}'
        )
    return value or None  # empty: back to the default


PARSERS: dict[str, Callable[[Property, str], Any]] = {
    "int": _int, "float": _float, "bool": _bool, "enum": _enum, "str": _string,
    "flags": _string, "patlist": _string,
}  # fmt: skip


def _lookup(name: str) -> Property:
    prop = GLOBAL.get(name) or TOPIC.get(name.removeprefix("topic."))
    if prop is None:
        raise ConfigError(f'No such configuration property: "{name.removeprefix("topic.")}"')
    if prop.alias_of:
        table = GLOBAL if prop.scope == "G" else TOPIC
        prop = table[prop.alias_of]
    if prop.kind == "ptr":
        raise ConfigError(f'Property "{name}" must be set through dedicated .._set_..() function')
    return prop


# ----------------------------------------------------------------------------- the dict


def _python_only(conf: dict[str, Any], settings: dict[str, Any]) -> None:
    """The keys confluent-kafka handles itself, before librdkafka sees the rest."""
    for key, kind in (("error_cb", TypeError), ("stats_cb", TypeError),
                      ("oauth_cb", TypeError), ("throttle_cb", ValueError)):  # fmt: skip
        if key in conf:
            value = conf.pop(key)
            if not callable(value):
                raise kind(f"expected {key} property as a callable function")
            settings[key] = value
    if "logger" in conf:
        settings["logger"] = conf.pop("logger")
    if "on_delivery" in conf:
        value = conf.pop("on_delivery")
        if not callable(value):
            raise ConfigError("on_delivery requires a callable object")
        settings["on_delivery"] = value
    if "delivery.report.only.error" in conf:
        value = conf.pop("delivery.report.only.error")
        if not isinstance(value, bool):
            raise TypeError(
                f"Expected delivery.report.only.error to be bool type, not {type(value).__name__}"
            )
        settings["report_only_errors"] = value


def _own(conf: dict[str, Any], settings: dict[str, Any]) -> None:
    for key, setting in (("shmkafka.pool", "pool"), ("shmkafka.sender.log", "sender_log"),
                         ("shmkafka.pool.dir", "pool_dir"),
                         ("shmkafka.pool.durability", "pool_durability")):  # fmt: skip
        if key in conf:
            value = conf.pop(key)
            if not isinstance(value, str):
                raise ConfigError(f'Invalid value for configuration property "{key}"')
            settings[setting] = value
    for key, setting in (("shmkafka.max.topics", "max_topics"),
                         ("shmkafka.max.partitions", "max_partitions"),
                         ("shmkafka.max.processes", "max_processes"),
                         ("shmkafka.pool.flush.ms", "pool_flush_ms"),
                         ("shmkafka.metadata.max.idle.ms", "metadata_max_idle_ms")):  # fmt: skip
        if key in conf:
            settings[setting] = _int(Property(key, "G", "P", "int", f"1..{INT32_MAX}", "", ""),
                                     str(conf.pop(key)))  # fmt: skip


def conf_from(args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any]:
    """confluent-kafka's constructor rules: one dict, then keyword arguments over it."""
    if len(args) > 1:
        raise TypeError("expected tuple containing single dict")
    if not args and not kwargs:
        raise TypeError("expected configuration dict")
    if args and not isinstance(args[0], dict):
        raise TypeError("expected configuration dict")
    return {**(args[0] if args else {}), **kwargs}


def parse(conf: dict[str, Any]) -> tuple[dict[str, Any], list[str], list[str]]:
    """librdkafka properties → (settings with DEFAULTS' names, properties without effect
    here, warnings to log); raises ConfigError, TypeError or ValueError as confluent-kafka."""
    conf = dict(conf)
    if "default.topic.config" in conf:  # deprecated: its keys override the top level's
        topic_conf = conf.pop("default.topic.config")
        conf.update({key: topic_conf[key] for key in topic_conf.keys()})  # noqa: SIM118
    settings = dict(DEFAULTS)
    _python_only(conf, settings)
    _own(conf, settings)
    ignored: list[str] = []
    warnings: list[str] = []
    given: dict[str, Any] = {}
    for key, raw in conf.items():
        name = str(key)
        if name in JAVA_ONLY:
            raise ConfigError(JAVA_ONLY[name])
        prop = _lookup(name)
        value = PARSERS[prop.kind](prop, "" if raw is None else str(raw))
        if prop.name in NOT_SUPPORTED and value is not None:
            raise ConfigError(f"{prop.name}: {NOT_SUPPORTED[prop.name]}")
        given[prop.name] = value
        if prop.usage == "C":
            warnings.append(f"Configuration property {prop.name} is a consumer property and "
                            "will be ignored by this producer instance")  # fmt: skip
        elif prop.name not in SETTINGS:
            ignored.append(name)
    _apply(given, settings, warnings)
    return settings, ignored, warnings


def _apply(given: dict[str, Any], settings: dict[str, Any], warnings: list[str]) -> None:
    for name, setting in SETTINGS.items():
        if name in given and given[name] is not None:
            settings[setting] = given[name]
    _check_across(given, settings, warnings)
    _security(settings)
    linger = settings["linger_ms"]
    settings["linger_ms"] = int(linger) if linger == linger else 0  # (nan: no linger)
    if settings["delivery_timeout_ms"] == 0:
        settings["delivery_timeout_ms"] = INFINITE_TIMEOUT_MS
    if settings["max_messages"] == 0:
        settings["max_messages"] = INT32_MAX
    settings["compression_level"] = _clamped_level(
        settings["compression_type"], settings["compression_level"]
    )


def _security(settings: dict[str, Any]) -> None:
    """TLS and SASL as the Sender's settings; librdkafka's refusals where it has them."""
    protocol = settings["security_protocol"].upper()
    settings["security_protocol"] = protocol
    settings["ssl_check_hostname"] = settings["ssl_endpoint"] == "https"
    mechanism = settings["sasl_mechanism"]
    known = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER")
    if protocol.startswith("SASL_") and mechanism not in known:
        raise _failed(
            f"No provider for SASL mechanism {mechanism}: recompile librdkafka with libsasl2 "
            "or openssl support. Current build options: PLAIN SASL_SCRAM OAUTHBEARER"
        )
    if mechanism == "OAUTHBEARER" and settings["oauth_method"] != "oidc":
        if settings["oauth_cb"] is not None:
            settings["oauth_method"] = "callback"
        elif settings["oauth_unsecured"]:
            settings["oauth_method"] = "unsecured"
            _unsecured_config(settings)
        elif protocol.startswith("SASL_"):
            raise _failed(
                "OAUTHBEARER needs oauth_cb, sasl.oauthbearer.method=oidc, or "
                "enable.sasl.oauthbearer.unsecure.jwt=true"
            )
    if settings["oauth_method"] == "default":
        settings["oauth_method"] = "callback"


def _unsecured_config(settings: dict[str, Any]) -> None:
    """``sasl.oauthbearer.config`` for unsecured JWTs: principal=NAME lifeSeconds=N."""
    for item in (settings["oauth_config"] or "").split():
        key, _, value = item.partition("=")
        if key == "principal":
            settings["oauth_unsecured_principal"] = value
        elif key == "lifeSeconds":
            settings["oauth_unsecured_lifetime_s"] = int(value)
        elif key == "scope":
            settings["oauth_scope"] = value


def _failed(text: str) -> ConfigError:
    return ConfigError(f"Failed to create producer: {text}")


def _check_across(given: dict[str, Any], settings: dict[str, Any], warnings: list[str]) -> None:
    """librdkafka's checks across properties (rd_kafka_conf_finalize)."""
    timeout = settings["delivery_timeout_ms"]
    if timeout and timeout <= settings["linger_ms"]:
        if "queue.buffering.max.ms" in given:
            raise _failed("`message.timeout.ms` must be greater than `linger.ms`")
        settings["linger_ms"] = timeout - 0.1
    if settings["transactional_id"] is not None:
        _check_transactional(given, settings)
    if settings["enable_idempotence"]:
        if "request.required.acks" in given and settings["acks"] != -1:
            raise _failed("`acks` must be set to `all` when `enable.idempotence` is true")
        inflight = given.get("max.in.flight.requests.per.connection")
        if inflight is not None and inflight > 5:
            raise _failed("`max.in.flight` must be set <= 5 when `enable.idempotence` is true")
        if "message.send.max.retries" in given and settings["retries"] < 1:
            raise _failed("`retries` must be set >= 1 when `enable.idempotence` is true")
        if given.get("queue.buffering.backpressure.threshold", 1) > 1:
            raise _failed(
                "`queue.buffering.backpressure.threshold` must be set to 1 when "
                "`enable.idempotence` is true"
            )
        if given.get("queuing.strategy") == "lifo":
            raise _failed(
                "`queuing.strategy` must be set to `fifo` when `enable.idempotence` is true"
            )
        settings["acks"] = -1
    elif given.get("enable.gapless.guarantee"):
        raise _failed("`enable.gapless.guarantee` requires `enable.idempotence` to be enabled")
    if settings["reconnect_backoff_max_ms"] < settings["reconnect_backoff_ms"]:
        raise _failed("`reconnect.backoff.max.ms` must be >= `reconnect.backoff.ms`")
    if given.get("ssl.keystore.location") and not given.get("ssl.keystore.password"):
        raise _failed("`ssl.keystore.password` is mandatory when `ssl.keystore.location` is set")
    if settings["retry_backoff_ms"] > settings["retry_backoff_max_ms"]:
        warnings.append(
            f"Configuration `retry.backoff.ms` with value {settings['retry_backoff_ms']} is "
            f"greater than configuration `retry.backoff.max.ms` with value "
            f"{settings['retry_backoff_max_ms']}. A static backoff with value "
            "`retry.backoff.max.ms` will be applied."
        )
        settings["retry_backoff_ms"] = settings["retry_backoff_max_ms"]
    if settings["bootstrap_servers"] is None:
        warnings.append(
            "No `bootstrap.servers` configured: client will not be able to connect to Kafka cluster"
        )


def _check_transactional(given: dict[str, Any], settings: dict[str, Any]) -> None:
    """librdkafka's: idempotence on unless explicitly off; message.timeout.ms at most
    transaction.timeout.ms (lowered to it when not given)."""
    if not settings["enable_idempotence"]:
        if "enable.idempotence" in given:
            raise _failed("`transactional.id` requires `enable.idempotence=true`")
        settings["enable_idempotence"] = True
    timeout = settings["transaction_timeout_ms"]
    if settings["delivery_timeout_ms"] > timeout:
        if "message.timeout.ms" in given:
            raise _failed("`message.timeout.ms` must be set <= `transaction.timeout.ms`")
        settings["delivery_timeout_ms"] = timeout


def _clamped_level(codec: str, level: int) -> int:
    """librdkafka clamps compression.level per codec when it uses it; -1 is the default."""
    if level == -1 or codec in ("none", "snappy"):
        return -1
    return min(level, {"gzip": 9, "lz4": 12, "zstd": 22}[codec])


def sender_settings(s: dict[str, Any]) -> dict[str, Any]:
    """The Sender's settings (SenderConfig's names) from ``parse``'s."""
    keys = ("client_id", "acks", "linger_ms", "enable_idempotence", "delivery_timeout_ms",
            "request_timeout_ms", "retries", "retry_backoff_ms", "retry_backoff_max_ms",
            "max_in_flight_requests_per_connection", "max_request_size",
            "metadata_max_age_ms", "metadata_max_idle_ms", "reconnect_backoff_ms",
            "reconnect_backoff_max_ms", "compression_type", "transactional_id",
            "transaction_timeout_ms")  # fmt: skip
    out = {k: s[k] for k in keys}
    out["compression_level"] = None if s["compression_level"] == -1 else s["compression_level"]
    out["bootstrap_servers"] = normalize_bootstrap(s["bootstrap_servers"])
    out.update({key: s[key] for key in SECURITY_KEYS})
    # librdkafka keeps records through refused logins until message.timeout.ms: the next
    # login may work (set_sasl_credentials, a password rotated on the broker)
    out["refused_login_fails_records"] = False
    return out


def pool_settings(s: dict[str, Any]) -> dict[str, Any]:
    """The pool's sizes from ``parse``'s settings."""
    return {
        "batch_size": s["batch_size"], "batch_max_records": s["batch_max_records"],
        "buffer_memory": s["buffer_kbytes"] * 1024,
        "max_topics": s["max_topics"], "max_partitions": s["max_partitions"],
        "max_processes": s["max_processes"],
        "pool_dir": s.get("pool_dir", ""), "pool_durability": s.get("pool_durability", "memory"),
        "pool_flush_ms": s.get("pool_flush_ms", 200),
    }  # fmt: skip


def oauth_token_provider(
    callback: Callable[..., Any], config: str | None
) -> Callable[[], tuple[str, int]]:
    """confluent-kafka's ``oauth_cb(sasl.oauthbearer.config)``: (token, expiry in epoch
    seconds[, principal, extensions]) as the token board's (token, expiry ms)."""

    def provide() -> tuple[str, int]:
        answer = callback(config)
        return str(answer[0]), int(float(answer[1]) * 1000)

    return provide
