"""The scheduler core, driven directly: no sockets, no processes."""

from __future__ import annotations

from collections import Counter
from typing import Dict, List

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from scaler.protocol import codec, delegation
from scaler.protocol import messages as m
from scaler.protocol.lifecycle import TransitionError
from scaler.protocol.routed import decode_routed
from scaler.protocol.version import PROTOCOL_VERSION, TASK_OUTPUT_VERSION
from scaler.scheduler.scheduler_core import SchedulerCore
from scaler.scheduler.scheduler_events import (
    STORAGE,
    FromPeer,
    FromStorage,
    MonitorSubscription,
    Publish,
    Send,
    Shutdown,
    Start,
    Tick,
)
from scaler.scheduler.scheduler_settings import SchedulerSettings
from scaler.scheduler.task_lifecycle import TASK_LIFECYCLE, TaskEvent, TaskState

CLIENT = b"C|host|1|aa"
OTHER_CLIENT = b"C|host|9|ff"
WORKER_A = b"W|host|2|aa"
WORKER_B = b"W|host|3|bb"


def hello(role: m.PeerRole, capacity: int = 10, major: int = PROTOCOL_VERSION.major, caps=()) -> m.Hello:
    capabilities = [m.Capability(name, -1) for name in caps]
    return m.Hello(m.Version(major, 0), role, 1, "host", m.WorkerInfo(1, capacity, capabilities))


def sent(effects, to=None, kind=None) -> List:
    return [e.message for e in effects if type(e) is Send and (to is None or e.to == to)
            and (kind is None or type(e.message) is kind)]  # fmt: skip


def task(n: int, priority: int = 0, **fields) -> m.Task:
    return m.Task(task_id=n.to_bytes(16, "big"), function_id=b"f", priority=priority, **fields)


def serving(core: SchedulerCore) -> SchedulerCore:
    """The core once its object storage server answered: it serves clients and workers."""
    core.handle(Start(), 0.0)
    core.handle(FromStorage(m.HelloAck(PROTOCOL_VERSION)), 0.0)
    return core


def admitted(core: SchedulerCore, effects: List, now: float = 0.0) -> List:
    """``effects``, then what the core does once the storage server answered the admissions among them (as a
    server of 1.8 does: each client's HelloAck leaves then)."""
    answers = [
        m.ObjectResponse(e.message.request_id, m.ObjectRequestKind.ADMIT)
        for e in effects
        if type(e) is Send and e.to == STORAGE and type(e.message) is m.ObjectRequest
        and e.message.kind == m.ObjectRequestKind.ADMIT
    ]  # fmt: skip
    return [*effects, *(effect for answer in answers for effect in core.handle(FromStorage(answer), now))]


def connect_client(core: SchedulerCore, client: bytes = CLIENT, now: float = 0.0, **fields) -> List:
    """A client says Hello and storage admits it: the effects of both."""
    return admitted(core, core.handle(FromPeer(client, hello(m.PeerRole.CLIENT, **fields)), now), now)


def core_with(workers=(WORKER_A,), capacity=10, **options) -> SchedulerCore:
    core = serving(SchedulerCore(SchedulerSettings(object_storage_address="tcp://127.0.0.1:1", **options)))
    assert type(sent(connect_client(core), to=CLIENT)[0]) is m.HelloAck
    for worker in workers:
        core.handle(FromPeer(worker, hello(m.PeerRole.WORKER, capacity)), 0.0)
    return core


def result(task_id: bytes, attempt: int = 1, status=m.TaskStatus.SUCCESS) -> m.TaskResult:
    return m.TaskResult(task_id, attempt, status, m.PayloadKind.INLINE, b"x", "")


def test_wrong_major_version_is_refused_naming_both_versions():
    core = serving(SchedulerCore(SchedulerSettings()))
    (refusal,) = sent(core.handle(FromPeer(CLIENT, hello(m.PeerRole.CLIENT, major=99)), 0.0))
    assert type(refusal) is m.Refusal
    assert "99.0" in refusal.reason and f"{PROTOCOL_VERSION.major}.{PROTOCOL_VERSION.minor}" in refusal.reason
    assert core.client_ids == []


def test_message_before_hello_is_refused():
    core = serving(SchedulerCore(SchedulerSettings()))
    (refusal,) = sent(core.handle(FromPeer(CLIENT, m.TaskBatch([task(1)])), 0.0))
    assert type(refusal) is m.Refusal and "Hello" in refusal.reason
    assert core.task_count == 0


def test_tasks_are_spread_evenly_and_results_routed_to_the_client():
    core = core_with(workers=(WORKER_A, WORKER_B))
    effects = core.handle(FromPeer(CLIENT, m.TaskBatch([task(i) for i in range(6)])), 1.0)
    batches = {to: msg for to, msg in [(e.to, e.message) for e in effects] if type(msg) is m.TaskBatch}
    assert sorted(len(b.tasks) for b in batches.values()) == [3, 3]
    assert all(t.attempt == 1 and t.client_id == CLIENT for b in batches.values() for t in b.tasks)
    first = batches[WORKER_A].tasks[0]
    (back,) = sent(core.handle(FromPeer(WORKER_A, m.TaskResultBatch([result(first.task_id)])), 2.0), to=CLIENT)
    assert [r.task_id for r in back.results] == [first.task_id]
    assert core.task_count == 5


