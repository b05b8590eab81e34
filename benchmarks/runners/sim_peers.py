"""Simulated workers and clients for the load simulator: many DEALER sockets in one thread, real messages.

Each peer is a ZeroMQ DEALER under its own identity that speaks the protocol as docs/protocol.md says, with the
project's codec (`scaler.protocol.codec`) and message classes: Hello and its HelloAck, heartbeats and their
echoes, task batches and results, balancing and cancels. They do nothing else, so that what is measured is the
scheduler: a worker answers each task at once, or after a set delay (one task at a time, like a worker with one
processor), and its heartbeat says truthfully what it holds (the last batch it received, how many tasks it
holds and their digest; the IDs themselves when the echo asks), as a real worker's does, or the scheduler would
queue its tasks again; a client sends tasks in batches of 1,000 written from one encoded template (only the
task IDs change) and counts the results.

`Loop` runs them all: epoll on the sockets' ZeroMQ file descriptors (``zmq.Poller`` over a thousand sockets
costs about a millisecond a call; epoll, a microsecond), timers in a heap.
"""

from __future__ import annotations

import heapq
import itertools
import os
import selectors
import time
from collections import deque
from typing import Any, Callable, Deque, Dict, List, Optional, Set, Tuple

import zmq

from scaler.protocol import codec, routed
from scaler.protocol import messages as m
from scaler.protocol.held_tasks import folded, task_term
from scaler.protocol.version import PROTOCOL_VERSION

BATCH_TASKS = 1000  # tasks per TaskBatch from a client, as the Python client sends them
_RESULT_PAYLOAD = b"\x80\x05N."  # pickle of None
_ARGUMENT = b"\x80\x05K\x07."  # pickle of 7: one small inline argument, as a no-op map task has
_FUNCTION = "bench_tasks.noop"  # the name its heartbeats give the tasks it ran


class Loop:
    """Many peers in one thread: their sockets read through epoll, their timers kept in a heap."""

    def __init__(self, max_sockets: int = 8192) -> None:
        self.context = zmq.Context()
        self.context.set(zmq.MAX_SOCKETS, max_sockets)
        self._selector = selectors.EpollSelector()
        self._timers: List[Tuple[float, int, Callable[[float], None]]] = []
        self._order = itertools.count()
        self._touched: Set[Peer] = set()  # peers that sent outside their own read: read them again
        self.peers: List[Peer] = []

    def add(self, peer: Peer) -> None:
        self.peers.append(peer)
        self._selector.register(peer.socket.getsockopt(zmq.FD), selectors.EVENT_READ, peer)
        self._touched.add(peer)

    def remove(self, peer: Peer) -> None:
        self._selector.unregister(peer.socket.getsockopt(zmq.FD))
        self.peers.remove(peer)
        self._touched.discard(peer)
        peer.socket.close(linger=0)

    def call_at(self, when: float, callback: Callable[[float], None]) -> None:
        heapq.heappush(self._timers, (when, next(self._order), callback))

    def touched(self, peer: Peer) -> None:
        """``peer`` sent outside its own read: a send can consume its file descriptor's edge, so read it again."""
        self._touched.add(peer)

    def run_until(self, done: Callable[[], bool], timeout: float, what: str) -> None:
        """Serve every peer until ``done()``; `TimeoutError` naming ``what`` after ``timeout`` seconds."""
        deadline = time.monotonic() + timeout
        timers = self._timers
        while not done():
            now = time.monotonic()
            if now > deadline:
                raise TimeoutError(f"{what}: not done within {timeout:g} s")
            wait = min(deadline - now, 0.05)
            if timers:
                wait = max(0.0, min(wait, timers[0][0] - now))
            if self._touched:
                wait = 0.0
            for key, _ in self._selector.select(wait):
                self._touched.add(key.data)
            now = time.monotonic()
            while timers and timers[0][0] <= now:
                _, _, callback = heapq.heappop(timers)
                callback(now)
            while self._touched:
                touched, self._touched = self._touched, set()
                for peer in touched:
                    peer.read(now)

    def close(self) -> None:
        for peer in list(self.peers):
            self.remove(peer)
        self._selector.close()
        self.context.term()


