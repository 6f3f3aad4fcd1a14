"""What readers of the topic directory get (shm/directory.py): its entries, and its topics
as of one version, whose partitions are read on first access (so that a new version costs
a process only the topics it uses)."""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol


@dataclass(frozen=True)
class PartitionEntry:
    deque_id: int
    leader: int
    leader_epoch: int


@dataclass(frozen=True)
class PartitionLeader:
    """What the writer publishes for one partition."""

    leader: int = -1
    leader_epoch: int = -1


class DirectoryReader(Protocol):
    """What a view reads of the directory (shm/directory.py's ``Directory``)."""

    def index_of(self, name: str) -> int | None: ...

    def read_partitions(self, index: int) -> tuple[PartitionEntry, ...] | None: ...

    def is_live(self, index: int) -> bool: ...


class Topics(Mapping[str, tuple[PartitionEntry, ...]]):
    """The directory's topics as of one version; partitions are read on first access."""

    def __init__(self, directory: DirectoryReader, version: int, names: Sequence[str]) -> None:
        self._directory = directory
        self._names = names
        self._count = len(names)
        self._parsed: dict[str, tuple[PartitionEntry, ...]] = {}

    def get(self, name: str, default: object = None) -> tuple[PartitionEntry, ...] | None:  # type: ignore[override]
        found = self._parsed.get(name)
        if found is not None:
            return found
        index = self._directory.index_of(name)
        if index is None or index >= self._count:
            return default  # type: ignore[return-value]
        entries = self._directory.read_partitions(index)
        if entries is None:  # retired
            return default  # type: ignore[return-value]
        self._parsed[name] = entries
        return entries

    def __getitem__(self, name: str) -> tuple[PartitionEntry, ...]:
        found = self.get(name)
        if found is None:
            raise KeyError(name)
        return found

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and self.get(name) is not None

    def __iter__(self) -> Iterator[str]:
        live = self._directory.is_live
        return (name for index, name in enumerate(self._names[: self._count]) if live(index))

    def __len__(self) -> int:
        return sum(1 for _ in self)


@dataclass(frozen=True)
class DirectorySnapshot:
    version: int
    topics: Mapping[str, tuple[PartitionEntry, ...]]

    def by_deque(self) -> dict[int, tuple[str, int]]:
        return {
            entry.deque_id: (topic, partition)
            for topic, entries in self.topics.items()
            for partition, entry in enumerate(entries)
        }
