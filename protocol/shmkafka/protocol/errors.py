"""The KafkaError tree: local protocol errors and every broker error code, as types.

Rules:
- Retriability is a type, as in the Java client: ``RetriableError`` and its subclass
  ``InvalidMetadataError`` (retry after a metadata refresh). Fatal errors derive from
  ``KafkaError`` only. ``error.retriable`` / ``error.invalid_metadata`` mirror the types.
- Broker error codes map to classes through one table (``_BROKER_ERRORS``); ``for_code``
  never fails: an unknown code gives a ``BrokerResponseError`` carrying that code.
- Errors raised while decoding name *what* was being decoded and *where* (byte offset).
"""

from __future__ import annotations

from typing import ClassVar


class KafkaError(Exception):
    """Root of every error shmkafka raises on purpose."""

    retriable: ClassVar[bool] = False
    invalid_metadata: ClassVar[bool] = False


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


class BrokerResponseError(KafkaError):
    """An error code returned by a broker. ``code`` and ``name`` are Kafka's."""

    code: ClassVar[int] = -1
    name: ClassVar[str] = "UNKNOWN_SERVER_ERROR"
    description: ClassVar[str] = ""

    def __init__(self, message: str | None = None, *, code: int | None = None) -> None:
        self.error_code = self.code if code is None else code
        text = f"[Error {self.error_code}] {self.name}"
        if message:
            text += f": {message}"
        elif self.description:
            text += f": {self.description}"
        super().__init__(text)


class UnknownServerError(BrokerResponseError):
    code = -1
    name = "UNKNOWN_SERVER_ERROR"
    description = "The server experienced an unexpected error when processing the request."