class Peer:
    """A DEALER under ``identity`` connected to the scheduler; its messages go to ``on_message``."""

    role = m.PeerRole.CLIENT

    def __init__(self, loop: Loop, address: str, identity: bytes) -> None:
        self.loop = loop
        self.identity = identity
        self.socket = loop.context.socket(zmq.DEALER)
        self.socket.setsockopt(zmq.IDENTITY, identity)
        self.socket.setsockopt(zmq.LINGER, 0)
        self.socket.setsockopt(zmq.SNDHWM, 0)
        self.socket.setsockopt(zmq.RCVHWM, 0)
        self.socket.connect(address)
        self.greeted_at: Optional[float] = None  # when its HelloAck came
        self.heartbeat_interval = 1.0
        self.heartbeats = 0
        self.echoes = 0
        self.problems: List[str] = []  # what the scheduler said that a correct scheduler would not
        loop.add(self)

    def send(self, message: Any) -> None:
        self.socket.send_multipart(codec.encode(message), copy=False)

    def send_frame(self, frame: Any) -> None:
        self.socket.send(frame, copy=False)

    def hello(self, worker_info: Optional[m.WorkerInfo] = None) -> None:
        info = worker_info or m.WorkerInfo()
        self.send(m.Hello(PROTOCOL_VERSION, self.role, os.getpid(), "simulator", info))

    def read(self, now: float) -> None:
        socket = self.socket
        while True:
            try:
                frames = socket.recv_multipart(zmq.NOBLOCK, copy=False)
            except zmq.Again:
                return
            message, _ = routed.decode_routed(frames)
            self.on_message(message, now)

    def on_message(self, message: Any, now: float) -> None:
        kind = type(message)
        if kind is m.HelloAck:
            self.greeted_at = now
            if message.heartbeat_interval_seconds > 0:
                self.heartbeat_interval = message.heartbeat_interval_seconds
            # heartbeats spread over the interval, as peers started at different times would send them
            self.loop.call_at(now + self.heartbeat_interval * _spread(self.identity), self._beat)
        elif kind is m.Refusal:
            self.problems.append(f"refused: {message.reason}")
        else:
            self.problems.append(f"unexpected {kind.__name__}")

    def _beat(self, now: float) -> None:
        if self.socket.closed:  # removed since
            return
        self.heartbeats += 1
        self.send(self.heartbeat())
        self.loop.touched(self)
        self.loop.call_at(now + self.heartbeat_interval, self._beat)

    def heartbeat(self) -> Any:
        raise NotImplementedError


def _result(task_id: bytes, attempt: int) -> m.TaskResult:
    return m.TaskResult(task_id, attempt, m.TaskStatus.SUCCESS, m.PayloadKind.INLINE, _RESULT_PAYLOAD)


def _spread(identity: bytes) -> float:
    return (hash(identity) % 1000) / 1000