def test_result_from_a_worker_that_does_not_own_the_task_is_dropped():
    core = core_with(workers=(WORKER_A, WORKER_B))
    effects = core.handle(FromPeer(CLIENT, m.TaskBatch([task(1)])), 1.0)
    owner = next(e.to for e in effects if type(e.message) is m.TaskBatch)
    other = WORKER_B if owner == WORKER_A else WORKER_A
    assert sent(core.handle(FromPeer(other, m.TaskResultBatch([result(task(1).task_id)])), 2.0), to=CLIENT) == []
    assert (
        sent(core.handle(FromPeer(owner, m.TaskResultBatch([result(task(1).task_id, attempt=2)])), 2.0), to=CLIENT)
        == []
    )
    assert core.dropped_results == 2
    assert sent(core.handle(FromPeer(owner, m.TaskResultBatch([result(task(1).task_id)])), 2.0), to=CLIENT)


def test_tasks_beyond_capacity_wait_and_follow_priority():
    core = core_with(capacity=1)
    effects = core.handle(FromPeer(CLIENT, m.TaskBatch([task(1), task(2, priority=5), task(3, priority=1)])), 1.0)
    (batch,) = sent(effects, to=WORKER_A, kind=m.TaskBatch)
    assert [t.task_id for t in batch.tasks] == [task(2).task_id]
    effects = core.handle(FromPeer(WORKER_A, m.TaskResultBatch([result(task(2).task_id)])), 2.0)
    (batch,) = sent(effects, to=WORKER_A, kind=m.TaskBatch)
    assert [t.task_id for t in batch.tasks] == [task(3).task_id]


def test_a_dead_workers_tasks_run_elsewhere_with_a_new_attempt():
    core = core_with(workers=(WORKER_A,), worker_timeout_seconds=10)
    core.handle(FromPeer(CLIENT, m.TaskBatch([task(1)])), 1.0)
    core.handle(FromPeer(WORKER_B, hello(m.PeerRole.WORKER)), 5.0)
    core.handle(FromPeer(CLIENT, m.ClientHeartbeat()), 12.0)
    core.handle(FromPeer(WORKER_B, m.WorkerHeartbeat()), 12.0)
    effects = core.handle(Tick(), 12.0)
    (batch,) = sent(effects, to=WORKER_B, kind=m.TaskBatch)
    assert batch.tasks[0].attempt == 2
    assert core.worker_ids == [WORKER_B]
    # the dead worker's late result is no longer accepted
    assert sent(core.handle(FromPeer(WORKER_A, m.TaskResultBatch([result(task(1).task_id)])), 13.0), kind=m.Refusal)


def test_cancel_of_queued_running_and_finished_tasks_is_always_confirmed():
    core = core_with(capacity=1)
    core.handle(FromPeer(CLIENT, m.TaskBatch([task(1), task(2)])), 1.0)  # 1 assigned, 2 queued
    effects = core.handle(FromPeer(CLIENT, m.TaskCancel([task(2).task_id, task(9).task_id])), 2.0)
    (confirm,) = sent(effects, to=CLIENT, kind=m.TaskCancelConfirm)
    assert dict(zip(confirm.task_ids, confirm.cancelled, strict=True)) == {
        task(2).task_id: True,
        task(9).task_id: False,
    }
    (cancel,) = sent(core.handle(FromPeer(CLIENT, m.TaskCancel([task(1).task_id])), 3.0), to=WORKER_A)
    assert cancel.task_ids == [task(1).task_id]
    effects = core.handle(FromPeer(WORKER_A, m.TaskCancelConfirm([task(1).task_id], [True])), 4.0)
    (confirm,) = sent(effects, to=CLIENT, kind=m.TaskCancelConfirm)
    assert confirm.cancelled == [True]
    assert core.task_count == 0


def test_a_result_that_crosses_a_cancel_wins_and_the_cancel_is_denied():
    core = core_with()
    core.handle(FromPeer(CLIENT, m.TaskBatch([task(1)])), 1.0)
    core.handle(FromPeer(CLIENT, m.TaskCancel([task(1).task_id])), 2.0)
    effects = core.handle(FromPeer(WORKER_A, m.TaskResultBatch([result(task(1).task_id)])), 3.0)
    assert sent(effects, to=CLIENT, kind=m.TaskResultBatch)
    (confirm,) = sent(effects, to=CLIENT, kind=m.TaskCancelConfirm)
    assert confirm.cancelled == [False]


def test_a_client_that_leaves_has_its_tasks_cancelled_and_objects_cleared():
    core = core_with(capacity=1)
    core.handle(FromPeer(CLIENT, m.TaskBatch([task(1), task(2)])), 1.0)
    effects = core.handle(FromPeer(CLIENT, m.DisconnectRequest()), 2.0)
    assert sent(effects, to=WORKER_A, kind=m.TaskCancel)[0].task_ids == [task(1).task_id]
    (clear,) = sent(effects, to=STORAGE)
    assert clear.kind == m.ObjectRequestKind.CLEAR_OWNER and clear.owner_id == CLIENT
    assert sent(effects, to=CLIENT, kind=m.DisconnectResponse)
    core.handle(FromPeer(WORKER_A, m.TaskCancelConfirm([task(1).task_id], [True])), 3.0)
    assert core.task_count == 0