# (code, NAME, retriable, invalid_metadata, description). Taken from Kafka's Errors.java
# (code and name) with the Java exception's RetriableException / InvalidMetadataException
# ancestry deciding the two flags.
_BROKER_ERRORS: tuple[tuple[int, str, bool, bool, str], ...] = (
    (1, "OFFSET_OUT_OF_RANGE", False, False, "The requested offset is out of range."),
    (2, "CORRUPT_MESSAGE", True, False, "The message failed its CRC or is otherwise corrupt."),
    (3, "UNKNOWN_TOPIC_OR_PARTITION", True, True, "This server does not host this partition."),
    (4, "INVALID_FETCH_SIZE", False, False, "The requested fetch size is invalid."),
    (5, "LEADER_NOT_AVAILABLE", True, True, "There is no leader for this partition."),
    (6, "NOT_LEADER_OR_FOLLOWER", True, True, "This server is not the leader or a follower."),
    (7, "REQUEST_TIMED_OUT", True, False, "The request timed out."),
    (8, "BROKER_NOT_AVAILABLE", False, False, "The broker is not available."),
    (9, "REPLICA_NOT_AVAILABLE", True, True, "The replica is not available."),
    (10, "MESSAGE_TOO_LARGE", False, False, "The request is larger than the server accepts."),
    (11, "STALE_CONTROLLER_EPOCH", False, False, "The controller moved to another broker."),
    (12, "OFFSET_METADATA_TOO_LARGE", False, False, "The offset metadata is too large."),
    (13, "NETWORK_EXCEPTION", True, True, "The server disconnected before a response."),
    (14, "COORDINATOR_LOAD_IN_PROGRESS", True, False, "The coordinator is loading."),
    (15, "COORDINATOR_NOT_AVAILABLE", True, False, "The coordinator is not available."),
    (16, "NOT_COORDINATOR", True, False, "This is not the correct coordinator."),
    (17, "INVALID_TOPIC_EXCEPTION", False, False, "The topic name is invalid."),
    (18, "RECORD_LIST_TOO_LARGE", False, False, "The batch exceeds the maximum segment size."),
    (19, "NOT_ENOUGH_REPLICAS", True, False, "Fewer in-sync replicas than required."),
    (20, "NOT_ENOUGH_REPLICAS_AFTER_APPEND", True, False, "Written with too few replicas."),
    (21, "INVALID_REQUIRED_ACKS", False, False, "The required acks value is invalid."),
    (22, "ILLEGAL_GENERATION", False, False, "The generation id is not the current one."),
    (23, "INCONSISTENT_GROUP_PROTOCOL", False, False, "The group protocol is inconsistent."),
    (24, "INVALID_GROUP_ID", False, False, "The group id is invalid."),
    (25, "UNKNOWN_MEMBER_ID", False, False, "The member id is not in the current generation."),
    (26, "INVALID_SESSION_TIMEOUT", False, False, "The session timeout is out of range."),
    (27, "REBALANCE_IN_PROGRESS", False, False, "The group is rebalancing."),
    (28, "INVALID_COMMIT_OFFSET_SIZE", False, False, "The committing offset data is too large."),
    (29, "TOPIC_AUTHORIZATION_FAILED", False, False, "Topic authorization failed."),
    (30, "GROUP_AUTHORIZATION_FAILED", False, False, "Group authorization failed."),
    (31, "CLUSTER_AUTHORIZATION_FAILED", False, False, "Cluster authorization failed."),
    (32, "INVALID_TIMESTAMP", False, False, "The timestamp is out of the acceptable range."),
    (33, "UNSUPPORTED_SASL_MECHANISM", False, False, "The SASL mechanism is not supported."),
    (34, "ILLEGAL_SASL_STATE", False, False, "The request is not valid in this SASL state."),
    (35, "UNSUPPORTED_VERSION", False, False, "The version of the API is not supported."),
    (36, "TOPIC_ALREADY_EXISTS", False, False, "The topic already exists."),
    (37, "INVALID_PARTITIONS", False, False, "The number of partitions is invalid."),
    (38, "INVALID_REPLICATION_FACTOR", False, False, "The replication factor is invalid."),
    (39, "INVALID_REPLICA_ASSIGNMENT", False, False, "The replica assignment is invalid."),
    (40, "INVALID_CONFIG", False, False, "The configuration is invalid."),
    (41, "NOT_CONTROLLER", True, False, "This is not the correct controller."),
    (42, "INVALID_REQUEST", False, False, "The request is malformed or not permitted."),
    (43, "UNSUPPORTED_FOR_MESSAGE_FORMAT", False, False, "Not supported by the message format."),
    (44, "POLICY_VIOLATION", False, False, "The request violates a configured policy."),
    (45, "OUT_OF_ORDER_SEQUENCE_NUMBER", False, False, "The broker saw a sequence gap."),
    (46, "DUPLICATE_SEQUENCE_NUMBER", False, False, "The broker already has this batch."),
    (47, "INVALID_PRODUCER_EPOCH", False, False, "The producer epoch is fenced."),
    (48, "INVALID_TXN_STATE", False, False, "The transaction state is invalid."),
    (49, "INVALID_PRODUCER_ID_MAPPING", False, False, "The producer id mapping is invalid."),
    (50, "INVALID_TRANSACTION_TIMEOUT", False, False, "The transaction timeout is invalid."),
    (51, "CONCURRENT_TRANSACTIONS", True, False, "Another transaction is in progress."),
    (52, "TRANSACTION_COORDINATOR_FENCED", False, False, "The coordinator is fenced."),
    (53, "TRANSACTIONAL_ID_AUTHORIZATION_FAILED", False, False, "Transactional id denied."),
    (54, "SECURITY_DISABLED", False, False, "Security features are disabled."),
    (55, "OPERATION_NOT_ATTEMPTED", False, False, "The operation was not attempted."),
    (56, "KAFKA_STORAGE_ERROR", True, True, "Disk error when accessing the log."),
    (57, "LOG_DIR_NOT_FOUND", False, False, "The log directory does not exist."),
    (58, "SASL_AUTHENTICATION_FAILED", False, False, "SASL authentication failed."),
    (59, "UNKNOWN_PRODUCER_ID", False, False, "The broker has no state for this producer id."),
    (60, "REASSIGNMENT_IN_PROGRESS", False, False, "A partition reassignment is in progress."),
    (61, "DELEGATION_TOKEN_AUTH_DISABLED", False, False, "Delegation tokens are disabled."),
    (62, "DELEGATION_TOKEN_NOT_FOUND", False, False, "The delegation token was not found."),
    (63, "DELEGATION_TOKEN_OWNER_MISMATCH", False, False, "Not the delegation token's owner."),
    (64, "DELEGATION_TOKEN_REQUEST_NOT_ALLOWED", False, False, "Token request not allowed."),
    (65, "DELEGATION_TOKEN_AUTHORIZATION_FAILED", False, False, "Token authorization failed."),
    (66, "DELEGATION_TOKEN_EXPIRED", False, False, "The delegation token has expired."),
    (67, "INVALID_PRINCIPAL_TYPE", False, False, "The principal type is not supported."),
    (68, "NON_EMPTY_GROUP", False, False, "The group is not empty."),
    (69, "GROUP_ID_NOT_FOUND", False, False, "The group id does not exist."),
    (70, "FETCH_SESSION_ID_NOT_FOUND", True, False, "The fetch session id was not found."),
    (71, "INVALID_FETCH_SESSION_EPOCH", True, False, "The fetch session epoch is invalid."),
    (72, "LISTENER_NOT_FOUND", True, True, "No matching listener on the leader broker."),
    (73, "TOPIC_DELETION_DISABLED", False, False, "Topic deletion is disabled."),
    (74, "FENCED_LEADER_EPOCH", True, True, "The leader epoch is older than the broker's."),
    (75, "UNKNOWN_LEADER_EPOCH", True, False, "The leader epoch is newer than the broker's."),
    (76, "UNSUPPORTED_COMPRESSION_TYPE", False, False, "The compression is not supported."),
    (77, "STALE_BROKER_EPOCH", False, False, "The broker epoch has changed."),
    (78, "OFFSET_NOT_AVAILABLE", True, False, "The leader's high watermark is behind."),
    (79, "MEMBER_ID_REQUIRED", False, False, "The group member needs a member id."),
    (80, "PREFERRED_LEADER_NOT_AVAILABLE", True, True, "The preferred leader is unavailable."),
    (81, "GROUP_MAX_SIZE_REACHED", False, False, "The group reached its maximum size."),
    (82, "FENCED_INSTANCE_ID", False, False, "The static member was fenced."),
    (83, "ELIGIBLE_LEADERS_NOT_AVAILABLE", True, True, "No eligible leader replicas."),
    (84, "ELECTION_NOT_NEEDED", True, True, "The leader election is not needed."),
    (85, "NO_REASSIGNMENT_IN_PROGRESS", False, False, "No reassignment is in progress."),
    (86, "GROUP_SUBSCRIBED_TO_TOPIC", False, False, "The group is subscribed to the topic."),
    (87, "INVALID_RECORD", False, False, "The record failed the broker's validation."),
    (88, "UNSTABLE_OFFSET_COMMIT", True, False, "There are unstable offsets to resolve."),
    (89, "THROTTLING_QUOTA_EXCEEDED", True, False, "The throttling quota was exceeded."),
    (90, "PRODUCER_FENCED", False, False, "A newer producer with the same id exists."),
    (91, "RESOURCE_NOT_FOUND", False, False, "The resource does not exist."),
    (92, "DUPLICATE_RESOURCE", False, False, "The resource is duplicated."),
    (93, "UNACCEPTABLE_CREDENTIAL", False, False, "The credential is unacceptable."),
    (94, "INCONSISTENT_VOTER_SET", False, False, "The voter set is inconsistent."),
    (95, "INVALID_UPDATE_VERSION", False, False, "The update version is invalid."),
    (96, "FEATURE_UPDATE_FAILED", False, False, "The feature update failed."),
    (97, "PRINCIPAL_DESERIALIZATION_FAILURE", False, False, "Principal deserialization failed."),
    (98, "SNAPSHOT_NOT_FOUND", False, False, "The snapshot was not found."),
    (99, "POSITION_OUT_OF_RANGE", False, False, "The position is out of range."),
    (100, "UNKNOWN_TOPIC_ID", True, True, "This server does not host this topic id."),
    (101, "DUPLICATE_BROKER_REGISTRATION", False, False, "The broker id is already registered."),
    (102, "BROKER_ID_NOT_REGISTERED", False, False, "The broker id is not registered."),
    (103, "INCONSISTENT_TOPIC_ID", True, True, "The topic id does not match the log's."),
    (104, "INCONSISTENT_CLUSTER_ID", False, False, "The cluster id does not match."),
    (105, "TRANSACTIONAL_ID_NOT_FOUND", False, False, "The transactional id was not found."),
    (106, "FETCH_SESSION_TOPIC_ID_ERROR", True, False, "The fetch session topic ids changed."),
    (107, "INELIGIBLE_REPLICA", False, False, "The replica is not eligible for the ISR."),
    (108, "NEW_LEADER_ELECTED", False, False, "A new leader was elected."),
    (109, "OFFSET_MOVED_TO_TIERED_STORAGE", False, False, "The offset is in tiered storage."),
    (110, "FENCED_MEMBER_EPOCH", False, False, "The member epoch is fenced."),
    (111, "UNRELEASED_INSTANCE_ID", False, False, "The instance id is still in use."),
    (112, "UNSUPPORTED_ASSIGNOR", False, False, "The assignor is not supported."),
    (113, "STALE_MEMBER_EPOCH", False, False, "The member epoch is stale."),
    (114, "MISMATCHED_ENDPOINT_TYPE", False, False, "The endpoint type does not match."),
    (115, "UNSUPPORTED_ENDPOINT_TYPE", False, False, "The endpoint type is not supported."),
    (116, "UNKNOWN_CONTROLLER_ID", False, False, "The controller id is unknown."),
    (117, "UNKNOWN_SUBSCRIPTION_ID", False, False, "The subscription id is unknown."),
    (118, "TELEMETRY_TOO_LARGE", False, False, "The telemetry payload is too large."),
    (119, "INVALID_REGISTRATION", False, False, "The registration is invalid."),
    (120, "TRANSACTION_ABORTABLE", False, False, "The transaction must be aborted."),
    (121, "INVALID_RECORD_STATE", False, False, "The record state is invalid."),
    (122, "SHARE_SESSION_NOT_FOUND", True, False, "The share session was not found."),
    (123, "INVALID_SHARE_SESSION_EPOCH", True, False, "The share session epoch is invalid."),
    (124, "FENCED_STATE_EPOCH", False, False, "The share coordinator state epoch is fenced."),
    (125, "INVALID_VOTER_KEY", False, False, "The voter key is invalid."),
    (126, "DUPLICATE_VOTER", False, False, "The voter is already in the voter set."),
    (127, "VOTER_NOT_FOUND", False, False, "The voter is not in the voter set."),
    (128, "INVALID_REGULAR_EXPRESSION", False, False, "The regular expression is invalid."),
    (129, "REBOOTSTRAP_REQUIRED", False, False, "The client must rebootstrap."),
    (130, "STREAMS_INVALID_TOPOLOGY", False, False, "The streams topology is invalid."),
    (131, "STREAMS_INVALID_TOPOLOGY_EPOCH", False, False, "The topology epoch is invalid."),
    (132, "STREAMS_TOPOLOGY_FENCED", False, False, "The streams topology is fenced."),
    (133, "SHARE_SESSION_LIMIT_REACHED", True, False, "The share session limit is reached."),
)


