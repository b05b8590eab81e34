"""Nested tasks never deadlock: a property test of the scheduler core and the worker core together.

A simulated cluster, without sockets or processes: one real `SchedulerCore`, K real `WorkerCore`s (each with
its `ProcessorRunner`) that announce a queue capacity C, and for each worker a model of its processor (a
FIFO of tasks sent, one task running at a time, waiting tasks switched out and resumed in any order once
their wait is over). Every message travels on a first-in, first-out channel per pair of peers, as over
ZeroMQ. A random task tree runs: each task submits its children (through one client), waits for them,
then ends; a leaf ends at once. Hypothesis chooses the tree, K, C, how far each processor may send ahead,
and the order in which every message is delivered and every processor acts.

The rule under test (docs/scheduling.md, "Nested tasks"): a task that waits holds no room, at the
scheduler (its worker said so with `WaitingTasks`) and on its worker (its processor runs others), so as
long as a task of the tree is not done, some task can run. Checked: whatever the interleaving, something
can always happen until the root's result reaches the client, and then every task has ended exactly once.
"""

from __future__ import annotations

import itertools
from collections import deque
from typing import Any, Deque, Dict, List, Optional, Tuple

import cloudpickle
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from scaler.protocol import messages as m
from scaler.protocol import object_frames
from scaler.protocol.ids import IDGenerator
from scaler.protocol.version import PROTOCOL_VERSION
from scaler.scheduler.scheduler_core import SchedulerCore
from scaler.scheduler.scheduler_events import FromPeer, Send
from scaler.scheduler.scheduler_events import FromStorage as SchedulerFromStorage
from scaler.scheduler.scheduler_events import Start as SchedulerStart
from scaler.scheduler.scheduler_settings import SchedulerSettings
from scaler.worker.processor_protocol import Drop, Dropped, ProcessorResult, ProcessorTask, TaskWaiting
from scaler.worker.processor_runner import ProcessorOutput, ProcessorRunner, SendToProcessor, StartProcessor
from scaler.worker.worker_config import WorkerConfig
from scaler.worker.worker_core import WorkerCore
from scaler.worker.worker_events import (
    FromRunner,
    FromScheduler,
    FromStorage,
    SendToScheduler,
    SendToStorage,
    WorkerIdentity,
)
from scaler.worker.worker_events import Start as WorkerStart

CLIENT = b"C|sim|1|000000000000"
FUNCTION = b"F" * 16
SCHEDULER = "tcp://127.0.0.1:2345"

Tree = Tuple[Any, ...]  # a task: the tuple of its children's trees


class _Processor:
    """A worker's processor, as `scaler.worker.processor` behaves: it reads its pipe whenever no task runs,
    starts the head of its FIFO before it resumes a waiting task, and resumes waits in the order they end."""

    def __init__(self) -> None:
        self.pipe: Deque[Any] = deque()  # from the agent, not read
        self.fifo: Deque[bytes] = deque()
        self.current: Optional[bytes] = None
        self.waiting: List[bytes] = []
        self.resumable: Deque[bytes] = deque()
        self.number = 0  # its processor ID


