"""An asyncio web app (Starlette) that produces from its request handlers with
``shmkafka.aiokafka.AIOKafkaProducer``, as a FastAPI/Starlette user's would: the producer is
started in each worker's lifespan, every request sends ``n`` records, awaits their
acknowledgements and answers with the values acknowledged. Settings come from the
environment: SHMKAFKA_TEST_BOOTSTRAP, _TOPIC, _POOL."""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from shmkafka.aiokafka import AIOKafkaProducer

TOPIC = os.environ["SHMKAFKA_TEST_TOPIC"]
producer: AIOKafkaProducer | None = None


@asynccontextmanager
async def lifespan(app: Starlette) -> AsyncIterator[None]:
    global producer
    producer = AIOKafkaProducer(
        bootstrap_servers=os.environ["SHMKAFKA_TEST_BOOTSTRAP"],
        pool=os.environ["SHMKAFKA_TEST_POOL"],
        linger_ms=2,
    )
    await producer.start()
    try:
        yield
    finally:
        await producer.stop()


async def produce(request: Request) -> JSONResponse:
    assert producer is not None
    request_id, count = request.query_params["id"], int(request.query_params.get("n", "10"))
    key = b"%d" % os.getpid()
    values = [f"{request_id}:{i}" for i in range(count)]
    futures = [await producer.send(TOPIC, v.encode(), key=key) for v in values]
    results = await asyncio.gather(*futures, return_exceptions=True)
    acked = [v for v, r in zip(values, results, strict=True) if not isinstance(r, BaseException)]
    return JSONResponse({"pid": os.getpid(), "acked": acked})


app = Starlette(routes=[Route("/produce", produce)], lifespan=lifespan)
