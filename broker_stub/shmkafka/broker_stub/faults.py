"""Fault injection rules for broker_stub, deterministic so that tests reproduce.

Each rule says where it applies (a node, a topic, a partition; None = anywhere) and how many
requests it still affects. Rules are consulted by the server, in the order they were added;
``random_produce_errors`` draws from a seeded generator.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field


@dataclass
class ProduceErrorRule:
    code: int
    remaining: int
    node: int | None = None
    topic: str | None = None
    partition: int | None = None

    def matches(self, node: int, topic: str, partition: int) -> bool:
        return (
            self.remaining > 0
            and self.node in (None, node)
            and self.topic in (None, topic)
            and self.partition in (None, partition)
        )


@dataclass
class DropRule:
    """Close the connection after reading a request: before it is handled (nothing
    appended) or after (appended, but the response never leaves)."""

    when: str  # "before" | "after"
    remaining: int
    node: int | None = None
    api_key: int | None = None

    def matches(self, node: int, api_key: int, when: str) -> bool:
        return (
            self.remaining > 0
            and self.when == when
            and self.node in (None, node)
            and self.api_key in (None, api_key)
        )


@dataclass
class ApiErrorRule:
    """Answer the next ``remaining`` requests of ``api_key`` (on ``node``) with ``code``,
    before they are handled (the transaction coordinator's APIs)."""

    api_key: int
    code: int
    remaining: int
    node: int | None = None


@dataclass
class Faults:
    seed: int = 0
    produce_errors: list[ProduceErrorRule] = field(default_factory=list)
    drops: list[DropRule] = field(default_factory=list)
    api_errors: list[ApiErrorRule] = field(default_factory=list)
    latency_ms: dict[int | None, int] = field(default_factory=dict)
    throttle_ms: dict[int, int] = field(default_factory=dict)
    paused: set[int] = field(default_factory=set)
    error_rate: float = 0.0
    error_codes: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        self.rng = random.Random(self.seed)

    def fail_produce(
        self, code: int, count: int = 1, *, node: int | None = None,
        topic: str | None = None, partition: int | None = None,
    ) -> None:  # fmt: skip
        self.produce_errors.append(ProduceErrorRule(code, count, node, topic, partition))

    def random_produce_errors(self, rate: float, codes: tuple[int, ...], seed: int) -> None:
        """Fail each partition's produce with probability ``rate`` (a code from ``codes``)."""
        self.rng = random.Random(seed)
        self.error_rate, self.error_codes = rate, codes

    def produce_error(self, node: int, topic: str, partition: int) -> int:
        for rule in self.produce_errors:
            if rule.matches(node, topic, partition):
                rule.remaining -= 1
                return rule.code
        if self.error_rate and self.rng.random() < self.error_rate:
            return self.rng.choice(self.error_codes)
        return 0

    def fail_api(self, api_key: int, code: int, count: int = 1, *,
                 node: int | None = None) -> None:  # fmt: skip
        self.api_errors.append(ApiErrorRule(api_key, code, count, node))

    def api_error(self, node: int, api_key: int) -> int:
        for rule in self.api_errors:
            if rule.remaining > 0 and rule.api_key == api_key and rule.node in (None, node):
                rule.remaining -= 1
                return rule.code
        return 0

    def drop_connection(
        self, when: str = "before", count: int = 1, *, node: int | None = None,
        api_key: int | None = None,
    ) -> None:  # fmt: skip
        if when not in ("before", "after"):
            raise ValueError("when is 'before' or 'after'")
        self.drops.append(DropRule(when, count, node, api_key))

    def should_drop(self, node: int, api_key: int, when: str) -> bool:
        for rule in self.drops:
            if rule.matches(node, api_key, when):
                rule.remaining -= 1
                return True
        return False

    def delay_s(self, node: int) -> float:
        ms = self.latency_ms.get(node, self.latency_ms.get(None, 0))
        return (ms + self.throttle_ms.get(node, 0)) / 1000

    def clear(self) -> None:
        self.produce_errors.clear()
        self.api_errors.clear()
        self.drops.clear()
        self.latency_ms.clear()
        self.throttle_ms.clear()
        self.paused.clear()
        self.error_rate, self.error_codes = 0.0, ()
