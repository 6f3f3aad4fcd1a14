"""The transaction board: how a transactional producer's calls reach the Sender that runs the
transaction (its TransactionManager), and how their answers come back (region TXN).

A transactional pool serves one transactional id. The producer object that called
``init_transactions`` last owns it: INIT gives it a new ``generation``, and a command from an
older generation is answered FENCED (a second producer with the same id fences the first).

Rules:
- A producer posts under the kernel lock on TXN_BYTE, and only once the Sender has answered
  the previous command (``answered == posted``): it writes the command, its generation and
  payload, then ``posted`` + 1 last. A producer that dies holding the lock releases it. So
  an open command's fields stay as posted until it is answered (a restarted Sender reads
  them again: ``taken_command``).
- The Sender takes a command (``taken`` = its number) and answers it when it is done: code,
  action and message into the command's answer slot (number % TXN_ANSWER_SLOTS), the
  slot's number, then ``answered`` = its number last. One command is open at a time; the
  poster reads its own answer even once the next command was posted and answered.
- The Sender writes ``state`` and ``started`` at each change of its TransactionManager, so
  that a Sender started after a crash resumes a commit or an abort, or marks an open
  transaction abortable.
- Nothing secret is written here; a payload is the offsets of ``send_offsets``, as JSON.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from shmkafka.shm.errors import ShmError
from shmkafka.shm.layout import (
    I32,
    TXN_ANSWER,
    TXN_ANSWER_SLOTS,
    TXN_BYTE,
    TXN_HEADER,
    TXN_PAYLOAD_MAX,
    U32,
    U64,
)
from shmkafka.shm.locks import KernelLock
from shmkafka.shm.segment import Segment

# commands
INIT, BEGIN, OFFSETS, COMMIT, ABORT = 1, 2, 3, 4, 5

# answers' actions (the Java client's sorting of an error; STATE: a call the state refuses)
OK, RETRIABLE, ABORTABLE, FENCED, FATAL, STATE = 0, 1, 2, 3, 4, 5

# states (the TransactionManager's, by number)
UNINITIALIZED, INITIALIZING, READY, IN_TRANSACTION = 0, 1, 2, 3
COMMITTING, ABORTING, ABORTABLE_ERROR, FATAL_ERROR = 4, 5, 6, 7

_POSTED, _COMMAND, _GENERATION, _OWNER_PID, _PAYLOAD_LEN, _OWNER_START = 0, 8, 12, 16, 20, 24
_TAKEN, _ANSWERED, _STATE, _STARTED, _OWNER_GENERATION, _POSTER_SLOT = 32, 40, 53, 54, 56, 60
_TEXT_MAX = 240
_ANSWERS = TXN_HEADER.size
_PAYLOAD = _ANSWERS + TXN_ANSWER_SLOTS * TXN_ANSWER.size


class TxnBoardError(ShmError):
    """A command that cannot be posted (a payload too large)."""


@dataclass(frozen=True)
class Command:
    number: int
    command: int
    generation: int
    owner_pid: int
    owner_start: int
    payload: Any  # the decoded JSON (OFFSETS), else None
    poster_slot: int  # the process slot that posted it (woken with the answer)


@dataclass(frozen=True)
class Answer:
    number: int
    code: int
    action: int
    text: str

    @property
    def ok(self) -> bool:
        return self.action == OK


class TxnBoard:
    def __init__(self, segment: Segment) -> None:
        self.segment = segment
        self.at = segment.layout.txn_at

    def _u64(self, offset: int) -> int:
        return int(U64.unpack_from(self.segment.buf, self.at + offset)[0])

    def _u8(self, offset: int) -> int:
        return int(self.segment.buf[self.at + offset])

    # ------------------------------------------------------------------ the producer's

    def posted(self) -> int:
        return self._u64(_POSTED)

    def taken(self) -> int:
        return self._u64(_TAKEN)

    def answered(self) -> int:
        return self._u64(_ANSWERED)

    def state(self) -> int:
        return self._u8(_STATE)

    def owner_generation(self) -> int:
        return int(U32.unpack_from(self.segment.buf, self.at + _OWNER_GENERATION)[0])

    def generation_word(self) -> tuple[Any, int]:
        """(buffer, offset) of ``owner_generation``: the C entry's guard (a change of
        owner sends every record to the Python path, which raises FENCED)."""
        return self.segment.buf, self.at + _OWNER_GENERATION

    def newest_generation(self) -> int:
        """The generation of the last command posted (an INIT's is the newest owner's)."""
        return int(U32.unpack_from(self.segment.buf, self.at + _GENERATION)[0])

    def free(self) -> bool:
        """May a command be posted (the previous one is answered)?"""
        return self.answered() == self.posted()

    def lock(self) -> KernelLock:
        return KernelLock.for_segment(self.segment, TXN_BYTE)

    def post(
        self, command: int, generation: int, owner: tuple[int, int] = (0, 0), payload: Any = None,
        poster_slot: int = 0,
    ) -> int:  # fmt: skip
        """Write a command (the caller holds ``lock()`` and has seen ``free()``); returns its
        number."""
        blob = b"" if payload is None else json.dumps(payload).encode()
        if len(blob) > TXN_PAYLOAD_MAX:
            raise TxnBoardError(
                f"the offsets take {len(blob)} bytes, more than the {TXN_PAYLOAD_MAX} a "
                "transaction board holds: commit them in smaller sets"
            )
        buf, at = self.segment.buf, self.at
        number = self.posted() + 1
        start = at + _PAYLOAD
        buf[start : start + len(blob)] = blob
        U32.pack_into(buf, at + _COMMAND, command)
        U32.pack_into(buf, at + _GENERATION, generation)
        U32.pack_into(buf, at + _PAYLOAD_LEN, len(blob))
        U32.pack_into(buf, at + _POSTER_SLOT, poster_slot)
        if command == INIT:  # (only an INIT names the owner: a fenced one's posts do not)
            I32.pack_into(buf, at + _OWNER_PID, owner[0])
            U64.pack_into(buf, at + _OWNER_START, owner[1])
        self.segment.store_u64(at + _POSTED, number)  # publishes the command
        return number

    def answer_of(self, number: int) -> Answer | None:
        """The answer to command ``number``, once the Sender wrote it."""
        if self.answered() < number:
            return None
        at = self._answer_at(number)
        written, code, action, text_len, text = TXN_ANSWER.unpack_from(self.segment.buf, at)
        if written != number:  # (TXN_ANSWER_SLOTS later commands were answered since)
            return Answer(number, 0, FATAL, f"the answer to transaction call {number} was lost")
        return Answer(
            number, int(code), int(action), bytes(text[:text_len]).decode(errors="replace")
        )

    def _answer_at(self, number: int) -> int:
        return self.at + _ANSWERS + (number % TXN_ANSWER_SLOTS) * TXN_ANSWER.size

    # ------------------------------------------------------------------ the Sender's

    def next_command(self) -> Command | None:
        """The command posted and not yet taken, if any."""
        if self.posted() == self.taken():
            return None
        return self._command()

    def taken_command(self) -> Command:
        """The command taken and not answered (by a Sender that died: it is done again)."""
        return self._command()

    def _command(self) -> Command:
        posted = self.posted()
        fields = TXN_HEADER.unpack_from(self.segment.buf, self.at)
        _, command, generation, pid, length, start = fields[:6]
        begin = self.at + _PAYLOAD
        payload = json.loads(bytes(self.segment.buf[begin : begin + length])) if length else None
        poster = int(fields[11])
        return Command(posted, int(command), int(generation), int(pid), int(start), payload, poster)

    def take(self, command: Command) -> None:
        if command.command == INIT:
            U32.pack_into(self.segment.buf, self.at + _OWNER_GENERATION, command.generation)
        self.segment.store_u64(self.at + _TAKEN, command.number)

    def owner(self) -> tuple[int, int]:
        """(pid, start) of the producer whose INIT the Sender took last."""
        buf, at = self.segment.buf, self.at
        return int(I32.unpack_from(buf, at + _OWNER_PID)[0]), self._u64(_OWNER_START)

    def answer(self, number: int, code: int, action: int, text: str = "") -> None:
        encoded = text.encode()[:_TEXT_MAX]
        buf, at = self.segment.buf, self._answer_at(number)
        U64.pack_into(buf, at, 0)  # (a torn slot reads as lost, never as another answer)
        I32.pack_into(buf, at + 8, code)
        buf[at + 12] = action
        buf[at + 14 : at + 16] = len(encoded).to_bytes(2, "little")
        buf[at + 16 : at + 16 + len(encoded)] = encoded
        self.segment.store_u64(at, number)
        self.segment.store_u64(self.at + _ANSWERED, number)  # publishes the answer

    def publish_state(self, state: int, started: bool) -> None:
        buf = self.segment.buf
        buf[self.at + _STATE] = state
        buf[self.at + _STARTED] = int(started)

    def started(self) -> bool:
        return bool(self._u8(_STARTED))
