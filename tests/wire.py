"""A blocking plain-socket Kafka client for tests: our sans-IO codec over one TCP socket."""

from __future__ import annotations

import socket
from typing import TypeVar

from shmkafka.protocol.frames import ClientProtocol
from shmkafka.protocol.messages import ApiVersionsRequest, ApiVersionsResponse
from shmkafka.protocol.schema import Message
from shmkafka.protocol.versions import broker_versions, negotiate

R = TypeVar("R", bound=Message)


class WireClient:
    def __init__(self, host: str, port: int, timeout: float = 15.0) -> None:
        self.sock = socket.create_connection((host, port), timeout=timeout)
        self.protocol = ClientProtocol(client_id="shmkafka-tests")
        response = self.request(ApiVersionsRequest(), 0, ApiVersionsResponse)
        assert response.error_code == 0, response
        self.broker_versions = broker_versions(response.api_keys)

    def version(self, request_cls: type[Message]) -> int:
        return negotiate(request_cls.API_KEY, self.broker_versions)

    def request(self, request: Message, version: int, response_cls: type[R]) -> R:
        _, frame = self.protocol.send_request(request, version)
        self.sock.sendall(frame)
        while True:
            data = self.sock.recv(1 << 16)
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
