"""Where the Sender's OAUTHBEARER tokens come from (``oauth_method``):

- ``unsecured``: an unsecured JWT it makes itself (librdkafka's
  ``enable.sasl.oauthbearer.unsecure.jwt``, for test clusters);
- ``oidc``: the OAuth 2 client-credentials grant against the token endpoint (librdkafka's
  ``sasl.oauthbearer.method=oidc``), fetched in a thread so the Sender's loop never blocks
  on HTTP, and fetched again at 80% of a token's lifetime;
- ``callback``: an app process's callback (kafka-python's ``sasl_oauth_token_provider``,
  confluent-kafka's ``oauth_cb``), through the pool's token board (shm/tokens.py): the
  Sender asks, a producer process that has the callback answers.

A source is called with nothing and answers (token, expiry in wall-clock ms) or None while
it has none yet; the connection asks again on its next round.

PLAIN's and SCRAM's username and password are the configured ones until an app process
calls ``set_sasl_credentials``; from then on the pool's credentials board (shm/credentials.py)
gives them, to every authentication that starts later (``given_credentials``).
"""

from __future__ import annotations

import base64
import json
import logging
import threading
import time
import urllib.parse
import urllib.request

from shmkafka.pool.config import SenderConfig
from shmkafka.pool.shared_pool import SharedPool
from shmkafka.protocol.sasl import unsecured_jwt
from shmkafka.sender.authentication import CredentialsSource, TokenSource

log = logging.getLogger("shmkafka.sender")
REFRESH_AT = 0.8  # of a token's lifetime


def _wall_ms() -> int:
    return int(time.time() * 1000)


class UnsecuredTokens:
    def __init__(self, principal: str, lifetime_s: int, scope: str | None) -> None:
        self.principal, self.lifetime_s, self.scope = principal, lifetime_s, scope

    def __call__(self) -> tuple[str, int]:
        now = time.time()
        token = unsecured_jwt(self.principal, self.lifetime_s, now, self.scope)
        return token, int((now + self.lifetime_s) * 1000)


class OidcTokens:
    """The client-credentials grant, in a background thread."""

    def __init__(self, url: str, client_id: str, secret: str, scope: str | None) -> None:
        self._url, self._client_id, self._secret, self._scope = url, client_id, secret, scope
        self._token: tuple[str, int] | None = None
        self._refresh_at_ms = 0
        self._fetching = False
        self._lock = threading.Lock()

    def __call__(self) -> tuple[str, int] | None:
        with self._lock:
            token, due = self._token, _wall_ms() >= self._refresh_at_ms
            if due and not self._fetching:
                self._fetching = True
                threading.Thread(target=self._fetch, name="shmkafka-oidc", daemon=True).start()
        if token is not None and token[1] > _wall_ms():
            return token
        return None

    def _fetch(self) -> None:
        try:
            token, lifetime_ms = self._request()
            with self._lock:
                now = _wall_ms()
                self._token = (token, now + lifetime_ms)
                self._refresh_at_ms = now + int(lifetime_ms * REFRESH_AT)
        except (OSError, ValueError, KeyError) as exc:  # (urllib's errors are OSErrors)
            log.warning("OAUTHBEARER: no token from %s: %s", self._url, type(exc).__name__)
            with self._lock:
                self._refresh_at_ms = _wall_ms() + 5000
        finally:
            with self._lock:
                self._fetching = False

    def _request(self) -> tuple[str, int]:
        form = {"grant_type": "client_credentials"}
        if self._scope:
            form["scope"] = self._scope
        basic = base64.b64encode(f"{self._client_id}:{self._secret}".encode()).decode()
        request = urllib.request.Request(
            self._url, data=urllib.parse.urlencode(form).encode(), method="POST",
            headers={"Authorization": f"Basic {basic}",
                     "Content-Type": "application/x-www-form-urlencoded"},
        )  # fmt: skip
        with urllib.request.urlopen(request, timeout=30) as response:
            answer = json.loads(response.read())
        return str(answer["access_token"]), int(float(answer.get("expires_in", 3600)) * 1000)


class BoardTokens:
    """Tokens an app process's callback supplies through the pool's token board."""

    def __init__(self, pool: SharedPool) -> None:
        self.pool = pool
        self._token: tuple[str, int] | None = None
        self._refresh_at_ms = 0

    def __call__(self) -> tuple[str, int] | None:
        now = _wall_ms()
        if self._token is not None and now < self._refresh_at_ms:
            return self._token
        fresh = self.pool.tokens.take()
        if fresh is not None and fresh != self._token:
            # (an expired token is used too, as the peers do: the broker's refusal is what
            # tells the app; a new one is asked for a second later)
            self._token = fresh
            self._refresh_at_ms = now + max(1000, int((fresh[1] - now) * REFRESH_AT))
            return fresh
        self.pool.tokens.ask()  # (a question stays open until a producer answers it)
        return self._token


def token_source(config: SenderConfig, pool: SharedPool) -> TokenSource:
    if config.oauth_method == "unsecured":
        return UnsecuredTokens(config.oauth_unsecured_principal,
                               config.oauth_unsecured_lifetime_s, config.oauth_scope)  # fmt: skip
    if config.oauth_method == "oidc":
        assert config.oauth_token_endpoint_url and config.oauth_client_id
        assert config.oauth_client_secret
        return OidcTokens(config.oauth_token_endpoint_url, config.oauth_client_id,
                          config.oauth_client_secret, config.oauth_scope)  # fmt: skip
    return BoardTokens(pool)


def given_credentials(pool: SharedPool) -> CredentialsSource:
    """The SASL username and password last given by ``set_sasl_credentials`` in any process
    of the pool (its credentials board), or None while none were."""

    def read() -> tuple[str, str] | None:
        posted = pool.credentials.read()
        return None if posted is None else (posted[1], posted[2])

    return read
