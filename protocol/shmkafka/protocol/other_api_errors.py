"""The broker errors of the APIs the producer does not use: consumer groups, transactions,
admin requests, and the cluster's internal APIs (KRaft, share groups, streams). One class
per code, as in ``broker_errors``, which finds them by code (``for_code``)."""

from __future__ import annotations

from shmkafka.protocol.error_codes import ErrorCode
from shmkafka.protocol.errors import (
    AuthorizationError,
    BrokerResponseError,
    InvalidMetadataBrokerError,
    RetriableBrokerError,
)


class StaleControllerEpochError(BrokerResponseError, code=ErrorCode.STALE_CONTROLLER_EPOCH):
    """The controller moved to another broker."""


class OffsetMetadataTooLargeError(BrokerResponseError, code=ErrorCode.OFFSET_METADATA_TOO_LARGE):
    """The offset metadata is too large."""


class CoordinatorLoadInProgressError(
    RetriableBrokerError, code=ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
):
    """The coordinator is loading."""


class CoordinatorNotAvailableError(RetriableBrokerError, code=ErrorCode.COORDINATOR_NOT_AVAILABLE):
    """The coordinator is not available."""


class NotCoordinatorError(RetriableBrokerError, code=ErrorCode.NOT_COORDINATOR):
    """This is not the correct coordinator."""


class IllegalGenerationError(BrokerResponseError, code=ErrorCode.ILLEGAL_GENERATION):
    """The generation id is not the current one."""


class InconsistentGroupProtocolError(
    BrokerResponseError, code=ErrorCode.INCONSISTENT_GROUP_PROTOCOL
):
    """The group protocol is inconsistent."""


class InvalidGroupIdError(BrokerResponseError, code=ErrorCode.INVALID_GROUP_ID):
    """The group id is invalid."""


class UnknownMemberIdError(BrokerResponseError, code=ErrorCode.UNKNOWN_MEMBER_ID):
    """The member id is not in the current generation."""


class InvalidSessionTimeoutError(BrokerResponseError, code=ErrorCode.INVALID_SESSION_TIMEOUT):
    """The session timeout is out of range."""


class RebalanceInProgressError(BrokerResponseError, code=ErrorCode.REBALANCE_IN_PROGRESS):
    """The group is rebalancing."""


class InvalidCommitOffsetSizeError(BrokerResponseError, code=ErrorCode.INVALID_COMMIT_OFFSET_SIZE):
    """The committing offset data is too large."""


class GroupAuthorizationFailedError(AuthorizationError, code=ErrorCode.GROUP_AUTHORIZATION_FAILED):
    """Group authorization failed."""


class TopicAlreadyExistsError(BrokerResponseError, code=ErrorCode.TOPIC_ALREADY_EXISTS):
    """The topic already exists."""


class InvalidPartitionsError(BrokerResponseError, code=ErrorCode.INVALID_PARTITIONS):
    """The number of partitions is invalid."""


class InvalidReplicationFactorError(BrokerResponseError, code=ErrorCode.INVALID_REPLICATION_FACTOR):
    """The replication factor is invalid."""


class InvalidReplicationAssignmentError(
    BrokerResponseError, code=ErrorCode.INVALID_REPLICA_ASSIGNMENT
):
    """The replica assignment is invalid."""


class InvalidConfigurationError(BrokerResponseError, code=ErrorCode.INVALID_CONFIG):
    """The configuration is invalid."""


class NotControllerError(RetriableBrokerError, code=ErrorCode.NOT_CONTROLLER):
    """This is not the correct controller."""


class PolicyViolationError(BrokerResponseError, code=ErrorCode.POLICY_VIOLATION):
    """The request violates a configured policy."""


class InvalidTxnStateError(BrokerResponseError, code=ErrorCode.INVALID_TXN_STATE):
    """The transaction state is invalid."""


