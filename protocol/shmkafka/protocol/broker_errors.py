"""The broker errors the producer's APIs can meet (Produce, Metadata, InitProducerId,
ApiVersions, SASL, and Fetch/ListOffsets for broker_stub's readers), one class per code,
and the lookup from a response's code to its class.

Rules:
- Every code of ``ErrorCode`` has exactly one class: here, or in ``other_api_errors`` (the
  codes of consumer groups, transactions, admin and the cluster's internal APIs). Each is
  a class statement whose docstring is Kafka's description; its base says whether it is
  retriable (errors.py).
- ``for_code`` never fails: an unknown code gives ``UnknownError`` carrying that code.
"""

from __future__ import annotations

from shmkafka.protocol import other_api_errors  # noqa: F401  (its classes register by code)
from shmkafka.protocol.error_codes import ErrorCode
from shmkafka.protocol.errors import (
    BROKER_ERRORS_BY_CODE,
    AuthorizationError,
    BrokerResponseError,
    InvalidMetadataBrokerError,
    RetriableBrokerError,
)


def for_code(code: int) -> type[BrokerResponseError]:
    """The class for a broker error code; unknown codes map to UnknownError."""
    return BROKER_ERRORS_BY_CODE.get(code, UnknownError)


def error_for(code: int, message: str | None = None) -> BrokerResponseError | None:
    """An exception instance for a response's error code, or None for NONE (0)."""
    if code == ErrorCode.NONE:
        return None
    return for_code(code)(message, code=code)


class UnknownError(BrokerResponseError, code=ErrorCode.UNKNOWN_SERVER_ERROR):
    """The server experienced an unexpected error when processing the request."""


class OffsetOutOfRangeError(BrokerResponseError, code=ErrorCode.OFFSET_OUT_OF_RANGE):
    """The requested offset is out of range."""


class CorruptRecordError(RetriableBrokerError, code=ErrorCode.CORRUPT_MESSAGE):
    """The message failed its CRC or is otherwise corrupt."""


class UnknownTopicOrPartitionError(
    InvalidMetadataBrokerError, code=ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
):
    """This server does not host this partition."""


class InvalidFetchRequestError(BrokerResponseError, code=ErrorCode.INVALID_FETCH_SIZE):
    """The requested fetch size is invalid."""


class LeaderNotAvailableError(InvalidMetadataBrokerError, code=ErrorCode.LEADER_NOT_AVAILABLE):
    """There is no leader for this partition."""


class NotLeaderForPartitionError(InvalidMetadataBrokerError, code=ErrorCode.NOT_LEADER_OR_FOLLOWER):
    """This server is not the leader or a follower."""


class RequestTimedOutError(RetriableBrokerError, code=ErrorCode.REQUEST_TIMED_OUT):
    """The request timed out."""


class BrokerNotAvailableError(BrokerResponseError, code=ErrorCode.BROKER_NOT_AVAILABLE):
    """The broker is not available."""


class ReplicaNotAvailableError(InvalidMetadataBrokerError, code=ErrorCode.REPLICA_NOT_AVAILABLE):
    """The replica is not available."""


class MessageSizeTooLargeError(BrokerResponseError, code=ErrorCode.MESSAGE_TOO_LARGE):
    """The request is larger than the server accepts."""


class NetworkExceptionError(InvalidMetadataBrokerError, code=ErrorCode.NETWORK_EXCEPTION):
    """The server disconnected before a response."""


class InvalidTopicError(BrokerResponseError, code=ErrorCode.INVALID_TOPIC_EXCEPTION):
    """The topic name is invalid."""


class RecordListTooLargeError(BrokerResponseError, code=ErrorCode.RECORD_LIST_TOO_LARGE):
    """The batch exceeds the maximum segment size."""


class NotEnoughReplicasError(RetriableBrokerError, code=ErrorCode.NOT_ENOUGH_REPLICAS):
    """Fewer in-sync replicas than required."""


class NotEnoughReplicasAfterAppendError(
    RetriableBrokerError, code=ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND
):
    """Written with too few replicas."""


class InvalidRequiredAcksError(BrokerResponseError, code=ErrorCode.INVALID_REQUIRED_ACKS):
    """The required acks value is invalid."""


class TopicAuthorizationFailedError(AuthorizationError, code=ErrorCode.TOPIC_AUTHORIZATION_FAILED):
    """Topic authorization failed."""


class ClusterAuthorizationFailedError(
    AuthorizationError, code=ErrorCode.CLUSTER_AUTHORIZATION_FAILED
):
    """Cluster authorization failed."""