class SimWorker(Peer):
    """A worker that answers each task at once (``delay`` 0) or runs them one at a time, ``delay`` seconds
    each. It holds what it was sent until it answers, and says so in each heartbeat."""

    role = m.PeerRole.WORKER

    def __init__(self, loop: Loop, address: str, identity: bytes, delay: float = 0.0, capacity: int = 0) -> None:
        self.delay = delay
        self.capacity = capacity  # 0: the scheduler's default (1,000), as a real worker's default
        self.held: Dict[bytes, int] = {}  # task ID -> attempt, in the order received
        self.queue: Deque[bytes] = deque()  # for a delayed worker: held tasks not started, in order
        self.running: Optional[bytes] = None
        self.finish_at = 0.0
        self.last_batch = 0
        self.batches = 0
        self.first_batch_at: Optional[float] = None
        self.tasks_done = 0
        self.task_seconds = 0.0  # reported per function, as a real worker's heartbeat does
        self.given_back = 0
        super().__init__(loop, address, identity)

    def hello(self, worker_info: Optional[m.WorkerInfo] = None) -> None:
        super().hello(m.WorkerInfo(slots=1, queue_capacity=self.capacity))

    def on_message(self, message: Any, now: float) -> None:
        kind = type(message)
        if kind is m.TaskBatch:
            self._on_tasks(message, now)
        elif kind is m.WorkerHeartbeatEcho:
            self.echoes += 1
            if message.send_task_ids:
                self.send(self.heartbeat(list(self.held)))
        elif kind is m.BalanceRequest:
            self._give_back(message.count)
        elif kind is m.TaskCancel:
            cancelled = [task_id in self.held for task_id in message.task_ids]
            for task_id, held in zip(message.task_ids, cancelled, strict=True):
                if held:
                    self._drop(task_id)
            self.send(m.TaskCancelConfirm(list(message.task_ids), cancelled))
        elif kind is m.DisconnectRequest:
            self.problems.append(f"told to leave: {message.reason}")
        else:
            super().on_message(message, now)

    def _on_tasks(self, batch: Any, now: float) -> None:
        self.batches += 1
        if self.first_batch_at is None:
            self.first_batch_at = now
        self.last_batch = batch.sequence
        if self.delay <= 0:  # answered at once: it never holds a task between two messages
            self.tasks_done += len(batch.tasks)
            self.task_seconds += 1e-6 * len(batch.tasks)
            results = [_result(task.task_id, task.attempt) for task in batch.tasks]
            self.send(m.TaskResultBatch(results))
            return
        for task in batch.tasks:
            self.held[task.task_id] = task.attempt
            self.queue.append(task.task_id)
        if self.running is None:
            self._start_next(now)

    def _start_next(self, start: float) -> None:
        if not self.queue:
            self.running = None
            return
        self.running = self.queue.popleft()
        self.finish_at = start + self.delay
        self.loop.call_at(self.finish_at, self._finish)

    def _finish(self, now: float) -> None:
        """Every task whose time is up (a loop turn may come late: several), answered in one batch."""
        if self.socket.closed:  # removed since
            return
        results = []
        while self.running is not None and self.finish_at <= now:
            task_id = self.running
            attempt = self.held.pop(task_id, None)
            if attempt is not None:  # else cancelled meanwhile
                results.append(_result(task_id, attempt))
            finished_at = self.finish_at
            self.running = None
            if self.queue:
                self.running = self.queue.popleft()
                self.finish_at = finished_at + self.delay
        if self.running is not None:
            self.loop.call_at(self.finish_at, self._finish)
        if results:
            self.tasks_done += len(results)
            self.task_seconds += self.delay * len(results)
            self.send(m.TaskResultBatch(results))
            self.loop.touched(self)

    def _give_back(self, count: int) -> None:
        """A BalanceRequest: the newest tasks not started go back."""
        given = []
        while self.queue and len(given) < count:
            task_id = self.queue.pop()
            del self.held[task_id]
            given.append(task_id)
        self.given_back += len(given)
        self.send(m.BalanceResponse(given))

    def _drop(self, task_id: bytes) -> None:
        del self.held[task_id]
        if self.running == task_id:
            self.running = None
            self._start_next(time.monotonic())
        else:
            self.queue.remove(task_id)

    def heartbeat(self, task_ids: Optional[List[bytes]] = None) -> m.WorkerHeartbeat:
        digest = 0
        for task_id in self.held:
            digest ^= task_term(task_id)
        functions = [m.FunctionStats(_FUNCTION, self.tasks_done, 0, self.task_seconds)] if self.tasks_done else []
        return m.WorkerHeartbeat(
            queued_tasks=len(self.queue),
            running_tasks=int(self.running is not None),
            functions=functions,
            last_batch=self.last_batch,
            held_tasks=len(self.held),
            held_digest=folded(digest),
            held_task_ids=task_ids or [],
        )