class InvalidProducerIdMappingError(
    BrokerResponseError, code=ErrorCode.INVALID_PRODUCER_ID_MAPPING
):
    """The producer id mapping is invalid."""


class InvalidTransactionTimeoutError(
    BrokerResponseError, code=ErrorCode.INVALID_TRANSACTION_TIMEOUT
):
    """The transaction timeout is invalid."""


class ConcurrentTransactionsError(RetriableBrokerError, code=ErrorCode.CONCURRENT_TRANSACTIONS):
    """Another transaction is in progress."""


class TransactionCoordinatorFencedError(
    BrokerResponseError, code=ErrorCode.TRANSACTION_COORDINATOR_FENCED
):
    """The coordinator is fenced."""


class TransactionalIdAuthorizationFailedError(
    AuthorizationError, code=ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
):
    """Transactional id denied."""


class OperationNotAttemptedError(BrokerResponseError, code=ErrorCode.OPERATION_NOT_ATTEMPTED):
    """The operation was not attempted."""


class LogDirNotFoundError(BrokerResponseError, code=ErrorCode.LOG_DIR_NOT_FOUND):
    """The log directory does not exist."""


class ReassignmentInProgressError(BrokerResponseError, code=ErrorCode.REASSIGNMENT_IN_PROGRESS):
    """A partition reassignment is in progress."""


class DelegationTokenAuthDisabledError(
    BrokerResponseError, code=ErrorCode.DELEGATION_TOKEN_AUTH_DISABLED
):
    """Delegation tokens are disabled."""


class DelegationTokenNotFoundError(BrokerResponseError, code=ErrorCode.DELEGATION_TOKEN_NOT_FOUND):
    """The delegation token was not found."""


class DelegationTokenOwnerMismatchError(
    BrokerResponseError, code=ErrorCode.DELEGATION_TOKEN_OWNER_MISMATCH
):
    """Not the delegation token's owner."""


class DelegationTokenRequestNotAllowedError(
    BrokerResponseError, code=ErrorCode.DELEGATION_TOKEN_REQUEST_NOT_ALLOWED
):
    """Token request not allowed."""


class DelegationTokenAuthorizationFailedError(
    AuthorizationError, code=ErrorCode.DELEGATION_TOKEN_AUTHORIZATION_FAILED
):
    """Token authorization failed."""


class DelegationTokenExpiredError(BrokerResponseError, code=ErrorCode.DELEGATION_TOKEN_EXPIRED):
    """The delegation token has expired."""


class InvalidPrincipalTypeError(BrokerResponseError, code=ErrorCode.INVALID_PRINCIPAL_TYPE):
    """The principal type is not supported."""


class NonEmptyGroupError(BrokerResponseError, code=ErrorCode.NON_EMPTY_GROUP):
    """The group is not empty."""


class GroupIdNotFoundError(BrokerResponseError, code=ErrorCode.GROUP_ID_NOT_FOUND):
    """The group id does not exist."""


class FetchSessionIdNotFoundError(RetriableBrokerError, code=ErrorCode.FETCH_SESSION_ID_NOT_FOUND):
    """The fetch session id was not found."""


class InvalidFetchSessionEpochError(
    RetriableBrokerError, code=ErrorCode.INVALID_FETCH_SESSION_EPOCH
):
    """The fetch session epoch is invalid."""


class TopicDeletionDisabledError(BrokerResponseError, code=ErrorCode.TOPIC_DELETION_DISABLED):
    """Topic deletion is disabled."""


class StaleBrokerEpochError(BrokerResponseError, code=ErrorCode.STALE_BROKER_EPOCH):
    """The broker epoch has changed."""


class MemberIdRequiredError(BrokerResponseError, code=ErrorCode.MEMBER_ID_REQUIRED):
    """The group member needs a member id."""


class PreferredLeaderNotAvailableError(
    InvalidMetadataBrokerError, code=ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE
):
    """The preferred leader is unavailable."""


