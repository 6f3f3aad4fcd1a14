"""shm/slots.py: a slot records its process's PID namespace, and a slot of another
namespace (a container sharing /dev/shm but not its PIDs) is never judged dead from here,
while one of this namespace whose process died is."""

from __future__ import annotations

import multiprocessing as mp

from shmkafka.pool.cleanup import live_processes
from shmkafka.pool.shared_pool import SharedPool
from shmkafka.shm.layout import S_PID_NS, U64
from shmkafka.shm.procs import OUT_OF_SIGHT, is_alive, pid_namespace
from shmkafka.shm.slots import SlotTable


def _attach_and_exit(pool_name: str) -> None:
    SharedPool.open(pool_name)  # (exits without detaching: its slot stays, dead)


def _dead_slot(pool: SharedPool) -> int:
    child = mp.get_context("fork").Process(target=_attach_and_exit, args=(pool.name,))
    child.start()
    child.join(30)
    assert child.exitcode == 0
    (dead,) = pool.slots.dead()
    return dead


def test_a_slot_records_its_pid_namespace(pool: SharedPool) -> None:
    at = pool.layout.slot_at(pool.slot) + S_PID_NS
    assert pid_namespace() > 0
    assert U64.unpack_from(pool.segment.buf, at)[0] == pid_namespace()
    assert pool.slots.identity(pool.slot)[2] == pool.started


def test_a_dead_process_of_another_namespace_is_never_judged_dead(pool: SharedPool) -> None:
    dead = _dead_slot(pool)
    # the same slot, as if claimed in another PID namespace: its pid means nothing here
    U64.pack_into(pool.segment.buf, pool.layout.slot_at(dead) + S_PID_NS, pid_namespace() + 1)
    slots = SlotTable(pool.segment)
    assert slots.identity(dead)[2] == OUT_OF_SIGHT and is_alive(12345, OUT_OF_SIGHT)
    assert dead not in slots.dead() and dead in slots.live()
    assert len(live_processes(pool.segment)) == 2  # (this one, and the one out of sight)
    pool.reclaim_dead()
    assert dead in slots.live()  # not reclaimed
    # of this namespace again, it is dead, and reclaimed
    U64.pack_into(pool.segment.buf, pool.layout.slot_at(dead) + S_PID_NS, pid_namespace())
    assert slots.dead() == [dead]
    pool.reclaim_dead()
    assert slots.dead() == [] and slots.live() == [pool.slot]


def test_a_slot_of_unknown_namespace_is_judged_as_before(pool: SharedPool) -> None:
    dead = _dead_slot(pool)
    U64.pack_into(pool.segment.buf, pool.layout.slot_at(dead) + S_PID_NS, 0)
    assert pool.slots.dead() == [dead]
