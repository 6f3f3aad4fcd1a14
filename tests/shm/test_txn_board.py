"""The transaction board (shm/txn_board.py): commands in order, one open at a time, and each
poster's own answer readable after the next command was posted and answered."""

from __future__ import annotations

from shmkafka.pool.shared_pool import SharedPool
from shmkafka.shm import txn_board as board


def test_a_posters_answer_survives_the_next_command(pool: SharedPool) -> None:
    txn = pool.txn
    with txn.lock():
        first = txn.post(board.COMMIT, 1, (1, 1))
    command = txn.next_command()
    assert command is not None and command.number == first and command.command == board.COMMIT
    txn.take(command)
    assert txn.next_command() is None and not txn.free()
    txn.answer(first, 90, board.FENCED, "fenced")
    assert txn.free()
    with txn.lock():  # (another producer posts at once, and is answered)
        second = txn.post(board.BEGIN, 2, (2, 2))
    taken = txn.next_command()
    assert taken is not None
    txn.take(taken)
    txn.answer(second, 0, board.OK)
    mine = txn.answer_of(first)  # (read late: still the first poster's own)
    assert mine is not None and (mine.code, mine.action, mine.text) == (90, board.FENCED, "fenced")
    theirs = txn.answer_of(second)
    assert theirs is not None and theirs.ok
    assert txn.answer_of(second + 1) is None


def test_an_answer_overwritten_long_after_reads_as_lost(pool: SharedPool) -> None:
    txn = pool.txn
    numbers = []
    for i in range(board.TXN_ANSWER_SLOTS + 1):
        with txn.lock():
            numbers.append(txn.post(board.BEGIN, 1, (1, 1)))
        command = txn.next_command()
        assert command is not None
        txn.take(command)
        txn.answer(numbers[-1], 0, board.OK, f"answer {i}")
    lost = txn.answer_of(numbers[0])
    assert lost is not None and lost.action == board.FATAL and "lost" in lost.text
    last = txn.answer_of(numbers[-1])
    assert last is not None and last.text == f"answer {board.TXN_ANSWER_SLOTS}"


def test_offsets_travel_as_json_and_too_many_are_refused(pool: SharedPool) -> None:
    import pytest

    txn = pool.txn
    payload = {"group_id": "g", "offsets": [["t", 0, 5, "m", 0]]}
    with txn.lock():
        txn.post(board.OFFSETS, 1, (1, 1), payload)
    command = txn.next_command()
    assert command is not None and command.payload == payload
    huge = {"group_id": "g", "offsets": [["t" * 200, i, i, "", -1] for i in range(1000)]}
    with pytest.raises(board.TxnBoardError, match="smaller sets"):
        txn.post(board.OFFSETS, 1, (1, 1), huge)
