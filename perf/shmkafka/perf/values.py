"""``--value-kind realistic``: JSON-like values of an exact size, drawn from a seeded RNG.

Each value is one JSON object (an id, a user, an event, a timestamp, a score, tags and a
text of made-up words): digits are random and the words come from a fixed vocabulary in a
Zipf-like mix, so that lz4 shrinks a batch of them about 2x (zstd and gzip about 3-4x), as
with application events, not 100x as with copies of one value. A process's values are
distinct, and differ from every other process's, so that batches shared by processes
(shmkafka's) compress no better than one process's would. Values too small for the
smallest object (under 11 bytes) are random lowercase letters.
"""

from __future__ import annotations

import itertools
import random

SYLLABLES = ("ka", "lo", "mi", "ne", "ru", "ta", "shi", "po", "ve", "da", "zen", "qu", "or",
             "ix", "an", "bel", "cor", "dun", "el", "fy")  # fmt: skip
EVENTS = ("click", "view", "purchase", "signup", "logout", "search", "add_to_cart")
VOCABULARY = 2000
POOL_BYTES = 2 << 20  # the values of a process, in all (cycled): beyond any codec's window
MIN_VALUES, MAX_VALUES = 16, 20_000
_LETTERS = b"abcdefghijklmnopqrstuvwxyz"


def vocabulary(seed: int) -> list[str]:
    rng = random.Random(seed)
    return ["".join(rng.choices(SYLLABLES, k=rng.randint(2, 4))) for _ in range(VOCABULARY)]


def values_for(seed: int, process: int, size: int) -> list[bytes]:
    """The process's distinct values of ``size`` bytes (about ``POOL_BYTES`` of them in all),
    the same for the same arguments."""
    if size == 0:
        return [b""]
    words = vocabulary(seed)
    weights = list(itertools.accumulate(1 / (i + 1) for i in range(len(words))))
    rng = random.Random((seed * 1_000_003 + process) * 1_000_003 + size)
    count = max(MIN_VALUES, min(MAX_VALUES, POOL_BYTES // max(size, 1)))
    return [json_like(rng, words, weights, size) for _ in range(count)]


def json_like(rng: random.Random, words: list[str], weights: list[float], size: int) -> bytes:
    """One value of exactly ``size`` bytes: the fields that fit, then a text filling the rest."""
    tags = ",".join(f'"{w}"' for w in rng.choices(words, cum_weights=weights, k=3))
    fields = (
        f'"id":{rng.randrange(10**12)}',
        f'"user":"{rng.choice(words)}"',
        f'"event":"{rng.choice(EVENTS)}"',
        f'"ts":{1_700_000_000_000 + rng.randrange(10**10)}',
        f'"score":{rng.random() * 100:.4f}',
        f'"tags":[{tags}]',
    )
    text_open, close = '"text":"', '"}'
    head = "{"
    for field in fields:
        if len(head) + len(field) + 1 + len(text_open) + len(close) > size:
            break
        head += field + ","
    need = size - len(head) - len(text_open) - len(close)
    if need < 0:
        return bytes(rng.choices(_LETTERS, k=size))
    text = ""
    while len(text) < need:
        text += " ".join(rng.choices(words, cum_weights=weights, k=need // 7 + 2)) + " "
    return (head + text_open + text[:need] + close).encode()
