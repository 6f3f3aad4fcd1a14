"""A blocking plain-socket Kafka client for tests: our sans-IO codec over one TCP socket."""

from __future__ import annotations

import socket
from typing import TypeVar

from shmkafka.protocol.frames import ClientProtocol
from shmkafka.protocol.messages import ApiVersionsRequest, ApiVersionsResponse
from shmkafka.protocol.schema import Message
from shmkafka.protocol.versions import broker_versions, negotiate

R = TypeVar("R", bound=Message)

UNSUPPORTED_VERSION = 35


class WireClient:
    """Connects, negotiates versions with ApiVersions, then sends one request at a time."""

    def __init__(self, host: str, port: int, timeout: float = 20.0) -> None:
        self.sock = socket.create_connection((host, port), timeout=timeout)
        self.protocol = ClientProtocol(client_id="shmkafka-tests")
        self.api_versions_used = ApiVersionsRequest.MAX_VERSION
        hello = ApiVersionsRequest(client_software_name="shmkafka", client_software_version="0.1")
        response = self.request(hello, self.api_versions_used, ApiVersionsResponse)
        if response.error_code == UNSUPPORTED_VERSION:
            # The broker told us its ApiVersions range in a v0 body (or nothing we could
            # read, then v0, which every broker supports); retry within it.
            offered = broker_versions(response.api_keys)
            self.api_versions_used = negotiate(18, offered) if 18 in offered else 0
            response = self.request(hello, self.api_versions_used, ApiVersionsResponse)
        assert response.error_code == 0, response
        self.broker_versions = broker_versions(response.api_keys)

    def version(self, request_cls: type[Message]) -> int:
        return negotiate(request_cls.API_KEY, self.broker_versions)

    def call(self, request: Message, response_cls: type[R], version: int | None = None) -> R:
        return self.request(
            request, self.version(type(request)) if version is None else version, response_cls
        )

    def request(self, request: Message, version: int, response_cls: type[R]) -> R:
        _, frame = self.protocol.send_request(request, version)
        self.sock.sendall(frame)
        while True:
            data = self.sock.recv(1 << 20)
            if not data:
                raise ConnectionError("broker closed the connection")
            responses = self.protocol.receive_bytes(data)
            if responses:
                assert len(responses) == 1
                response = responses[0][1]
                assert isinstance(response, response_cls)
                return response

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> WireClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
