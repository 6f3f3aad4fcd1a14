"""A process's requests for topics' metadata, and the one wait for it.

Rules:
- ``request`` asks the Sender for a topic's metadata without waiting (a new topic when the
  pool's directory is full fails at once: PoolCapacityError). A topic still waited for is
  asked for again: at once if the requests were full, else every ASK_AGAIN_S (a Sender
  killed after it took the request never answers it).
- A refusal (a limit of the pool) counts only if the Sender made it after this process
  asked; it fails the waits of that topic, and the next ask may succeed.
- ``TopicWait`` is the wait every API runs: a blocking loop (``wait``: KafkaProducer's
  ``partitions_for``, Producer's ``list_topics``) or an asyncio one (AIOKafkaProducer) calls
  ``poll`` and sleeps ``next_sleep_s`` between looks. It looks briefly at first (the Sender
  usually answers within a millisecond or two), then every TOPIC_POLL_S.
- A topic's name is checked (Kafka's rule) before anything reaches shared memory, once per
  name per process.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from shmkafka.pool.errors import PoolCapacityError, kafka_errors
from shmkafka.pool.shared_pool import SharedPool
from shmkafka.protocol.errors import KafkaError
from shmkafka.shm.directory import LEGAL_TOPIC
from shmkafka.shm.layout import DIRECTORY_LOCK

ASK_AGAIN_S = 1.0  # how often a topic still waited for is asked for again
TOPIC_POLL_S = 0.0005  # how often a wait for a topic looks at the directory
TOPIC_FIRST_POLLS_S = (0.00005, 0.005)  # ... but every 50 µs for the first 5 ms


valid_topics: set[str] = set()  # topic names already checked (once each per process)


def legal_topic(topic: str) -> bool:
    """Kafka's topic name rule (each name checked once per process)."""
    if topic in valid_topics:
        return True
    if not LEGAL_TOPIC.fullmatch(topic) or topic in (".", ".."):
        return False
    valid_topics.add(topic)
    return True


def check_topic(topic: object) -> str:
    """Kafka's topic name rule, checked before anything reaches shared memory."""
    if not isinstance(topic, str):
        raise TypeError(f"topic must be a str, got {type(topic).__name__}")
    if not legal_topic(topic):
        raise ValueError(f"invalid topic {topic!r}: use 1-249 characters from a-z A-Z 0-9 . _ -")
    return topic


def metadata_poll_s(waited_s: float) -> float:
    """How long a wait for metadata sleeps between looks, ``waited_s`` into it."""
    step, first = TOPIC_FIRST_POLLS_S
    return step if waited_s < first else TOPIC_POLL_S


class TopicRequests:
    """This process's open requests for topics, on one pool."""

    def __init__(self, pool: SharedPool, wake_sender: Callable[[], None]) -> None:
        self.pool = pool
        self._wake_sender = wake_sender
        self._asked: dict[str, int] = {}  # topic → the directory's refusal count when asked
        self._asked_again: set[str] = set()  # asked while the requests were full
        self._asked_at: dict[str, float] = {}  # when each was last asked for

    def request(self, topic: str) -> None:
        """Ask the Sender for ``topic``'s metadata without waiting for it."""
        with kafka_errors:
            directory = self.pool.directory
            self._asked.setdefault(topic, directory.refusals())  # (refusals after this count)
            self._asked_at[topic] = time.monotonic()
            with self.pool.locks.held(DIRECTORY_LOCK):
                queued = directory.request_topic(topic)
            if not queued:  # the requests are full: ask again while waiting
                self._asked_again.add(topic)
            self._wake_sender()

    def still_waiting(self, topic: str) -> PoolCapacityError | None:
        """One step of waiting for ``topic``'s metadata: its refusal, if the Sender refused
        it; else None, having asked again if due."""
        refused = self.refused(topic)
        if refused is not None:
            return refused
        now = time.monotonic()
        if topic in self._asked_again or now - self._asked_at.get(topic, now) >= ASK_AGAIN_S:
            self._asked_again.discard(topic)
            self.request(topic)
        return None

    def refused(self, topic: str) -> PoolCapacityError | None:
        """The error of ``topic`` if the Sender refused it (a limit of the pool) since this
        process asked for it; None otherwise."""
        asked = self._asked.get(topic)
        if asked is None or self.pool.directory.refusals() == asked:
            return None
        refusal = self.pool.directory.refusal(topic, after=asked)
        if refusal is None:
            return None
        del self._asked[topic]  # (asking again may succeed: a new answer)
        return PoolCapacityError(refusal.message())

    def answered(self, topic: str) -> None:
        self._asked.pop(topic, None)
        self._asked_at.pop(topic, None)


class TopicWait:
    """One wait for ``topic``'s partitions (None: for any metadata, or a reachable cluster).

    ``connect_failure`` (the Sender's last failure to reach the cluster) fails the wait
    when given: a send's wait does, a ``list_topics`` waits its timeout out."""

    def __init__(
        self,
        requests: TopicRequests,
        topic: str | None,
        reachable: Callable[[], bool],
        connect_failure: Callable[[], KafkaError | None] | None = None,
    ) -> None:
        self.requests = requests
        self.topic = topic
        self.began = time.monotonic()
        self._reachable = reachable
        self._connect_failure = connect_failure
        directory = requests.pool.directory
        if topic is not None and directory.partitions(topic) is None:
            requests.request(topic)

    def poll(self) -> int | None:
        """The topic's partition count once known (for no topic: 0, once there is metadata
        or the cluster answered); None while not; raises what fails the wait."""
        with kafka_errors:
            directory = self.requests.pool.directory
            if self.topic is None:
                return 0 if directory.version() > 0 or self._reachable() else None
            entries = directory.partitions(self.topic)
            if entries is not None:
                self.requests.answered(self.topic)
                return len(entries)
            failure = self._connect_failure() if self._connect_failure is not None else None
            failure = failure or self.requests.still_waiting(self.topic)
        if failure is not None:
            raise failure
        return None

    def next_sleep_s(self) -> float:
        return metadata_poll_s(time.monotonic() - self.began)

    def wait(self, deadline: float) -> int | None:
        """Block until ``poll`` has the answer; None at ``deadline`` (time.monotonic())."""
        while (found := self.poll()) is None:
            if time.monotonic() >= deadline:
                return None
            time.sleep(self.next_sleep_s())
        return found
