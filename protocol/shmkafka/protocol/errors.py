"""The KafkaError tree: local protocol errors and every broker error code, as types.

Rules:
- Retriability is a type, as in the Java client: ``RetriableError`` and its subclass
  ``InvalidMetadataError`` (retry after a metadata refresh). Fatal errors derive from
  ``KafkaError`` only. ``error.retriable`` / ``error.invalid_metadata`` mirror the types.
- Broker error codes are named once, in ``error_codes.ErrorCode``; each has one class, a
  real class statement in ``broker_errors`` (``for_code`` maps a response's code to it).
  Its base here says what the Java client's says: ``RetriableBrokerError``,
  ``InvalidMetadataBrokerError`` (retry after a metadata refresh), or fatal.
- Errors raised while decoding name *what* was being decoded and *where* (byte offset).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, ClassVar

from shmkafka.protocol.error_codes import ErrorCode


class KafkaError(Exception):
    """Root of every error shmkafka raises on purpose. ``str()`` is kafka-python's:
    ``"ClassName: message"``.

    ``twin_class`` is a hook for the drop-in APIs (facades/kafka_python/peer_errors.py): when
    set, every instance is made of the class it returns, a subclass of both the class asked
    for and a peer library's class, so that ``except kafka.errors.X`` catches our errors.
    Nothing sets it in the Sender, which never imports a peer library; a sidecar's process
    imports the facades for their settings, and its Sender unsets it while it serves
    (sender/service.py)."""

    retriable: ClassVar[bool] = False
    invalid_metadata: ClassVar[bool] = False
    twin_class: ClassVar[Callable[[type[KafkaError]], type[KafkaError]] | None] = None

    def __new__(cls, *args: Any, **kwargs: Any) -> KafkaError:
        twin = KafkaError.twin_class
        return super().__new__(cls if twin is None else twin(cls), *args)

    def __reduce__(self) -> tuple[Any, ...]:
        # A twin class is made at run time and has no importable name: pickle as the class
        # asked for (the receiving process makes its own twin).
        cls = type(self)
        cls = cls.__dict__.get("twin_of", cls)
        return (cls, self.args, self.__dict__ or None)

    def __str__(self) -> str:
        if not self.args:
            return type(self).__name__
        # Exception's own, not super(): a twin's next class is kafka-python's, which adds
        # the class name again
        return f"{type(self).__name__}: {Exception.__str__(self)}"


class RetriableError(KafkaError):
    """The operation may succeed if retried."""

    retriable = True


class InvalidMetadataError(RetriableError):
    """Retriable once the client has refreshed its metadata."""

    invalid_metadata = True


# --------------------------------------------------------------------------- local errors


class ProtocolError(KafkaError):
    """Bytes that do not follow the Kafka protocol."""


class DecodeError(ProtocolError):
    """A structure could not be decoded: says what, and at which byte offset."""

    def __init__(self, what: str, offset: int, reason: str) -> None:
        super().__init__(f"cannot decode {what} at byte {offset}: {reason}")
        self.what = what
        self.offset = offset
        self.reason = reason


class InvalidFrameSizeError(ProtocolError):
    """A frame's size prefix is negative or above the configured limit."""

    def __init__(self, size: int, limit: int) -> None:
        reason = "negative" if size < 0 else f"above the limit of {limit} bytes"
        super().__init__(f"invalid frame size {size}: {reason}")
        self.size = size
        self.limit = limit


class TruncatedFrameError(ProtocolError):
    """The stream ended in the middle of a frame."""


class CorrelationIdError(ProtocolError):
    """A response arrived whose correlation id matches no request in flight."""


class CorruptRecordBatchError(DecodeError):
    """A RecordBatch failed its CRC-32C, magic or count checks."""


class UnsupportedCompressionError(DecodeError):
    """The compression bits of a batch name no codec we know."""


class UnsupportedApiVersionError(ProtocolError):
    """No version of an API is supported by both the client and the broker."""


class EncodeError(ProtocolError, ValueError):
    """A value cannot be encoded (out of range, wrong type, field absent in that version)."""


# --------------------------------------------------------------------------- broker errors

BROKER_ERRORS_BY_CODE: dict[int, type[BrokerResponseError]] = {}
BROKER_ERRORS_BY_NAME: dict[str, type[BrokerResponseError]] = {}


class BrokerResponseError(KafkaError):
    """An error code returned by a broker. ``code`` and ``name`` are Kafka's; ``errno``
    and ``message`` are kafka-python's names for them. ``str()`` is kafka-python's:
    ``"[Error 10] MessageSizeTooLargeError: the detail"``."""

    code: ClassVar[int] = ErrorCode.UNKNOWN_SERVER_ERROR
    name: ClassVar[str] = "UNKNOWN_SERVER_ERROR"
    description: ClassVar[str] = ""
    errno: ClassVar[int] = ErrorCode.UNKNOWN_SERVER_ERROR
    message: ClassVar[str] = "UNKNOWN_SERVER_ERROR"

    def __init_subclass__(cls, code: ErrorCode | None = None, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if code is None:
            return
        cls.code, cls.name, cls.description = int(code), code.name, cls.__doc__ or ""
        cls.errno, cls.message = cls.code, cls.name
        assert code not in BROKER_ERRORS_BY_CODE, f"two classes for {code.name}"
        BROKER_ERRORS_BY_CODE[code] = cls
        BROKER_ERRORS_BY_NAME[code.name] = cls

    def __init__(self, message: str | None = None, *, code: int | None = None) -> None:
        self.error_code = self.code if code is None else code
        if message:
            super().__init__(message)
        else:
            super().__init__()

    def __str__(self) -> str:
        return f"[Error {self.error_code}] {KafkaError.__str__(self)}"


class RetriableBrokerError(BrokerResponseError, RetriableError):
    """A broker error after which the request may succeed if sent again."""


class InvalidMetadataBrokerError(BrokerResponseError, InvalidMetadataError):
    """A broker error after which the request may succeed once metadata is refreshed."""


class AuthorizationError(BrokerResponseError):
    """The principal is not allowed to do this (the *_AUTHORIZATION_FAILED codes)."""
