"""aiokafka.abc: ``AbstractTokenProvider`` (for ``sasl_oauth_token_provider``) and
``ConsumerRebalanceListener``, aiokafka's own classes when it is installed, so a provider
written against aiokafka's works with either producer; equivalents otherwise."""

from __future__ import annotations

import abc
import importlib
from typing import Any

__all__ = ["AbstractTokenProvider", "ConsumerRebalanceListener"]


class _AbstractTokenProvider(abc.ABC):
    """An OAUTHBEARER token source: ``await token()`` gives the token string."""

    @abc.abstractmethod
    async def token(self) -> str:
        """The current token (refreshed as the provider sees fit)."""

    def extensions(self) -> dict[str, str]:
        """SASL extensions sent with the token (none by default)."""
        return {}


class _ConsumerRebalanceListener(abc.ABC):
    """aiokafka's consumer callback interface (no consumer here: for imports to work)."""

    @abc.abstractmethod
    def on_partitions_revoked(self, revoked: Any) -> Any: ...

    @abc.abstractmethod
    def on_partitions_assigned(self, assigned: Any) -> Any: ...


def _classes() -> tuple[Any, Any]:
    try:
        peer = importlib.import_module("aiokafka.abc")
    except ImportError:
        return _AbstractTokenProvider, _ConsumerRebalanceListener
    return peer.AbstractTokenProvider, peer.ConsumerRebalanceListener


AbstractTokenProvider, ConsumerRebalanceListener = _classes()
