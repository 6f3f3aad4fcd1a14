"""A web app that produces from its request handlers, as a user's would: the producer is
made at import (so in a preforking server's master), every request sends ``n`` records and
answers with those the broker acknowledged. WSGI (Flask) for gunicorn and uWSGI, ASGI for
uvicorn. Settings come from the environment: SHMKAFKA_TEST_BOOTSTRAP, _TOPIC, _POOL."""

from __future__ import annotations

import json
import os
from typing import Any

from flask import Flask, request

from shmkafka.kafka import KafkaProducer

TOPIC = os.environ["SHMKAFKA_TEST_TOPIC"]
producer = KafkaProducer(
    bootstrap_servers=os.environ["SHMKAFKA_TEST_BOOTSTRAP"],
    pool=os.environ["SHMKAFKA_TEST_POOL"],
    linger_ms=2,
)
app = Flask(__name__)


def produce(request_id: str, count: int) -> dict[str, Any]:
    """Send ``count`` records keyed by this worker's pid; the acknowledged ones' values."""
    pid = os.getpid()
    futures = [
        (f"{request_id}:{i}", producer.send(TOPIC, f"{request_id}:{i}".encode(), key=b"%d" % pid))
        for i in range(count)
    ]
    return {"pid": pid, "acked": [value for value, future in futures if future.get(20)]}


@app.route("/produce")
def produce_view() -> str:
    return json.dumps(produce(request.args["id"], int(request.args.get("n", "10"))))


async def asgi(scope: dict[str, Any], receive: Any, send: Any) -> None:
    """The same endpoint for uvicorn (a blocking send is fine for a test)."""
    if scope["type"] != "http":
        return
    query = dict(p.split("=", 1) for p in scope["query_string"].decode().split("&") if p)
    body = json.dumps(produce(query["id"], int(query.get("n", "10")))).encode()
    await send({"type": "http.response.start", "status": 200,
                "headers": [(b"content-type", b"application/json")]})  # fmt: skip
    await send({"type": "http.response.body", "body": body})
