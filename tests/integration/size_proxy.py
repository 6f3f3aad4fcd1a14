"""A Kafka-protocol proxy in front of one real broker (test tooling), for what Tansu cannot
be made to do by itself:

- it refuses, as a broker with ``max.message.bytes`` would, every partition's record batch
  above ``max_message_bytes``: that partition is taken out of the Produce request before it
  is forwarded (the broker writes none of it) and answered MESSAGE_TOO_LARGE in the
  broker's response, in its place;
- ``lose_produce_responses(n)``: the next ``n`` Produce responses are lost (the requests
  reach the broker and are written; the connection closes instead of answering);
- Metadata and FindCoordinator answers name the proxy, so clients stay behind it.

Frames are decoded and encoded with shmkafka's own protocol code; responses keep their
order on each connection.
"""

from __future__ import annotations

import contextlib
import dataclasses
import socket
import threading
from collections import deque
from dataclasses import dataclass

from shmkafka.protocol.error_codes import ErrorCode
from shmkafka.protocol.frames import (
    FrameDecoder,
    decode_request_header,
    encode_request,
    encode_response,
    response_header_version,
)
from shmkafka.protocol.messages import (
    FindCoordinatorResponse,
    MetadataResponse,
    ProduceRequest,
    ProduceResponse,
)
from shmkafka.protocol.messages.produce import (
    PartitionProduceResponse,
    TopicProduceData,
    TopicProduceResponse,
)
from shmkafka.protocol.primitives import Reader
from tests.reliability.proxy import Proxy


@dataclass
class _Asked:
    correlation_id: int
    api_key: int
    version: int
    refused: list[tuple[str, int]]


class SizeProxy(Proxy):
    def __init__(self, target: tuple[str, int], max_message_bytes: int) -> None:
        self.max_message_bytes = max_message_bytes
        self.host = "127.0.0.1"
        self.refused = 0  # partitions' batches refused as too large
        self.lost = 0  # Produce responses lost
        self._to_lose = 0
        super().__init__(target)

    @property
    def bootstrap(self) -> str:
        return f"{self.host}:{self.port}"

    def lose_produce_responses(self, count: int) -> None:
        with self._lock:
            self._to_lose += count

    def __enter__(self) -> SizeProxy:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _serve(self, client: socket.socket, upstream: socket.socket) -> None:
        """Requests and responses each in a thread, with the connection's requests asked
        and not answered yet between them (responses come in their order)."""
        asked: deque[_Asked] = deque()
        threading.Thread(target=self._requests, args=(client, upstream, asked),
                         daemon=True).start()  # fmt: skip
        threading.Thread(target=self._responses, args=(upstream, client, asked),
                         daemon=True).start()  # fmt: skip

    def _requests(
        self, client: socket.socket, upstream: socket.socket, asked: deque[_Asked]
    ) -> None:
        frames = FrameDecoder()
        try:
            while data := client.recv(65536):
                for frame in frames.feed(data):
                    upstream.sendall(self._request(frame, asked))
        except OSError:
            pass
        finally:
            _close(client, upstream)

    def _responses(
        self, upstream: socket.socket, client: socket.socket, asked: deque[_Asked]
    ) -> None:
        frames = FrameDecoder()
        try:
            while data := upstream.recv(65536):
                for frame in frames.feed(data):
                    answer = self._response(frame, asked)
                    if answer is None:
                        return  # lost: the connection closes
                    client.sendall(answer)
        except OSError:
            pass
        finally:
            _close(client, upstream)

    # ------------------------------------------------------------------ frames

    def _request(self, frame: bytes, asked: deque[_Asked]) -> bytes:
        header, at = decode_request_header(frame)
        whole = len(frame).to_bytes(4, "big") + frame
        if header.api_key != ProduceRequest.API_KEY:
            asked.append(_Asked(header.correlation_id, header.api_key, header.api_version, []))
            return whole
        request = ProduceRequest.decode(memoryview(frame)[at:], header.api_version, strict=False)
        refused: list[tuple[str, int]] = []
        kept: list[TopicProduceData] = []
        for topic in request.topic_data:
            parts = []
            for part in topic.partition_data:
                size = len(part.records) if isinstance(part.records, (bytes, memoryview)) else 0
                if size > self.max_message_bytes:
                    refused.append((topic.name, part.index))
                else:
                    parts.append(part)
            if parts:
                kept.append(TopicProduceData(topic.name, tuple(parts)))
        if request.acks != 0:
            asked.append(_Asked(header.correlation_id, header.api_key, header.api_version, refused))
        if not refused:
            return whole
        with self._lock:
            self.refused += len(refused)
        smaller = dataclasses.replace(request, topic_data=tuple(kept))
        return encode_request(smaller, header.api_version, header.correlation_id,
                              header.client_id)  # fmt: skip

    def _response(self, frame: bytes, asked: deque[_Asked]) -> bytes | None:
        reader = Reader(frame)
        correlation_id = reader.int32("correlation id")
        request = asked.popleft()
        assert request.correlation_id == correlation_id, (request, correlation_id)
        whole = len(frame).to_bytes(4, "big") + frame
        if request.api_key not in (ProduceRequest.API_KEY, MetadataResponse.API_KEY,
                                   FindCoordinatorResponse.API_KEY):  # fmt: skip
            return whole
        if response_header_version(request.api_key, request.version) >= 1:
            reader.uvarint("tagged fields")
        body = memoryview(frame)[reader.pos :]
        if request.api_key == ProduceRequest.API_KEY:
            with self._lock:
                if self._to_lose:
                    self._to_lose -= 1
                    self.lost += 1
                    return None
            if not request.refused:
                return whole
            produced = ProduceResponse.decode(body, request.version, strict=False)
            answer: object = _with_refusals(produced, request.refused)
        elif request.api_key == MetadataResponse.API_KEY:
            metadata = MetadataResponse.decode(body, request.version, strict=False)
            answer = dataclasses.replace(metadata, brokers=tuple(
                dataclasses.replace(b, host=self.host, port=self.port) for b in metadata.brokers
            ))  # fmt: skip
        else:
            found = FindCoordinatorResponse.decode(body, request.version, strict=False)
            answer = dataclasses.replace(found, host=self.host, port=self.port, coordinators=tuple(
                dataclasses.replace(c, host=self.host, port=self.port) for c in found.coordinators
            ))  # fmt: skip
        return encode_response(request.api_key, request.version, correlation_id, answer)  # type: ignore[arg-type]


def _with_refusals(response: ProduceResponse, refused: list[tuple[str, int]]) -> ProduceResponse:
    by_topic: dict[str, list[PartitionProduceResponse]] = {
        t.name: list(t.partition_responses) for t in response.responses
    }
    for topic, index in refused:
        by_topic.setdefault(topic, []).append(
            PartitionProduceResponse(index, ErrorCode.MESSAGE_TOO_LARGE, -1)
        )
    return dataclasses.replace(response, responses=tuple(
        TopicProduceResponse(name, tuple(parts)) for name, parts in by_topic.items()
    ))  # fmt: skip


def _close(*sockets: socket.socket) -> None:
    for s in sockets:
        with contextlib.suppress(OSError):
            s.shutdown(socket.SHUT_RDWR)  # (wakes the other thread's recv; close alone would not)
        with contextlib.suppress(OSError):
            s.close()
