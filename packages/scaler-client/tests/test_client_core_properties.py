"""Properties of the client's core under random interleavings (hypothesis): every task ends in exactly one
outcome (a result, an error, or cancelled; never two, never none), no command's reply is lost or doubled,
and the lifecycle tables never meet a pair they lack."""

from __future__ import annotations

import collections
from typing import Any, Counter, Dict, List, Set

from core_driver import (  # conftest puts this directory on sys.path
    CLIENT_ID,
    FUNCTION,
    connected,
    put_ack,
    tid,
)
from hypothesis import given, settings
from hypothesis import strategies as st

from scaler.client.client_events import (
    TICK,
    Abort,
    Cancel,
    CancelRefused,
    Clear,
    Disconnect,
    FromScheduler,
    FromStorage,
    PutObject,
    Release,
    Reply,
    ReplyError,
    Shutdown,
    Stopped,
    Submit,
    SubmitGraph,
    TaskCancelled,
    TaskFailed,
    TaskResults,
    ToScheduler,
    ToStorage,
)
from scaler.client.client_lifecycles import ANY_TIME, LIVE, SESSION, TASK, SessionEvent, SessionState, TaskState
from scaler.protocol.errors import DisconnectedError
from scaler.protocol.messages import (
    Argument,
    ArgumentKind,
    ClientHeartbeatEcho,
    ClientShutdownResponse,
    DisconnectRequest,
    DisconnectResponse,
    GraphTask,
    ObjectRequest,
    ObjectRequestKind,
    ObjectResponse,
    ObjectStatus,
    PayloadKind,
    Refusal,
    Task,
    TaskBatch,
    TaskCancel,
    TaskCancelConfirm,
    TaskResult,
    TaskResultBatch,
    TaskStatus,
)

# Weighted: the common things happen often, the ends of the client (each stops it) rarely.
ACTIONS = [
    *["submit", "submit_large", "ack_put", "result", "cancel", "confirm", "echo"] * 4,
    *["submit_new_function", "graph", "refuse_cancel", "stored_result", "answer_get", "tick"] * 2,
    "send_object", "release", "refuse_put", "lose_get", "stray_result", "stray_confirm", "clear", "shutdown",
    "shutdown_answer", "disconnect", "disconnect_answer", "storage_refuses", "scheduler_leaves", "abort",
]  # fmt: skip