class SimClient(Peer):
    """A client that submits ``total`` no-op tasks, keeping at most ``window`` of them unanswered, and checks
    that each comes back once, successful."""

    role = m.PeerRole.CLIENT

    def __init__(self, loop: Loop, address: str, identity: bytes) -> None:
        super().__init__(loop, address, identity)
        self._templates = _Templates(identity)
        self._templates.get(BATCH_TASKS)
        self._id_prefix = os.urandom(8)
        self._counter = itertools.count(1)
        self.outstanding: Set[bytes] = set()
        self.to_submit = 0
        self.window = 0
        self.batch = BATCH_TASKS
        self.submitted = 0
        self.results = 0
        self.keep_ids = True  # False: count only (tasks that stay queued need no bookkeeping here)

    def submit(self, total: int, window: int, batch: int = BATCH_TASKS) -> None:
        """Send ``total`` more tasks, ``batch`` per message, ``window`` at most unanswered at a time."""
        self.to_submit += total
        self.window = window
        self.batch = batch
        self._pump()
        self.loop.touched(self)

    def _pump(self) -> None:
        """Whole batches (the last one may be short), while the window has room for them."""
        while self.to_submit > 0:
            count = min(self.batch, self.to_submit)
            if self.submitted - self.results + count > max(self.window, count):
                return
            self.send_frame(self._batch(count))
            self.to_submit -= count
            self.submitted += count

    def _batch(self, count: int) -> bytes:
        """An encoded TaskBatch of ``count`` fresh tasks: the template with new task IDs written in place."""
        template, offsets = self._templates.get(count)
        frame = bytearray(template)
        prefix = self._id_prefix
        keep = self.keep_ids
        outstanding = self.outstanding
        for offset in offsets:
            task_id = prefix + next(self._counter).to_bytes(8, "big")
            frame[offset : offset + 16] = task_id
            if keep:
                outstanding.add(task_id)
        return bytes(frame)

    def on_message(self, message: Any, now: float) -> None:
        kind = type(message)
        if kind is m.TaskResultBatch:
            outstanding = self.outstanding
            for result in message.results:
                if result.status != m.TaskStatus.SUCCESS:
                    self.problems.append(f"task {result.task_id.hex()} ended {result.status.name}")
                if self.keep_ids:
                    if result.task_id not in outstanding:
                        self.problems.append(f"a result for task {result.task_id.hex()}, not outstanding")
                    outstanding.discard(result.task_id)
            self.results += len(message.results)
            self._pump()
        elif kind is m.ClientHeartbeatEcho:
            self.echoes += 1
        else:
            super().on_message(message, now)

    def heartbeat(self) -> m.ClientHeartbeat:
        return m.ClientHeartbeat(pending_tasks=self.submitted - self.results)


class _Templates:
    """Encoded TaskBatches of a client, one per size it sends, and where each task ID lies in its frame."""

    def __init__(self, client_id: bytes) -> None:
        self._client_id = client_id
        self._made: Dict[int, Tuple[bytes, List[int]]] = {}

    def get(self, count: int) -> Tuple[bytes, List[int]]:
        made = self._made.get(count)
        if made is None:
            marks = [b"\xa5\x5a" + os.urandom(14) for _ in range(count)]
            argument = [m.Argument("", m.ArgumentKind.INLINE, _ARGUMENT)]
            tasks = [
                m.Task(task_id=mark, client_id=self._client_id, function_id=b"simulated-noop-f", arguments=argument)
                for mark in marks
            ]
            (frame,) = codec.encode(m.TaskBatch(tasks))
            offsets, start = [], 0
            for mark in marks:  # in the order of the tasks
                start = frame.index(mark, start)
                offsets.append(start)
            made = self._made[count] = (frame, offsets)
        return made