def test_protected_scheduler_refuses_shutdown():
    core = core_with(protected=True)
    effects = core.handle(FromPeer(CLIENT, m.ClientShutdownRequest()), 1.0)
    (response,) = sent(effects, kind=m.ClientShutdownResponse)
    assert not response.accepted and "protected" in response.reason
    assert not [e for e in effects if type(e) is Shutdown]
    effects = core_with().handle(FromPeer(CLIENT, m.ClientShutdownRequest()), 1.0)
    assert [e for e in effects if type(e) is Shutdown]
    assert sent(effects, to=WORKER_A, kind=m.DisconnectRequest)


@pytest.mark.parametrize("policy", ["even", "capability"])
def test_capability_tasks_wait_for_a_capable_worker_under_every_policy(policy):
    core = core_with(allocate_policy=policy)
    effects = core.handle(
        FromPeer(CLIENT, m.TaskBatch([task(1, capabilities=[m.Capability("gpu", -1)]), task(2)])), 1.0
    )
    (batch,) = sent(effects, to=WORKER_A, kind=m.TaskBatch)
    assert [t.task_id for t in batch.tasks] == [task(2).task_id]
    gpu_worker = b"W|host|9|gpu"
    (batch,) = sent(
        core.handle(FromPeer(gpu_worker, hello(m.PeerRole.WORKER, caps=("gpu", "linux"))), 2.0), kind=m.TaskBatch
    )
    assert [t.task_id for t in batch.tasks] == [task(1).task_id]


def test_a_task_no_worker_can_run_is_rejected_after_its_timeout():
    core = core_with()
    core.handle(
        FromPeer(CLIENT, m.TaskBatch([task(1, capabilities=[m.Capability("gpu", -1)], timeout_seconds=5.0)])), 1.0
    )
    assert sent(core.handle(Tick(), 3.0), to=CLIENT) == []
    (batch,) = sent(core.handle(Tick(), 6.5), to=CLIENT, kind=m.TaskResultBatch)
    (rejected,) = batch.results
    assert rejected.status == m.TaskStatus.REJECTED and "gpu" in rejected.error_text and "5s" in rejected.error_text
    assert core.task_count == 0


def test_a_task_whose_capabilities_no_worker_offers_waits_with_a_warning_by_default(caplog):
    core = core_with()
    core.handle(FromPeer(CLIENT, m.TaskBatch([task(1, capabilities=[m.Capability("gpu", -1)])])), 1.0)
    core.handle(Tick(), 1.5)
    assert "gpu" not in caplog.text  # a capable worker may be starting: not yet
    for now in (4.5, 5.0, 5.5):
        assert sent(core.handle(Tick(), now), to=CLIENT, kind=m.TaskResultBatch) == []
    (line,) = [record.getMessage() for record in caplog.records if "gpu" in record.getMessage()]  # once a minute
    assert "1 task(s) wait for a worker that offers capabilities gpu: no worker has them" in line
    (batch,) = sent(
        core.handle(FromPeer(b"W|host|9|gpu", hello(m.PeerRole.WORKER, caps=("gpu",))), 6.0), kind=m.TaskBatch
    )
    assert [t.task_id for t in batch.tasks] == [task(1).task_id]


def test_a_task_whose_capabilities_no_worker_offers_fails_if_so_chosen():
    core = core_with(missing_capabilities="fail")
    gpu_and_linux = [m.Capability("gpu", -1), m.Capability("linux", -1)]
    core.handle(FromPeer(CLIENT, m.TaskBatch([task(1, capabilities=gpu_and_linux), task(2)])), 1.0)
    for now in (1.5, 3.5):  # a capable worker may be starting
        assert sent(core.handle(Tick(), now), to=CLIENT, kind=m.TaskResultBatch) == []
    (batch,) = sent(core.handle(Tick(), 4.5), to=CLIENT, kind=m.TaskResultBatch)
    (rejected,) = batch.results
    assert rejected.task_id == task(1).task_id and rejected.status == m.TaskStatus.REJECTED
    assert "no worker offers the capabilities it needs (gpu,linux)" in rejected.error_text
    core.handle(FromPeer(CLIENT, m.TaskBatch([task(3, capabilities=gpu_and_linux)])), 5.0)
    (batch,) = sent(core.handle(Tick(), 5.5), to=CLIENT, kind=m.TaskResultBatch)  # no grace again: none came
    assert [result.task_id for result in batch.results] == [task(3).task_id]
    core.handle(FromPeer(b"W|host|9|gpu", hello(m.PeerRole.WORKER, caps=("gpu", "linux", "big"))), 6.0)
    effects = core.handle(FromPeer(CLIENT, m.TaskBatch([task(4, capabilities=gpu_and_linux)])), 6.5)
    effects += core.handle(Tick(), 10.0)
    assert [t.task_id for b in sent(effects, kind=m.TaskBatch) for t in b.tasks] == [task(4).task_id]
    assert sent(effects, to=CLIENT, kind=m.TaskResultBatch) == []


NEEDS = [(), ("gpu",), ("gpu", "big"), ("big",)]