class Cluster:
    def __init__(self, workers: int, capacity: int, pipeline_depth: int, tree: Tree) -> None:
        self.scheduler = SchedulerCore(SchedulerSettings(object_storage_address="tcp://127.0.0.1:1"))
        self.channels: Dict[Tuple[str, str], Deque[Any]] = {}
        self.workers: Dict[str, WorkerCore] = {}
        self.worker_ids: Dict[str, bytes] = {}
        self.processors: Dict[str, _Processor] = {}
        self.ids = IDGenerator()
        self.children: Dict[bytes, Tree] = {}  # task -> the tree below it
        self.parent: Dict[bytes, bytes] = {}
        self.pending: Dict[bytes, int] = {}  # task -> its children not done yet (once it submitted them)
        self.ended: Dict[bytes, int] = {}  # task -> results the client got for it
        self.root = self._new_task(tree, None)
        self.scheduler.handle(SchedulerStart(), 0.0)
        self.scheduler.handle(SchedulerFromStorage(m.HelloAck(PROTOCOL_VERSION)), 0.0)
        self._to_scheduler(CLIENT, m.Hello(PROTOCOL_VERSION, m.PeerRole.CLIENT, 1, "sim"))
        for number in range(workers):
            name = f"w{number}"
            worker_id = f"W|sim|{number}|000000000000".encode()
            config = WorkerConfig(SCHEDULER, queue_capacity=capacity)
            core = WorkerCore(
                config, WorkerIdentity(worker_id, 1, "sim", IDGenerator()), ProcessorRunner(pipeline_depth),
                result_batch_seconds=0.0,
            )  # fmt: skip
            self.workers[name], self.worker_ids[name], self.processors[name] = core, worker_id, _Processor()
            self._perform(name, core.handle(WorkerStart(), 0.0))
        self._send(("client", "scheduler"), m.TaskBatch([self._task(self.root)]))

    # ------------------------------------------------------------------------- the task tree

    def _new_task(self, tree: Tree, parent: Optional[bytes]) -> bytes:
        task_id = self.ids.next_id()
        self.children[task_id] = tree
        if parent is not None:
            self.parent[task_id] = parent
        return task_id

    def _task(self, task_id: bytes) -> m.Task:
        argument = m.Argument("", m.ArgumentKind.INLINE, cloudpickle.dumps(0))
        return m.Task(task_id=task_id, client_id=CLIENT, function_id=FUNCTION, arguments=[argument])

    @property
    def done(self) -> bool:
        return self.root in self.ended

    # ------------------------------------------------------------------------- what can happen

    def actions(self) -> List[Tuple[str, str]]:
        """Every step that can happen now: a channel delivers its first message, or a processor acts."""
        ready = [("deliver", f"{a}>{b}") for (a, b), queue in self.channels.items() if queue]
        for name, processor in self.processors.items():
            if processor.current is not None or (processor.pipe or processor.fifo or processor.resumable):
                ready.append(("processor", name))
        return sorted(ready)

    def step(self, action: Tuple[str, str]) -> None:
        kind, where = action
        if kind == "deliver":
            source, destination = where.split(">")
            self._deliver(source, destination, self.channels[(source, destination)].popleft())
        else:
            self._processor_acts(where)

    # ------------------------------------------------------------------------- peers

    def _send(self, channel: Tuple[str, str], message: Any) -> None:
        self.channels.setdefault(channel, deque()).append(message)

    def _deliver(self, source: str, destination: str, message: Any) -> None:
        if destination == "scheduler":
            self._to_scheduler(CLIENT if source == "client" else self.worker_ids[source], message)
        elif destination == "client":
            for result in message.results if type(message) is m.TaskResultBatch else ():
                self._client_gets(result)
        elif destination == "storage":
            self._storage_answers(source, message)
        elif source == "storage":
            self._perform(destination, self.workers[destination].handle(message, 0.0))
        elif source == "scheduler":
            self._perform(destination, self.workers[destination].handle(FromScheduler(message), 0.0))
        elif source.startswith("processor"):  # processor -> its agent
            self._perform(destination, self.workers[destination].handle(FromRunner(message), 0.0))

    def _to_scheduler(self, peer: bytes, message: Any) -> None:
        by_id = {worker_id: name for name, worker_id in self.worker_ids.items()}
        for effect in self.scheduler.handle(FromPeer(peer, message), 0.0):
            if type(effect) is Send and effect.to == CLIENT:
                self._send(("scheduler", "client"), effect.message)
            elif type(effect) is Send and effect.to in by_id:
                self._send(("scheduler", by_id[effect.to]), effect.message)

    def _perform(self, name: str, effects: List[Any]) -> None:
        processor = self.processors[name]
        for effect in effects:
            kind = type(effect)
            if kind is SendToScheduler:
                self._send((name, "scheduler"), effect.message)
            elif kind is SendToStorage and type(effect.message) is m.ObjectRequest:
                self._send((name, "storage"), effect.message)
            elif kind is StartProcessor:
                self.processors[name] = processor = _Processor()
                processor.number = effect.processor_id
                self.channels.pop((f"processor-{name}", name), None)  # what the old one wrote is lost with it
            elif kind is SendToProcessor:
                processor.pipe.append(effect.message)

    def _storage_answers(self, name: str, request: m.ObjectRequest) -> None:
        blobs, counts = object_frames.pack([b"function" for _ in request.object_ids])
        statuses = [m.ObjectStatus.OK] * len(request.object_ids)
        response = m.ObjectResponse(request.request_id, request.kind, request.object_ids, statuses)
        response.frame_counts = counts
        self._send(("storage", name), FromStorage(response, blobs))

    # ------------------------------------------------------------------------- the tasks' code

    def _processor_acts(self, name: str) -> None:
        processor = self.processors[name]
        if processor.current is None:
            if processor.pipe:
                for message in processor.pipe.popleft():
                    if type(message) is ProcessorTask:
                        processor.fifo.append(message.task_id)
                    elif type(message) is Drop and message.task_id in processor.fifo:
                        processor.fifo.remove(message.task_id)
                        self._tell(name, Dropped(message.task_id))
            elif processor.fifo:
                processor.current = processor.fifo.popleft()
            else:
                processor.current = processor.resumable.popleft()
                self._tell(name, TaskWaiting(processor.current, False))
            return
        task_id = processor.current
        children = self.children[task_id]
        if children and task_id not in self.pending:  # it submits its children, then waits for them
            child_ids = [self._new_task(child, task_id) for child in children]
            self.pending[task_id] = len(child_ids)
            self._send(("client", "scheduler"), m.TaskBatch([self._task(child) for child in child_ids]))
        if self.pending.get(task_id, 0) > 0:
            processor.current = None
            processor.waiting.append(task_id)
            self._tell(name, TaskWaiting(task_id, True))
            return
        processor.current = None
        self._tell(name, ProcessorResult(task_id, m.TaskStatus.SUCCESS, cloudpickle.dumps(1), "", None, 0.0))

    def _tell(self, name: str, message: Any) -> None:
        self._send((f"processor-{name}", name), ProcessorOutput(self.processors[name].number, message))

    def _client_gets(self, result: m.TaskResult) -> None:
        assert result.status == m.TaskStatus.SUCCESS, (result.status, result.error_text)
        self.ended[result.task_id] = self.ended.get(result.task_id, 0) + 1
        parent = self.parent.get(result.task_id)
        if parent is None:
            return
        self.pending[parent] -= 1
        if self.pending[parent] == 0:  # its wait is over: its processor resumes it once no task runs
            for processor in self.processors.values():
                if parent in processor.waiting:
                    processor.waiting.remove(parent)
                    processor.resumable.append(parent)