class GroupMaxSizeReachedError(BrokerResponseError, code=ErrorCode.GROUP_MAX_SIZE_REACHED):
    """The group reached its maximum size."""


class FencedInstanceIdError(BrokerResponseError, code=ErrorCode.FENCED_INSTANCE_ID):
    """The static member was fenced."""


class ElectionNotNeededError(InvalidMetadataBrokerError, code=ErrorCode.ELECTION_NOT_NEEDED):
    """The leader election is not needed."""


class NoReassignmentInProgressError(
    BrokerResponseError, code=ErrorCode.NO_REASSIGNMENT_IN_PROGRESS
):
    """No reassignment is in progress."""


class GroupSubscribedToTopicError(BrokerResponseError, code=ErrorCode.GROUP_SUBSCRIBED_TO_TOPIC):
    """The group is subscribed to the topic."""


class UnstableOffsetCommitError(RetriableBrokerError, code=ErrorCode.UNSTABLE_OFFSET_COMMIT):
    """There are unstable offsets to resolve."""


class ResourceNotFoundError(BrokerResponseError, code=ErrorCode.RESOURCE_NOT_FOUND):
    """The resource does not exist."""


class DuplicateResourceError(BrokerResponseError, code=ErrorCode.DUPLICATE_RESOURCE):
    """The resource is duplicated."""


class UnacceptableCredentialError(BrokerResponseError, code=ErrorCode.UNACCEPTABLE_CREDENTIAL):
    """The credential is unacceptable."""


class InconsistentVoterSetError(BrokerResponseError, code=ErrorCode.INCONSISTENT_VOTER_SET):
    """The voter set is inconsistent."""


class InvalidUpdateVersionError(BrokerResponseError, code=ErrorCode.INVALID_UPDATE_VERSION):
    """The update version is invalid."""


class FeatureUpdateFailedError(BrokerResponseError, code=ErrorCode.FEATURE_UPDATE_FAILED):
    """The feature update failed."""


class PrincipalDeserializationFailureError(
    BrokerResponseError, code=ErrorCode.PRINCIPAL_DESERIALIZATION_FAILURE
):
    """Principal deserialization failed."""


class SnapshotNotFoundError(BrokerResponseError, code=ErrorCode.SNAPSHOT_NOT_FOUND):
    """The snapshot was not found."""


class PositionOutOfRangeError(BrokerResponseError, code=ErrorCode.POSITION_OUT_OF_RANGE):
    """The position is out of range."""


class DuplicateBrokerRegistrationError(
    BrokerResponseError, code=ErrorCode.DUPLICATE_BROKER_REGISTRATION
):
    """The broker id is already registered."""


class BrokerIdNotRegisteredError(BrokerResponseError, code=ErrorCode.BROKER_ID_NOT_REGISTERED):
    """The broker id is not registered."""


class InconsistentClusterIdError(BrokerResponseError, code=ErrorCode.INCONSISTENT_CLUSTER_ID):
    """The cluster id does not match."""


class TransactionalIdNotFoundError(BrokerResponseError, code=ErrorCode.TRANSACTIONAL_ID_NOT_FOUND):
    """The transactional id was not found."""


class FetchSessionTopicIdError(RetriableBrokerError, code=ErrorCode.FETCH_SESSION_TOPIC_ID_ERROR):
    """The fetch session topic ids changed."""


class IneligibleReplicaError(BrokerResponseError, code=ErrorCode.INELIGIBLE_REPLICA):
    """The replica is not eligible for the ISR."""


class NewLeaderElectedError(BrokerResponseError, code=ErrorCode.NEW_LEADER_ELECTED):
    """A new leader was elected."""


class OffsetMovedToTieredStorageError(
    BrokerResponseError, code=ErrorCode.OFFSET_MOVED_TO_TIERED_STORAGE
):
    """The offset is in tiered storage."""