@settings(max_examples=150, deadline=None)
@given(st.lists(st.tuples(st.sampled_from("ssscjlft"), st.integers(0, 40)), max_size=60))
def test_the_queued_tasks_by_what_they_need_are_what_the_queue_holds_whatever_happens(operations):
    """The scaling decision reads how many queued tasks need each set of capabilities, a count kept as tasks
    enter and leave the queue (`TaskRouting.queued_by_needs`): after any submits, cancels, workers of any
    capabilities joining and leaving, results and timeouts, it is what the queued tasks need."""
    core = core_with(workers=(), worker_timeout_seconds=1e9)
    held: Dict[bytes, List[m.Task]] = {}  # worker -> the tasks sent to it
    now = 1.0

    def feed(event) -> None:
        for effect in core.handle(event, now):
            if type(effect) is Send and type(effect.message) is m.TaskBatch and effect.to in held:
                held[effect.to].extend(effect.message.tasks)

    for operation, n in operations:
        now += 0.5
        if operation == "s":
            needs = [m.Capability(name, -1) for name in NEEDS[n % 4]]
            tasks = [task(n * 10 + k, capabilities=needs, timeout_seconds=float(n % 3)) for k in range(n % 3 + 1)]
            feed(FromPeer(CLIENT, m.TaskBatch(tasks)))
        elif operation == "c":
            feed(FromPeer(CLIENT, m.TaskCancel([task(n * 10 + k).task_id for k in range(3)])))
        elif operation == "j":
            worker = b"W|host|%d|w" % n
            if worker not in held:
                held[worker] = []
                feed(FromPeer(worker, hello(m.PeerRole.WORKER, 1 + n % 3, caps=NEEDS[n % 4])))
        elif operation == "l" and held:
            worker = sorted(held)[n % len(held)]
            del held[worker]
            feed(FromPeer(worker, m.DisconnectRequest("bye")))
        elif operation == "f" and held:
            worker = sorted(held)[n % len(held)]
            done, held[worker] = held[worker], []
            feed(FromPeer(worker, m.TaskResultBatch([result(t.task_id, t.attempt) for t in done])))
        else:
            feed(Tick())
        queued: Counter = Counter()
        for record in core._routing._tasks.values():
            if record.state is TaskState.QUEUED:
                queued[record.needs or frozenset()] += 1
        assert core._routing.queued_by_needs() == dict(queued)


def test_queued_tasks_move_from_a_busy_worker_to_an_idle_one():
    core = core_with(capacity=100)
    core.handle(FromPeer(CLIENT, m.TaskBatch([task(i) for i in range(10)])), 1.0)
    core.handle(FromPeer(WORKER_B, hello(m.PeerRole.WORKER, 100)), 2.0)
    (request,) = sent(core.handle(Tick(), 2.0), to=WORKER_A, kind=m.BalanceRequest)
    assert request.count == 5
    assert sent(core.handle(Tick(), 2.5), kind=m.BalanceRequest) == []  # one request at a time
    given_back = [task(i).task_id for i in range(5, 10)]
    (batch,) = sent(core.handle(FromPeer(WORKER_A, m.BalanceResponse(given_back)), 3.0), to=WORKER_B, kind=m.TaskBatch)
    assert sorted(t.task_id for t in batch.tasks) == sorted(given_back)
    assert all(t.attempt == 2 for t in batch.tasks)


def test_a_task_that_keeps_killing_its_processor_fails_saying_so():
    core = core_with(max_task_deaths=3)
    core.handle(FromPeer(CLIENT, m.TaskBatch([task(1)])), 1.0)
    for attempt in (1, 2):
        died = m.TaskResult(task(1).task_id, attempt, m.TaskStatus.WORKER_DIED, m.PayloadKind.NONE, b"", "SIGKILL")
        (batch,) = sent(core.handle(FromPeer(WORKER_A, m.TaskResultBatch([died])), 2.0), kind=m.TaskBatch)
        assert batch.tasks[0].attempt == attempt + 1
    died = m.TaskResult(task(1).task_id, 3, m.TaskStatus.WORKER_DIED, m.PayloadKind.NONE, b"", "SIGKILL")
    (batch,) = sent(core.handle(FromPeer(WORKER_A, m.TaskResultBatch([died])), 3.0), to=CLIENT)
    assert "killed its worker 3 times" in batch.results[0].error_text and "SIGKILL" in batch.results[0].error_text


def test_a_failing_task_is_retried_as_many_times_as_asked():
    core = core_with()
    core.handle(FromPeer(CLIENT, m.TaskBatch([task(1, retries=1)])), 1.0)
    failed = m.TaskResult(task(1).task_id, 1, m.TaskStatus.FAILED, m.PayloadKind.INLINE, b"e", "")
    assert sent(core.handle(FromPeer(WORKER_A, m.TaskResultBatch([failed])), 2.0), to=CLIENT) == []
    failed.attempt = 2
    (batch,) = sent(core.handle(FromPeer(WORKER_A, m.TaskResultBatch([failed])), 3.0), to=CLIENT)
    assert batch.results[0].status == m.TaskStatus.FAILED