def trees(max_leaves: int) -> st.SearchStrategy[Tree]:
    return st.recursive(
        st.just(()), lambda below: st.lists(below, min_size=1, max_size=3).map(tuple), max_leaves=max_leaves
    )


def _size(tree: Tree) -> int:
    return 1 + sum(_size(child) for child in tree)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(
    tree=trees(40),
    workers=st.integers(1, 3),
    capacity=st.sampled_from([1, 1, 2, 3, 1000]),
    pipeline_depth=st.sampled_from([0, 2, 4]),
    data=st.data(),
)
def test_a_random_task_tree_always_completes_whatever_the_order_of_events(
    tree, workers, capacity, pipeline_depth, data
):
    cluster = Cluster(workers, capacity, pipeline_depth, tree)
    choices = data.draw(st.lists(st.integers(0, 1 << 16), max_size=400), label="the order of events")
    for choice in itertools.chain(choices, itertools.repeat(0)):  # then, the first thing that can happen
        if cluster.done:
            break
        actions = cluster.actions()
        assert actions, f"deadlock: nothing can happen and the root has not ended ({len(cluster.ended)} ended)"
        cluster.step(actions[choice % len(actions)])
        assert len(cluster.ended) <= _size(tree)
    assert set(cluster.ended) == set(cluster.children) and all(count == 1 for count in cluster.ended.values())