def _class_name(name: str) -> str:
    words = "".join(word.capitalize() for word in name.lower().split("_"))
    return words if words.endswith(("Error", "Exception")) else words + "Error"


def _build_classes() -> dict[int, type[BrokerResponseError]]:
    table: dict[int, type[BrokerResponseError]] = {-1: UnknownServerError}
    for code, name, retriable, invalid_metadata, description in _BROKER_ERRORS:
        base: type[KafkaError] = (
            InvalidMetadataError
            if invalid_metadata
            else RetriableError
            if retriable
            else KafkaError
        )
        bases = (BrokerResponseError,) if base is KafkaError else (BrokerResponseError, base)
        cls = type(
            _class_name(name),
            bases,
            {"code": code, "name": name, "description": description, "__module__": __name__},
        )
        table[code] = cls
        globals()[cls.__name__] = cls
    return table


BROKER_ERRORS_BY_CODE: dict[int, type[BrokerResponseError]] = _build_classes()
BROKER_ERRORS_BY_NAME: dict[str, type[BrokerResponseError]] = {
    cls.name: cls for cls in BROKER_ERRORS_BY_CODE.values()
}


def for_code(code: int) -> type[BrokerResponseError]:
    """The class for a broker error code; unknown codes map to UnknownServerError."""
    return BROKER_ERRORS_BY_CODE.get(code, UnknownServerError)


def error_for(code: int, message: str | None = None) -> BrokerResponseError | None:
    """An exception instance for a response's error code, or None for NONE (0)."""
    if code == 0:
        return None
    return for_code(code)(message, code=code)


def __getattr__(name: str) -> type[BrokerResponseError]:
    # Classes are built from the table; this makes them reachable for mypy users too.
    for cls in BROKER_ERRORS_BY_CODE.values():
        if cls.__name__ == name:
            return cls
    raise AttributeError(name)
