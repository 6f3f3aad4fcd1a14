"""Durable pools through power cuts (harness.py): every API's apps send, the power goes at
random points (in the middle of group commits, during a recovery, under load), the host
comes back, recovers, and a real consumer reads everything back. The long run is
``make soak-power`` (tests/powercut/soak.py)."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from tests import ledger
from tests.integration.kafka_io import cluster, unique_topic
from tests.peers import Peer
from tests.powercut import harness
from tests.powercut.host import available_or_fail

pytestmark = [pytest.mark.integration, pytest.mark.early]
CUTS = 3  # a round of each API (make soak-power makes hundreds)


@pytest.mark.parametrize("mode", ["sync", "flush"])
def test_power_cuts_lose_nothing_acknowledged_and_deliver_exactly_once(
    tansu: Peer, tmp_path: Path, mode: str, pool_name: str
) -> None:
    available_or_fail()
    topic = unique_topic(f"powercut-{mode}")
    with cluster(tansu) as c:
        c.ensure_topic(topic, 3)
    seed = uuid.uuid4().int % 1_000_000
    outcome = harness.run(tansu.bootstrap, topic, tmp_path, mode, CUTS, seed, pool_name)
    assert outcome.problems == [], f"seed {seed}"
    assert outcome.cuts == CUTS
    assert outcome.acknowledged > 0 and outcome.delivered >= outcome.acknowledged - (
        outcome.lost_in_window
    )
    if mode == "sync":
        assert outcome.lost_in_window == 0
    ledger.note(f"power cuts, {mode}", power_cuts=outcome.cuts, records=outcome.delivered)