class FencedMemberEpochError(BrokerResponseError, code=ErrorCode.FENCED_MEMBER_EPOCH):
    """The member epoch is fenced."""


class UnreleasedInstanceIdError(BrokerResponseError, code=ErrorCode.UNRELEASED_INSTANCE_ID):
    """The instance id is still in use."""


class UnsupportedAssignorError(BrokerResponseError, code=ErrorCode.UNSUPPORTED_ASSIGNOR):
    """The assignor is not supported."""


class StaleMemberEpochError(BrokerResponseError, code=ErrorCode.STALE_MEMBER_EPOCH):
    """The member epoch is stale."""


class MismatchedEndpointTypeError(BrokerResponseError, code=ErrorCode.MISMATCHED_ENDPOINT_TYPE):
    """The endpoint type does not match."""


class UnsupportedEndpointTypeError(BrokerResponseError, code=ErrorCode.UNSUPPORTED_ENDPOINT_TYPE):
    """The endpoint type is not supported."""


class UnknownControllerIdError(BrokerResponseError, code=ErrorCode.UNKNOWN_CONTROLLER_ID):
    """The controller id is unknown."""


class UnknownSubscriptionIdError(BrokerResponseError, code=ErrorCode.UNKNOWN_SUBSCRIPTION_ID):
    """The subscription id is unknown."""


class TelemetryTooLargeError(BrokerResponseError, code=ErrorCode.TELEMETRY_TOO_LARGE):
    """The telemetry payload is too large."""


class InvalidRegistrationError(BrokerResponseError, code=ErrorCode.INVALID_REGISTRATION):
    """The registration is invalid."""


class TransactionAbortableError(BrokerResponseError, code=ErrorCode.TRANSACTION_ABORTABLE):
    """The transaction must be aborted."""


class InvalidRecordStateError(BrokerResponseError, code=ErrorCode.INVALID_RECORD_STATE):
    """The record state is invalid."""


class ShareSessionNotFoundError(RetriableBrokerError, code=ErrorCode.SHARE_SESSION_NOT_FOUND):
    """The share session was not found."""


class InvalidShareSessionEpochError(
    RetriableBrokerError, code=ErrorCode.INVALID_SHARE_SESSION_EPOCH
):
    """The share session epoch is invalid."""


class FencedStateEpochError(BrokerResponseError, code=ErrorCode.FENCED_STATE_EPOCH):
    """The share coordinator state epoch is fenced."""


class InvalidVoterKeyError(BrokerResponseError, code=ErrorCode.INVALID_VOTER_KEY):
    """The voter key is invalid."""


class DuplicateVoterError(BrokerResponseError, code=ErrorCode.DUPLICATE_VOTER):
    """The voter is already in the voter set."""


class VoterNotFoundError(BrokerResponseError, code=ErrorCode.VOTER_NOT_FOUND):
    """The voter is not in the voter set."""


class InvalidRegularExpressionError(BrokerResponseError, code=ErrorCode.INVALID_REGULAR_EXPRESSION):
    """The regular expression is invalid."""


class StreamsInvalidTopologyError(BrokerResponseError, code=ErrorCode.STREAMS_INVALID_TOPOLOGY):
    """The streams topology is invalid."""


class StreamsInvalidTopologyEpochError(
    BrokerResponseError, code=ErrorCode.STREAMS_INVALID_TOPOLOGY_EPOCH
):
    """The topology epoch is invalid."""


class StreamsTopologyFencedError(BrokerResponseError, code=ErrorCode.STREAMS_TOPOLOGY_FENCED):
    """The streams topology is fenced."""


class ShareSessionLimitReachedError(
    RetriableBrokerError, code=ErrorCode.SHARE_SESSION_LIMIT_REACHED
):
    """The share session limit is reached."""


# Kafka's own (Java) names of the classes that take kafka-python's names above.
InvalidReplicaAssignmentError = InvalidReplicationAssignmentError
InvalidConfigError = InvalidConfigurationError