class InvalidTimestampError(BrokerResponseError, code=ErrorCode.INVALID_TIMESTAMP):
    """The timestamp is out of the acceptable range."""


class UnsupportedSaslMechanismError(BrokerResponseError, code=ErrorCode.UNSUPPORTED_SASL_MECHANISM):
    """The SASL mechanism is not supported."""


class IllegalSaslStateError(BrokerResponseError, code=ErrorCode.ILLEGAL_SASL_STATE):
    """The request is not valid in this SASL state."""


class UnsupportedVersionError(BrokerResponseError, code=ErrorCode.UNSUPPORTED_VERSION):
    """The version of the API is not supported."""


class InvalidRequestError(BrokerResponseError, code=ErrorCode.INVALID_REQUEST):
    """The request is malformed or not permitted."""


class UnsupportedForMessageFormatError(
    BrokerResponseError, code=ErrorCode.UNSUPPORTED_FOR_MESSAGE_FORMAT
):
    """Not supported by the message format."""


class OutOfOrderSequenceNumberError(
    BrokerResponseError, code=ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
):
    """The broker saw a sequence gap."""


class DuplicateSequenceNumberError(BrokerResponseError, code=ErrorCode.DUPLICATE_SEQUENCE_NUMBER):
    """The broker already has this batch."""


class InvalidProducerEpochError(BrokerResponseError, code=ErrorCode.INVALID_PRODUCER_EPOCH):
    """The producer epoch is fenced."""


class SecurityDisabledError(BrokerResponseError, code=ErrorCode.SECURITY_DISABLED):
    """Security features are disabled."""


class KafkaStorageError(InvalidMetadataBrokerError, code=ErrorCode.KAFKA_STORAGE_ERROR):
    """Disk error when accessing the log."""


class SaslAuthenticationFailedError(BrokerResponseError, code=ErrorCode.SASL_AUTHENTICATION_FAILED):
    """SASL authentication failed."""


class UnknownProducerIdError(BrokerResponseError, code=ErrorCode.UNKNOWN_PRODUCER_ID):
    """The broker has no state for this producer id."""


class ListenerNotFoundError(InvalidMetadataBrokerError, code=ErrorCode.LISTENER_NOT_FOUND):
    """No matching listener on the leader broker."""


class FencedLeaderEpochError(InvalidMetadataBrokerError, code=ErrorCode.FENCED_LEADER_EPOCH):
    """The leader epoch is older than the broker's."""


class UnknownLeaderEpochError(RetriableBrokerError, code=ErrorCode.UNKNOWN_LEADER_EPOCH):
    """The leader epoch is newer than the broker's."""


class UnsupportedCompressionTypeError(
    BrokerResponseError, code=ErrorCode.UNSUPPORTED_COMPRESSION_TYPE
):
    """The compression is not supported."""


class OffsetNotAvailableError(RetriableBrokerError, code=ErrorCode.OFFSET_NOT_AVAILABLE):
    """The leader's high watermark is behind."""


class EligibleLeadersNotAvailableError(
    InvalidMetadataBrokerError, code=ErrorCode.ELIGIBLE_LEADERS_NOT_AVAILABLE
):
    """No eligible leader replicas."""


class InvalidRecordError(BrokerResponseError, code=ErrorCode.INVALID_RECORD):
    """The record failed the broker's validation."""


class ThrottlingQuotaExceededError(RetriableBrokerError, code=ErrorCode.THROTTLING_QUOTA_EXCEEDED):
    """The throttling quota was exceeded."""


class ProducerFencedError(BrokerResponseError, code=ErrorCode.PRODUCER_FENCED):
    """A newer producer with the same id exists."""


class UnknownTopicIdError(InvalidMetadataBrokerError, code=ErrorCode.UNKNOWN_TOPIC_ID):
    """This server does not host this topic id."""


class InconsistentTopicIdError(InvalidMetadataBrokerError, code=ErrorCode.INCONSISTENT_TOPIC_ID):
    """The topic id does not match the log's."""


class RebootstrapRequiredError(BrokerResponseError, code=ErrorCode.REBOOTSTRAP_REQUIRED):
    """The client must rebootstrap."""


# Kafka's own (Java) names of the classes that take kafka-python's names above.
UnknownServerError = UnknownError
CorruptMessageError = CorruptRecordError
InvalidFetchSizeError = InvalidFetchRequestError
NotLeaderOrFollowerError = NotLeaderForPartitionError
MessageTooLargeError = MessageSizeTooLargeError
NetworkException = NetworkExceptionError
InvalidTopicException = InvalidTopicError
