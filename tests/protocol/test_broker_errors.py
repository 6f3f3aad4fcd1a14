from __future__ import annotations

from shmkafka.protocol import broker_errors as errors
from shmkafka.protocol.errors import BROKER_ERRORS_BY_NAME, InvalidMetadataError, RetriableError


def test_table_covers_codes_without_gaps() -> None:
    codes = sorted(errors.BROKER_ERRORS_BY_CODE)
    assert codes == [-1, *range(1, 134)]


def test_retriable_and_invalid_metadata_are_types() -> None:
    not_leader = errors.for_code(6)
    assert not_leader.__name__ == "NotLeaderForPartitionError"
    assert issubclass(not_leader, InvalidMetadataError)
    assert issubclass(not_leader, RetriableError)
    assert not_leader.retriable and not_leader.invalid_metadata
    enough = errors.for_code(19)
    assert issubclass(enough, RetriableError)
    assert not issubclass(enough, InvalidMetadataError)
    too_large = errors.for_code(10)
    assert not too_large.retriable and not issubclass(too_large, RetriableError)
    assert errors.for_code(29).__name__ == "TopicAuthorizationFailedError"


def test_error_instances_carry_code_and_name() -> None:
    assert errors.error_for(0) is None
    err = errors.error_for(46, "resent batch")
    assert err is not None
    assert err.error_code == 46
    assert err.name == "DUPLICATE_SEQUENCE_NUMBER" and err.errno == 46
    assert str(err) == "[Error 46] DuplicateSequenceNumberError: resent batch"  # kafka-python's


def test_unknown_code_keeps_its_number() -> None:
    err = errors.error_for(9999)
    assert isinstance(err, errors.UnknownError)
    assert err.error_code == 9999


def test_names_map_back() -> None:
    assert BROKER_ERRORS_BY_NAME["OUT_OF_ORDER_SEQUENCE_NUMBER"].code == 45