def test_missing_transition_is_a_typed_error_with_history():
    assert (TaskState.SUCCESS, TaskEvent.ASSIGN) not in TASK_LIFECYCLE.table
    with pytest.raises(TransitionError, match="assign -> result_success"):
        TASK_LIFECYCLE.step(TaskState.SUCCESS, TaskEvent.ASSIGN, "01", [TaskEvent.ASSIGN, TaskEvent.RESULT_SUCCESS])


# ------------------------------------------------------------------- property test

_ACTIONS = st.lists(
    st.tuples(st.sampled_from(["submit", "result", "fail", "died", "cancel", "worker_dies", "worker_joins",
                               "client_leaves", "confirm", "balance", "tick"]), st.integers(0, 30)),
    max_size=60,
)  # fmt: skip


@settings(max_examples=200, deadline=None)
@given(_ACTIONS)
def test_every_task_reaches_exactly_one_terminal_state(actions):
    """Random interleavings: every submitted task is answered exactly once (result or cancel)."""
    core = core_with(workers=(WORKER_A, WORKER_B), capacity=3, worker_timeout_seconds=5)
    answered: dict = {}
    assigned: dict = {}  # task_id -> (worker, attempt)
    workers = [WORKER_A, WORKER_B]
    now = 1.0
    client_gone = False
    submitted = set()

    def record(effects):
        for effect in effects:
            if type(effect) is not Send:
                continue
            msg = effect.message
            if type(msg) is m.TaskBatch:
                for t in msg.tasks:
                    assigned[t.task_id] = (effect.to, t.attempt)
            elif type(msg) is m.TaskResultBatch and effect.to == CLIENT:
                for r in msg.results:
                    answered[r.task_id] = answered.get(r.task_id, 0) + 1
            elif type(msg) is m.TaskCancelConfirm and effect.to == CLIENT:
                for task_id, ok in zip(msg.task_ids, msg.cancelled, strict=True):
                    if ok:
                        answered[task_id] = answered.get(task_id, 0) + 1

    for action, n in actions:
        now += 1.0
        task_id = n.to_bytes(16, "big")
        if action == "submit" and not client_gone and task_id not in submitted:
            submitted.add(task_id)
            record(core.handle(FromPeer(CLIENT, m.TaskBatch([task(n, retries=n % 2)])), now))
        elif action in ("result", "fail", "died") and task_id in assigned:
            worker, attempt = assigned[task_id]
            status = {"result": m.TaskStatus.SUCCESS, "fail": m.TaskStatus.FAILED, "died": m.TaskStatus.WORKER_DIED}[
                action
            ]
            record(core.handle(FromPeer(worker, m.TaskResultBatch([result(task_id, attempt, status)])), now))
        elif action == "cancel" and not client_gone:
            record(core.handle(FromPeer(CLIENT, m.TaskCancel([task_id])), now))
        elif action == "confirm" and task_id in assigned:
            record(core.handle(FromPeer(assigned[task_id][0], m.TaskCancelConfirm([task_id], [True])), now))
        elif action == "balance" and task_id in assigned:
            record(core.handle(FromPeer(assigned[task_id][0], m.BalanceResponse([task_id])), now))
        elif action == "worker_dies" and workers:
            worker = workers.pop(n % len(workers))
            record(core.handle(FromPeer(worker, m.DisconnectRequest("gone")), now))
        elif action == "worker_joins":
            worker = b"W|host|%d|new" % n
            if worker not in workers:
                workers.append(worker)
                record(core.handle(FromPeer(worker, hello(m.PeerRole.WORKER, 3)), now))
        elif action == "client_leaves" and not client_gone:
            client_gone = True
            record(core.handle(FromPeer(CLIENT, m.DisconnectRequest()), now))
        elif action == "tick":
            for peer in workers + ([] if client_gone else [CLIENT]):
                core.handle(FromPeer(peer, m.WorkerHeartbeat() if peer in workers else m.ClientHeartbeat()), now)
            record(core.handle(Tick(), now))

    assert all(count == 1 for count in answered.values()), answered
    # drain: workers answer everything they hold; every task then ends
    for _ in range(10):
        for task_id, (worker, attempt) in list(assigned.items()):
            record(core.handle(FromPeer(worker, m.TaskResultBatch([result(task_id, attempt)])), now))
            record(core.handle(FromPeer(worker, m.TaskCancelConfirm([task_id], [True])), now))
        if core.task_count == 0:
            break
        if not core.worker_ids:
            record(core.handle(FromPeer(b"W|host|99|last", hello(m.PeerRole.WORKER, 100)), now))
    assert core.task_count == 0
    assert all(count == 1 for count in answered.values()), answered
    if not client_gone:
        assert set(answered) == submitted


def test_snapshot_shows_each_client_with_its_last_heartbeat_and_its_tasks():
    core = core_with(workers=())
    beat = m.ClientHeartbeat(cpu=0.25, rss_bytes=1 << 20, pending_tasks=2)
    core.handle(FromPeer(CLIENT, beat), 1.0)
    core.handle(FromPeer(CLIENT, m.TaskBatch([task(1), task(2)])), 2.0)
    assert [e for e in core.handle(Tick(), 2.5) if type(e) is Publish] == []  # nobody subscribed
    core.handle(MonitorSubscription(+1), 3.0)
    (published,) = [e for e in core.handle(Tick(), 3.5) if type(e) is Publish]
    assert published.to_monitors
    snapshot = published.snapshot
    assert snapshot.clients == 1
    assert snapshot.client_snapshots == [m.ClientSnapshot(CLIENT, beat, 2, 1.5)]
    assert sum(counter.value for counter in snapshot.task_states) == 2  # every task is in exactly one state


