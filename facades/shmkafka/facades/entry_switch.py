"""The switch of a facade's C entry (producer/entry.py), the same for the three APIs.

Rules:
- A facade's class derives from this and from one of entry.py's bases. It says how its entry
  is bound (``_entry_binding``; None: its records always take the Python path, for example
  with serializers) and binds it once its client is up (``_bind_entry``).
- A transactional producer's common record takes the C entry only within a transaction
  (``_txn_fast``), guarded by the transaction board's owner generation
  (producer/transactions.py, ``fast_guard``): once a newer owner fences this one, every
  record goes to the Python path, which raises.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from shmkafka.producer.client import Client
from shmkafka.producer.entry import EntryBinding


class EntrySwitch:
    _txn: Any  # (the facade's transaction client, or None)

    if TYPE_CHECKING:  # (entry.py's bases have it; defined here it would hide theirs)

        def _fast_disable(self) -> None: ...

    def _entry_binding(self) -> EntryBinding | None:
        raise NotImplementedError

    def _entry_client(self) -> Client | None:
        """This process's client, or None (not open)."""
        raise NotImplementedError

    @property
    def shmkafka_client(self) -> Client | None:
        """This process's shmkafka client under the API, or None (not open): what an
        instrumentation (otel) reads of the producer, never its private parts."""
        return self._entry_client()

    def _bind_entry(self, client: Client, guard: tuple[Any, int, int] | None = None) -> bool:
        binding = self._entry_binding()
        return binding is not None and client.bind_entry(self, binding, guard)

    def _txn_fast(self, on: bool) -> bool:
        """Turn the C entry on (True if it is) or off, at a transaction's start and end."""
        if not on:
            self._fast_disable()
            return False
        client = self._entry_client()
        if self._txn is None or client is None:
            return False
        return self._bind_entry(client, guard=self._txn.fast_guard())