class World:
    """A core and the peers around it, played from a script of actions; it counts how each task and command
    ends."""

    def __init__(self, quota: int, reconnect: float = 0.0) -> None:
        # room in storage for one or two of the large arguments; ``quota`` tasks at the scheduler (0: none); a
        # client that waits ``reconnect`` seconds for a lost scheduler
        self.core = connected(argument_bytes=8, client_quota=quota, reconnect=reconnect)
        self.quota = quota
        self.plain: Set[bytes] = set()  # tasks sent in a TaskBatch that have not ended: the quota counts them
        self.now = 0.0
        self.submitted: List[bytes] = []  # in order
        self.ends: Counter[bytes] = collections.Counter()
        self.commands: Set[int] = set()
        self.replies: Counter[int] = collections.Counter()
        self.puts: List[ObjectRequest] = []  # put requests storage has not answered
        self.gets: List[ObjectRequest] = []
        self.stored: Dict[bytes, bytes] = {}  # result object ID -> payload, as the workers left them
        self.at_scheduler: List[bytes] = []  # tasks the scheduler got (and may answer)
        self.sent: Counter[bytes] = collections.Counter()
        self.cancels_sent: Set[bytes] = set()
        self.functions = [FUNCTION]
        self.numbers = iter(range(1, 1_000_000))
        self.stopped = False
        self.feed(PutObject(0, FUNCTION, b"function"))  # the first tasks wait for their function

    def feed(self, *events: Any) -> None:
        for event in (*events, TICK):
            for effect in self.core.handle(event, self.now):
                self.absorb(effect)

    def absorb(self, effect: Any) -> None:
        if isinstance(effect, TaskResults):
            for result in effect.results:
                self.end(result.task_id)
        elif isinstance(effect, (TaskFailed, TaskCancelled)):
            self.end(effect.task_id)
        elif isinstance(effect, CancelRefused):
            assert effect.task_id in self.submitted and not self.ends[effect.task_id], "refused after its end"
        elif isinstance(effect, (Reply, ReplyError)):
            assert effect.command_id in self.commands
            self.replies[effect.command_id] += 1
        elif isinstance(effect, Stopped):
            self.stopped = True
        elif isinstance(effect, ToScheduler):
            message = effect.message
            if isinstance(message, (TaskBatch, GraphTask)):
                ids = [task.task_id for task in message.tasks] if isinstance(message, TaskBatch) else message.targets
                if isinstance(message, TaskBatch):
                    self.plain.update(ids)
                    assert not self.quota or len(self.plain) <= self.quota, "more tasks sent than the quota"
                for task_id in ids:
                    assert not self.ends[task_id], "sent after its end"
                    self.sent[task_id] += 1
                self.at_scheduler.extend(ids)
            elif isinstance(message, TaskCancel):
                for task_id in message.task_ids:
                    assert self.sent[task_id], "a cancel for a task the scheduler never got"
                    self.cancels_sent.add(task_id)
        elif isinstance(effect, ToStorage) and isinstance(effect.message, ObjectRequest):
            request = effect.message
            if request.kind == ObjectRequestKind.PUT:
                self.puts.append(request)
            elif request.kind == ObjectRequestKind.GET:
                self.gets.append(request)

    def end(self, task_id: bytes) -> None:
        assert task_id in self.submitted, "an end for a task never submitted"
        self.ends[task_id] += 1
        self.plain.discard(task_id)

    def command(self) -> int:
        command_id = next(self.numbers)
        self.commands.add(command_id)
        return command_id

    def new_task(self, function_id: bytes, arguments: List[Argument] = ()) -> Task:  # type: ignore[assignment]
        task_id = tid(1000 + next(self.numbers))
        self.submitted.append(task_id)
        return Task(task_id=task_id, client_id=CLIENT_ID, function_id=function_id, arguments=list(arguments))

    def pick(self, items: List[Any], k: int) -> Any:
        return items.pop(k % len(items))

    def recent(self, k: int) -> bytes:
        """One of the last tasks submitted: often still waiting for storage, or held."""
        return self.submitted[-1 - k % len(self.submitted)]

    def do(self, action: str, k: int) -> None:
        getattr(self, action)(k)

    # --- the user ---------------------------------------------------------------------------------------

    def submit(self, k: int) -> None:
        self.feed(Submit([self.new_task(self.functions[k % len(self.functions)])], {}))

    def submit_new_function(self, k: int) -> None:
        function_id = b"function-%08d" % next(self.numbers)
        self.functions.append(function_id)
        self.feed(PutObject(0, function_id, b"f"), Submit([self.new_task(function_id)], {}))

    def submit_large(self, k: int) -> None:
        argument = b"argument-%08d" % next(self.numbers)
        task = self.new_task(FUNCTION, [Argument("", ArgumentKind.OBJECT, argument)])
        self.feed(Submit([task], {task.task_id: [(argument, b"x" * (k + 1))]}))

    def graph(self, k: int) -> None:
        literal = b"literal-%08d" % next(self.numbers)
        targets = [self.new_task(FUNCTION) for _ in range(1 + k % 2)]
        puts = [(literal, b"big literal")] if k % 3 else []
        temporary = [literal] if puts else []
        graph_id, target_ids = b"graph-%08d" % next(self.numbers), [t.task_id for t in targets]
        if k % 4 == 1:  # two targets, sent in two parts: the first names them
            first = GraphTask(graph_id=graph_id, tasks=targets[:1], targets=target_ids, more=True)
            self.feed(
                SubmitGraph(first, puts, [FUNCTION, *temporary], temporary, [FUNCTION], target_ids),
                SubmitGraph(GraphTask(graph_id=graph_id, tasks=targets[1:]), [], [], [], []),
            )
            return
        message = GraphTask(graph_id=graph_id, tasks=targets, targets=target_ids)
        self.feed(SubmitGraph(message, puts, [FUNCTION, *temporary], temporary, [FUNCTION], target_ids))

    def send_object(self, k: int) -> None:
        self.feed(PutObject(self.command(), b"object-%08d" % next(self.numbers), b"data"))

    def release(self, k: int) -> None:
        self.feed(Release([self.functions[k % len(self.functions)]]))

    def cancel(self, k: int) -> None:
        if self.at_scheduler and k % 2:
            self.feed(Cancel([self.at_scheduler[k % len(self.at_scheduler)]]))
        elif self.submitted:
            self.feed(Cancel([self.recent(k)]))

    def clear(self, k: int) -> None:
        self.feed(Clear(self.command()))

    def shutdown(self, k: int) -> None:
        self.feed(Shutdown(self.command()))

    def disconnect(self, k: int) -> None:
        self.feed(Disconnect(self.command()))

    def abort(self, k: int) -> None:
        self.feed(Abort(DisconnectedError("aborted")))

    # --- object storage -------------------------------------------------------------------------------

    def ack_put(self, k: int, status: ObjectStatus = ObjectStatus.OK) -> None:
        if self.puts:
            self.feed(put_ack(self.pick(self.puts, k), status))

    def refuse_put(self, k: int) -> None:
        self.ack_put(k, ObjectStatus.TOO_LARGE)

    def answer_get(self, k: int, found: bool = True) -> None:
        if not self.gets:
            return
        request = self.pick(self.gets, k)
        ids = list(request.object_ids)
        statuses = [ObjectStatus.OK if found else ObjectStatus.NOT_FOUND] * len(ids)
        blobs = [self.stored.get(object_id, b"value") for object_id in ids] if found else []
        self.feed(FromStorage(ObjectResponse(request.request_id, ObjectRequestKind.GET, ids, statuses), blobs))

    def lose_get(self, k: int) -> None:
        self.answer_get(k, found=False)

    def storage_refuses(self, k: int) -> None:
        self.feed(FromStorage(Refusal(reason="refused by the test"), []))

    # --- the scheduler -------------------------------------------------------------------------------

    def result(self, k: int, stored: bool = False) -> None:
        if not self.at_scheduler:
            return
        task_id = self.pick(self.at_scheduler, k)
        if stored:
            object_id = b"result-" + task_id
            self.stored[object_id] = b"value"
            result = TaskResult(task_id=task_id, status=TaskStatus.SUCCESS, payload_kind=PayloadKind.OBJECT,
                                payload=object_id)  # fmt: skip
        else:
            result = TaskResult(task_id=task_id, status=TaskStatus(k % 5), payload_kind=PayloadKind.INLINE)
        self.feed(FromScheduler(TaskResultBatch(results=[result])))

    def stored_result(self, k: int) -> None:
        self.result(k, stored=True)

    def stray_result(self, k: int) -> None:
        """A result for any task the client knows of (ended, never sent, ...): a duplicate or a wrong one."""
        if self.submitted:
            task_id = self.recent(k)
            kind = PayloadKind.OBJECT if k % 2 else PayloadKind.INLINE
            result = TaskResult(task_id=task_id, payload_kind=kind, payload=b"stray-" + task_id)
            self.feed(FromScheduler(TaskResultBatch(results=[result])))

    def stray_confirm(self, k: int) -> None:
        """A cancel confirmation (or refusal) the client did not ask for, for any task it knows of."""
        if self.submitted:
            self.feed(FromScheduler(TaskCancelConfirm(task_ids=[self.recent(k)], cancelled=[bool(k % 2)])))

    def confirm(self, k: int, cancelled: bool = True) -> None:
        if self.cancels_sent:
            task_id = sorted(self.cancels_sent)[k % len(self.cancels_sent)]  # sometimes answered twice
            if cancelled and task_id in self.at_scheduler:
                self.at_scheduler.remove(task_id)
            self.feed(FromScheduler(TaskCancelConfirm(task_ids=[task_id], cancelled=[cancelled])))

    def refuse_cancel(self, k: int) -> None:
        self.confirm(k, cancelled=False)

    def tick(self, k: int) -> None:
        self.now += k * 0.75  # the timeout is 10 s: sometimes a deadline passes
        self.feed()

    def echo(self, k: int) -> None:
        self.feed(FromScheduler(ClientHeartbeatEcho()))

    def shutdown_answer(self, k: int) -> None:
        self.feed(FromScheduler(ClientShutdownResponse(accepted=bool(k % 2), reason="")))

    def disconnect_answer(self, k: int) -> None:
        self.feed(FromScheduler(DisconnectResponse()))

    def scheduler_leaves(self, k: int) -> None:
        self.feed(FromScheduler(DisconnectRequest(reason="going away")))