def test_snapshots_go_each_second_while_a_monitor_is_subscribed_or_metrics_are_served():
    core = core_with()
    core.handle(MonitorSubscription(+1), 0.0)
    published = [now for now in (1.0, 1.5, 2.0, 2.5) if any(type(e) is Publish for e in core.handle(Tick(), now))]
    assert published == [1.0, 2.0]
    core.handle(MonitorSubscription(-1), 3.0)
    assert not any(type(e) is Publish for e in core.handle(Tick(), 4.0))
    metrics = core_with(snapshot_every_second=True)
    (published,) = [e for e in metrics.handle(Tick(), 1.0) if type(e) is Publish]
    assert not published.to_monitors  # kept for --metrics-port only


def test_task_output_goes_only_from_the_worker_holding_the_task_to_its_client_if_it_asked():
    core = core_with(workers=(WORKER_A, WORKER_B), capacity=2)  # CLIENT says protocol 1.0: it cannot read output
    reader = b"C|host|8|yy"
    client_hello = hello(m.PeerRole.CLIENT)
    client_hello.version = TASK_OUTPUT_VERSION
    core.handle(FromPeer(reader, client_hello), 0.0)
    effects = core.handle(FromPeer(reader, m.TaskBatch([task(1, stream_output=True), task(2)])), 1.0)
    effects += core.handle(FromPeer(CLIENT, m.TaskBatch([task(3, stream_output=True)])), 1.0)
    holder = {t.task_id: e.to for e in effects if type(e) is Send and type(e.message) is m.TaskBatch
              for t in e.message.tasks}  # fmt: skip
    t1, t2, t3 = (task(n).task_id for n in (1, 2, 3))
    other = WORKER_B if holder[t1] == WORKER_A else WORKER_A

    def printed(worker: bytes, *outputs: m.TaskOutput) -> list:
        return sent(core.handle(FromPeer(worker, m.TaskOutputBatch(list(outputs))), 2.0), kind=m.TaskOutputBatch)

    one = m.TaskOutput(t1, reader, m.OutputStream.STDOUT, "one\n")
    two = m.TaskOutput(t1, reader, m.OutputStream.STDERR, "two\n")
    assert printed(holder[t1], one, two) == [m.TaskOutputBatch([one, two])]  # to its client only, in order
    assert printed(other, one) == []  # a worker that does not hold the task
    assert printed(holder[t1], m.TaskOutput(t1, CLIENT, m.OutputStream.STDOUT, "to another client\n")) == []
    assert printed(holder[t2], m.TaskOutput(t2, reader, m.OutputStream.STDOUT, "not asked for\n")) == []
    assert printed(holder[t3], m.TaskOutput(t3, CLIENT, m.OutputStream.STDOUT, "too old to read it\n")) == []
    assert printed(holder[t1], m.TaskOutput(b"unknown", reader, m.OutputStream.STDOUT, "no such task\n")) == []
    core.handle(FromPeer(holder[t1], m.TaskResultBatch([result(t1)])), 3.0)
    assert printed(holder[t1], one) == []  # after its result: the task is no longer held


# ----------------------------------------------------------------- nested tasks: a waiting task holds no room


def assigned(effects, to=WORKER_A):
    return [t.task_id for batch in sent(effects, to=to, kind=m.TaskBatch) for t in batch.tasks]


def test_a_waiting_task_leaves_room_for_one_more_and_takes_it_back_when_it_runs_again():
    core = core_with(capacity=1)
    assert assigned(core.handle(FromPeer(CLIENT, m.TaskBatch([task(1), task(2), task(3)])), 1.0)) == [task(1).task_id]
    # task 1 waits (for tasks 2 and 3, say): task 2 takes its room
    effects = core.handle(FromPeer(WORKER_A, m.WaitingTasks([task(1).task_id], [True])), 2.0)
    assert assigned(effects) == [task(2).task_id]
    effects = core.handle(FromPeer(WORKER_A, m.WaitingTasks([task(2).task_id], [True])), 2.0)
    assert assigned(effects) == [task(3).task_id]
    # task 1 runs again: the worker is full (three tasks, two running) until two of them end
    assert assigned(core.handle(FromPeer(WORKER_A, m.WaitingTasks([task(1).task_id], [False])), 3.0)) == []
    core.handle(FromPeer(CLIENT, m.TaskBatch([task(4)])), 3.0)
    assert assigned(core.handle(FromPeer(WORKER_A, m.TaskResultBatch([result(task(3).task_id)])), 4.0)) == []
    effects = core.handle(FromPeer(WORKER_A, m.TaskResultBatch([result(task(1).task_id)])), 4.0)
    assert assigned(effects) == [task(4).task_id]  # task 2 still waits: it holds no room


