"""A produce request's encoding and its response's decoding, by hand (the Sender's path,
protocol/messages/produce.py) beside schema.py's generic walk (their twin), side by side.

    .venv/bin/python perf/bench_produce_codec.py [--partitions 5,16] [--versions 8,9]
    valgrind --tool=callgrind .venv/bin/python perf/bench_produce_codec.py \\
        --only hand --iterations 1000        # and 0; and --only walk: by difference

The request holds one topic and a batch of 361 bytes per partition (a fleet's request: a
few small batches); the response acknowledges each. Without ``--only`` it prints µs per
request and response (best of 5), walk and hand in the same run. Its instructions are
stable where its times are not: under callgrind, run ``--only`` with ``--iterations N``
and with 0, and divide the difference by N.
"""

from __future__ import annotations

import argparse
import timeit
from collections.abc import Callable

from shmkafka.protocol.messages import produce
from shmkafka.protocol.messages.produce import ProduceRequest, ProduceResponse
from shmkafka.protocol.primitives import Reader, Writer
from shmkafka.protocol.schema import decode_struct, encode_struct

TOPIC = "shmkafka-perf-x"
BATCH = (b"h" * 61, b"r" * 300)  # (a batch's header and its records, as the Sender's parts)


def _round_trips(partitions: int, version: int) -> dict[str, Callable[[], object]]:
    batches = tuple(produce.PartitionProduceData(i, BATCH) for i in range(partitions))
    topic = produce.TopicProduceData(TOPIC, batches)
    request = ProduceRequest(acks=1, timeout_ms=30_000, topic_data=(topic,))
    answers = tuple(
        produce.PartitionProduceResponse(i, 0, 1000 + i, -1, 0) for i in range(partitions)
    )
    body = ProduceResponse(responses=(produce.TopicProduceResponse(TOPIC, answers),)).encode(
        version
    )
    flexible = version >= ProduceRequest.FLEXIBLE_FROM

    def walk() -> object:
        encode_struct(Writer(by_reference=True), request, version, flexible)
        return decode_struct(Reader(body), ProduceResponse, version, flexible, "response")

    def hand() -> object:
        request.encode_into(Writer(by_reference=True), version)
        return ProduceResponse.decode(body, version, strict=False)

    assert walk() == hand()
    return {"walk": walk, "hand": hand}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--partitions", default="5,16")
    parser.add_argument("--versions", default="8,9")
    parser.add_argument("--only", choices=("walk", "hand"))
    parser.add_argument("--iterations", type=int, default=3000)
    args = parser.parse_args()
    for partitions in (int(p) for p in args.partitions.split(",")):
        for version in (int(v) for v in args.versions.split(",")):
            trips = _round_trips(partitions, version)
            if args.only is not None:
                for _ in range(args.iterations):
                    trips[args.only]()
                continue
            n = args.iterations
            walk, hand = (min(timeit.repeat(trips[k], number=n, repeat=5)) / n * 1e6
                          for k in ("walk", "hand"))  # fmt: skip
            print(f"{partitions:3d} partitions, v{version}: walk {walk:6.1f} µs, "
                  f"hand {hand:6.1f} µs ({hand / walk:.2f}x)")  # fmt: skip


if __name__ == "__main__":
    main()