@settings(max_examples=400, deadline=None)
@given(
    st.lists(st.tuples(st.sampled_from(ACTIONS), st.integers(min_value=0, max_value=7)), max_size=80),
    st.sampled_from(["silence", "disconnect", "clear_then_silence"]),
    st.sampled_from([0, 3]),
)
def test_every_task_ends_once_and_every_command_is_answered_once(script, ending, quota):
    """With the scheduler's quota of tasks (3) too: no more are ever sent at once, and the others still end."""
    world = World(quota)
    for action, k in script:
        world.do(action, k)
        assert all(count == 1 for count in world.ends.values()), "a task ended twice"
        assert all(count <= 1 for count in world.replies.values()), "a command answered twice"
        assert all(count == 1 for count in world.sent.values()), "a task sent twice"
    if ending == "disconnect":
        world.disconnect(0)
    elif ending == "clear_then_silence":
        world.clear(0)
    for _ in range(2):  # whatever is left, the scheduler is lost by then: a heartbeat goes, and stays unanswered
        world.now += 1000
        world.feed()
    assert world.stopped and world.core.state is SessionState.STOPPED and world.core.pending_tasks == 0
    assert len(set(world.submitted)) == len(world.submitted)
    assert world.ends == {task_id: 1 for task_id in world.submitted}, "every task ends exactly once"
    assert world.replies == {command_id: 1 for command_id in world.commands}, "every command is answered once"


def test_every_live_task_state_has_an_entry_for_everything_that_can_come_at_any_time():
    """The user's cancel, a failure, clear, the client's end, and any answer of the scheduler (bad or late
    input included) may come to a task in any state but NEW: the table has an entry for each, so a peer's
    message is dropped, never raised, and every task can still end."""
    assert set(LIVE) == TASK.states - TASK.terminal - {TaskState.NEW}
    for state in LIVE:
        for event in ANY_TIME:
            assert TASK.get(state, event) is not None, (state, event)
    for state in SESSION.states - SESSION.terminal - {SessionState.IDLE}:
        for event in (SessionEvent.SCHEDULER_LEAVING, SessionEvent.DISCONNECT, SessionEvent.ABORT):
            assert SESSION.get(state, event) is not None, (state, event)
