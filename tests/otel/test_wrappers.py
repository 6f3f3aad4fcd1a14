from __future__ import annotations

import pytest

from shmkafka.otel.wrappers import CONFLUENT_PRODUCE, KAFKA_SEND, bind


def test_arguments_are_bound_by_the_peers_signature() -> None:
    assert bind(KAFKA_SEND, ("t", b"v"), {"key": b"k"}) == {"topic": "t", "value": b"v",
                                                            "key": b"k"}  # fmt: skip
    # confluent-kafka's sixth positional argument is ``callback``, on_delivery's alias
    call = bind(CONFLUENT_PRODUCE, ("t", b"v", b"k", 1, None, print), {})
    assert call["callback"] is print and call["partition"] == 1


def test_a_wrong_call_raises_what_the_wrapped_one_would() -> None:
    with pytest.raises(TypeError, match="multiple values"):
        bind(KAFKA_SEND, ("t", b"v"), {"value": b"w"})
    with pytest.raises(TypeError, match="topic"):
        bind(KAFKA_SEND, (), {"value": b"v"})
    with pytest.raises(TypeError, match="positional"):
        bind(KAFKA_SEND, tuple(range(7)), {})