def test_a_worker_whose_every_task_waits_takes_more_tasks():
    core = core_with(capacity=2)
    first = [task(n) for n in range(1, 3)]
    assert len(assigned(core.handle(FromPeer(CLIENT, m.TaskBatch(first + [task(3), task(4)])), 1.0))) == 2
    effects = core.handle(FromPeer(WORKER_A, m.WaitingTasks([t.task_id for t in first], [True, True])), 2.0)
    assert assigned(effects) == [task(3).task_id, task(4).task_id]


def test_waits_of_tasks_the_worker_does_not_hold_change_nothing_and_a_malformed_notice_is_dropped():
    core = core_with(workers=(WORKER_A, WORKER_B), capacity=1)
    effects = core.handle(FromPeer(CLIENT, m.TaskBatch([task(1), task(2), task(3)])), 1.0)
    on_a, on_b = assigned(effects, WORKER_A), assigned(effects, WORKER_B)
    assert len(on_a) == len(on_b) == 1
    # B says A's task waits, then a task it never had, then a notice whose lists differ in length
    assert assigned(core.handle(FromPeer(WORKER_B, m.WaitingTasks(on_a, [True])), 2.0), WORKER_B) == []
    assert assigned(core.handle(FromPeer(WORKER_B, m.WaitingTasks([task(9).task_id], [True])), 2.0), WORKER_B) == []
    assert assigned(core.handle(FromPeer(WORKER_B, m.WaitingTasks(on_b, [True, False])), 2.0), WORKER_B) == []
    assert assigned(core.handle(FromPeer(WORKER_B, m.WaitingTasks(on_b, [True])), 2.0), WORKER_B) == [task(3).task_id]


def test_a_waiting_task_of_a_worker_that_leaves_runs_again_elsewhere():
    core = core_with(workers=(WORKER_A, WORKER_B), capacity=1)
    effects = core.handle(FromPeer(CLIENT, m.TaskBatch([task(1)])), 1.0)
    owner = WORKER_A if assigned(effects, WORKER_A) else WORKER_B
    other = WORKER_B if owner == WORKER_A else WORKER_A
    core.handle(FromPeer(owner, m.WaitingTasks([task(1).task_id], [True])), 2.0)
    effects = core.handle(FromPeer(owner, m.DisconnectRequest("leaving")), 3.0)
    [again] = [t for batch in sent(effects, to=other, kind=m.TaskBatch) for t in batch.tasks]
    assert (again.task_id, again.attempt) == (task(1).task_id, 2)


def test_balancing_counts_only_the_tasks_that_do_not_wait():
    core = core_with(workers=(WORKER_A,), capacity=10)
    core.handle(FromPeer(CLIENT, m.TaskBatch([task(n) for n in range(1, 6)])), 1.0)
    core.handle(FromPeer(WORKER_A, m.WaitingTasks([task(1).task_id, task(2).task_id], [True, True])), 1.0)
    core.handle(FromPeer(WORKER_B, hello(m.PeerRole.WORKER, 10)), 1.0)
    # A holds five tasks, three of them work that could move: the mean is 1.5, so one goes (not two)
    [request] = sent(core.handle(Tick(), 2.0), to=WORKER_A, kind=m.BalanceRequest)
    assert request.count == 1


def test_a_task_id_another_task_holds_is_refused_to_the_newcomer_and_the_first_task_runs_on():
    core = core_with(workers=(WORKER_A,), capacity=1)
    core.handle(FromPeer(OTHER_CLIENT, hello(m.PeerRole.CLIENT)), 0.0)
    core.handle(FromPeer(CLIENT, m.TaskBatch([task(1), task(2)])), 1.0)  # 1 runs, 2 waits in the queue
    needs_5 = task(3, arguments=[m.Argument("", m.ArgumentKind.TASK, task(5).task_id)])  # a graph node not released
    graph = m.GraphTask(b"g" * 16, [task(5), needs_5], [needs_5.task_id])
    core.handle(FromPeer(CLIENT, decode_routed(codec.encode(graph))[0]), 1.0)  # as the shell reads it
    squatter = core.handle(FromPeer(OTHER_CLIENT, m.TaskBatch([task(1), task(2), task(3), task(4)])), 2.0)
    (refused,) = sent(squatter, to=OTHER_CLIENT, kind=m.TaskResultBatch)
    assert [r.task_id for r in refused.results] == [task(n).task_id for n in (1, 2, 3)]
    assert {r.status for r in refused.results} == {m.TaskStatus.REJECTED}
    assert all("is taken by another task" in r.error_text for r in refused.results)
    assert sent(squatter, to=CLIENT) == []  # the first holder hears nothing of it
    resent = core.handle(FromPeer(CLIENT, m.TaskBatch([task(2)])), 3.0)  # its own task again: ignored
    assert sent(resent, to=CLIENT) == []
    for n, after in ((1, 2), (2, 5), (5, 4), (4, 3)):  # each runs once, in the order it came (3 once 5 is done)
        effects = core.handle(FromPeer(WORKER_A, m.TaskResultBatch([result(task(n).task_id)])), 4.0 + n)
        (assigned_next,) = sent(effects, to=WORKER_A, kind=m.TaskBatch)
        assert [t.task_id for t in assigned_next.tasks] == [task(after).task_id]
    (answer,) = sent(core.handle(FromPeer(WORKER_A, m.TaskResultBatch([result(task(3).task_id)])), 8.0), to=CLIENT)
    assert [(r.task_id, r.status) for r in answer.results] == [(task(3).task_id, m.TaskStatus.SUCCESS)]


