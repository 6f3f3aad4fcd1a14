"""One engine under both drop-in APIs: settings split by who must agree on them, the default
pool name, and a process's attachment to its pool, re-made after fork.

Rules:
- Sender-level settings (``SenderConfig``) and pool sizes (``PoolConfig``) are the same for
  every producer of a pool, because one Sender and one segment serve them all. They are
  recorded in the pool; attaching with other values is a ``KafkaConfigurationError`` that
  names the keys.
- The default pool name is a hash of the uid and those settings, so identically configured
  processes share a pool without naming one, and differently configured ones do not meet.
- Per-process state (process slot, completion thread, futures) belongs to the process that
  made it. A forked child makes its own on first use (``Engine.handle``); the parent's
  handle is kept, untouched, so nothing of the parent's is released from the child.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from shmkafka.pool.config import SenderConfig
from shmkafka.pool.errors import KafkaConfigurationError, PoolSettingsMismatchError, kafka_errors
from shmkafka.producer.client import ProducerHandle
from shmkafka.protocol.errors import KafkaError
from shmkafka.shm.config import PoolConfig, validate_pool_name
from shmkafka.shm.directory import LEGAL_TOPIC
from shmkafka.shm.errors import ShmError
from shmkafka.shm.segment import Segment

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


# how often an asyncio send waiting for room in a full pool looks again (it awaits, never
# blocking its loop: the pool's own wait for memory would)
FULL_POOL_WAIT_S = 0.002
POOL_KEYS = tuple(f.name for f in dataclasses.fields(PoolConfig) if f.name != "sender_settings")


@dataclass(frozen=True)
class Settings:
    """Everything an engine needs: validated, with Kafka's names."""

    sender: SenderConfig
    pool: PoolConfig
    pool_name: str | None = None
    max_block_ms: int = 60_000

    @classmethod
    def build(
        cls, sender: dict[str, Any], pool: dict[str, Any], pool_name: str | None, max_block_ms: int
    ) -> Settings:
        try:
            sender_config = SenderConfig(**sender)
            blob = json.dumps(sender_config.identity(), sort_keys=True)
            pool_config = PoolConfig(
                **pool,
                max_request_size=sender_config.max_request_size,
                sender_settings=blob,
            )
            if pool_name is not None:
                validate_pool_name(pool_name)
        except (KafkaError, ShmError, TypeError, ValueError) as exc:
            raise KafkaConfigurationError(str(exc)) from None
        if not isinstance(max_block_ms, int) or max_block_ms < 0:
            raise KafkaConfigurationError(f"max_block_ms must be >= 0, got {max_block_ms!r}")
        return cls(sender_config, pool_config, pool_name, max_block_ms)

    def default_pool_name(self) -> str:
        digest = hashlib.sha256(f"{os.getuid()}\n{self.pool.to_json().decode()}".encode())
        return "p" + digest.hexdigest()[:20]


def _differences(asked: PoolConfig, stored: PoolConfig) -> list[str]:
    out = [
        f"{key} (pool has {getattr(stored, key)!r}, asked {getattr(asked, key)!r})"
        for key in POOL_KEYS
        if getattr(stored, key) != getattr(asked, key)
    ]
    mine = json.loads(asked.sender_settings or "{}")
    theirs = json.loads(stored.sender_settings or "{}")
    out += [
        f"{key} (pool has {theirs.get(key)!r}, asked {mine.get(key)!r})"
        for key in sorted(set(mine) | set(theirs))
        if mine.get(key) != theirs.get(key)
    ]
    return out


class Engine:
    """This process's producer on the pool, re-made in a forked child on first use."""

    def __init__(self, settings: Settings, *, sender_log: str | None = None) -> None:
        self.settings = settings
        self.pool_name = settings.pool_name or settings.default_pool_name()
        self.sender_log = sender_log
        self._parents: list[ProducerHandle] = []  # handles inherited over fork: never used
        self._token_provider: Callable[[], tuple[str, int]] | None = None
        self._handle = self._open()

    @property
    def token_provider(self) -> Callable[[], tuple[str, int]] | None:
        return self._token_provider

    @token_provider.setter
    def token_provider(self, provider: Callable[[], tuple[str, int]] | None) -> None:
        """An app's OAUTHBEARER token callback, answered from this process (and from a
        forked child's own handle)."""
        self._token_provider = provider
        self._handle.token_provider = provider

    def _open(self) -> ProducerHandle:
        sender = dataclasses.asdict(self.settings.sender)
        try:
            return ProducerHandle(
                self.pool_name,
                sender,
                pool_config=self.settings.pool,
                max_block_ms=self.settings.max_block_ms,
                sender_log=self.sender_log,
            )
        except PoolSettingsMismatchError:
            with kafka_errors:
                segment = Segment.attach(self.pool_name)
            try:
                stored = segment.stored_config()
            finally:
                segment.close()
            keys = "; ".join(_differences(self.settings.pool, stored)) or "layout version"
            raise PoolSettingsMismatchError(
                f"pool {self.pool_name!r} is shared with other settings: {keys}. One Sender "
                "serves a pool, so its producers must agree on these (or use another pool=)"
            ) from None

    @property
    def handle(self) -> ProducerHandle:
        handle = self._handle
        if handle.pool.forked:  # we are a forked child: attach on our own
            self._parents.append(handle)
            handle = self._handle = self._open()
            handle.token_provider = self._token_provider
        return handle