# --- whose objects a client's tasks read (protocol 1.8) -----------------------------------------------------------

NESTED = b"C|host|2|nested"
KEY_A = delegation.new_key()


def routed(*tasks: m.Task) -> m.TaskBatch:
    """A batch as the shell reads it: each task a `routed.RoutedTask`, written over when it is sent on."""
    return decode_routed(codec.encode(m.TaskBatch(list(tasks))))[0]


def sent_tasks(effects, to=WORKER_A) -> List[m.Task]:
    """The tasks a worker is sent, as it reads them."""
    batches = [codec.encode(message) for message in sent(effects, to=to, kind=m.TaskBatch)]
    return [t for frames in batches for t in codec.decode(frames)[0].tasks]


def delegating_core() -> SchedulerCore:
    """A core whose worker gives its processors a delegation key, running CLIENT's task 1."""
    core = serving(SchedulerCore(SchedulerSettings(object_storage_address="tcp://127.0.0.1:1")))
    connect_client(core)
    worker_hello = hello(m.PeerRole.WORKER)
    worker_hello.worker_info.delegation_key = KEY_A
    core.handle(FromPeer(WORKER_A, worker_hello), 0.0)
    (running,) = sent_tasks(core.handle(FromPeer(CLIENT, routed(task(1))), 1.0))
    assert running.scope_id == b""  # a client that stands for itself: its own objects
    return core


def nested_hello(made_in: bytes, key: bytes, client: bytes = NESTED) -> m.Hello:
    return m.Hello(
        PROTOCOL_VERSION, m.PeerRole.CLIENT, 1, "host", made_in=made_in,
        made_in_proof=delegation.proof(key, client, made_in),
    )  # fmt: skip


def admission(effects) -> m.ObjectRequest:
    (admit,) = [message for message in sent(effects, to=STORAGE) if message.kind == m.ObjectRequestKind.ADMIT]
    return admit


def test_a_client_made_in_a_task_that_its_worker_proves_stands_for_that_tasks_client():
    core = delegating_core()
    effects = admitted(core, core.handle(FromPeer(NESTED, nested_hello(task(1).task_id, KEY_A)), 2.0))
    assert admission(effects).scope_id == CLIENT  # the storage server hears it before the nested client
    assert type(sent(effects, to=NESTED)[0]) is m.HelloAck
    core.handle(FromPeer(WORKER_A, m.WaitingTasks([task(1).task_id], [True])), 2.5)
    (child,) = sent_tasks(core.handle(FromPeer(NESTED, routed(task(2))), 3.0))
    assert (child.client_id, child.scope_id) == (NESTED, CLIENT)
    grandchild_client = b"C|host|3|deeper"  # made in the child, whose client stands for CLIENT: so does it
    grand_hello = nested_hello(task(2).task_id, KEY_A, grandchild_client)
    assert admission(core.handle(FromPeer(grandchild_client, grand_hello), 4.0)).scope_id == CLIENT


@pytest.mark.parametrize(
    "made_in, key, why",
    [
        (task(1).task_id, delegation.new_key(), "a proof made with another key than its worker's"),
        (task(7).task_id, KEY_A, "a task no worker holds (finished, or never was)"),
        (b"", KEY_A, "no task named at all"),
    ],
)
def test_a_client_that_cannot_prove_its_task_stands_for_itself_only(made_in, key, why):
    core = delegating_core()
    effects = core.handle(FromPeer(NESTED, nested_hello(made_in, key)), 2.0)
    assert admission(effects).scope_id == b"", why  # its own objects only
    (own,) = sent_tasks(admitted(core, core.handle(FromPeer(NESTED, routed(task(2))), 3.0)))
    assert (own.client_id, own.scope_id) == (NESTED, b"")


def test_a_scope_a_client_writes_into_its_own_tasks_is_never_sent_on():
    core = delegating_core()
    (forged,) = sent_tasks(core.handle(FromPeer(CLIENT, routed(task(2, scope_id=OTHER_CLIENT))), 2.0))
    assert (forged.client_id, forged.scope_id) == (CLIENT, b"")


def test_a_client_that_asks_is_told_the_workers_its_addresses_and_only_itself_of_the_clients():
    core = core_with(capacity=5, monitor_address="tcp://127.0.0.1:2347", dashboard_link="http://127.0.0.1:8081/")
    connect_client(core, OTHER_CLIENT)
    core.handle(FromPeer(CLIENT, m.TaskBatch([task(1, capabilities=[m.Capability("gpu", -1)]), task(2)])), 1.0)
    (info,) = sent(core.handle(FromPeer(CLIENT, m.SchedulerInfoRequest()), 2.0), to=CLIENT, kind=m.SchedulerInfo)
    assert info.monitor_address == "tcp://127.0.0.1:2347" and info.dashboard_link == "http://127.0.0.1:8081/"
    snapshot = info.snapshot
    assert [(w.worker_id, w.assigned_tasks) for w in snapshot.workers] == [(WORKER_A, 1)]
    assert snapshot.clients == 2 and [c.client_id for c in snapshot.client_snapshots] == [CLIENT]
    assert {c.name: c.value for c in snapshot.task_states}["queued"] == 1
