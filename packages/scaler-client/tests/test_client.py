"""Client against test-side ROUTER sockets playing the scheduler and the object storage server.

Real ZeroMQ, real Cap'n Proto: what the client puts on the wire is decoded and
checked here, and what it receives is encoded by the test exactly as a
scheduler would.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import math
import pickle
import sys
import threading
import types
from typing import Any, List

import cloudpickle
import pytest
from client_fakes import FakeScheduler, wait_until

from scaler import (
    Client,
    DisconnectedError,
    ObjectReference,
    ObjectStorageRefusedError,
    ProtocolError,
    RemoteTaskError,
    ScalerFuture,
    Serializer,
    ShutdownRefusedError,
    TaskRejectedError,
    WorkerDiedError,
)
from scaler.client import task_builder as builder_module
from scaler.client.remote_errors import RemoteTraceback
from scaler.client.serializer import DefaultSerializer, deserialize_payload
from scaler.client.task_builder import INLINE_ARGUMENT_LIMIT, TaskBuilder
from scaler.protocol.addresses import free_tcp_port
from scaler.protocol.messages import (
    Argument,
    ArgumentKind,
    Capability,
    ClientHeartbeat,
    DisconnectRequest,
    Hello,
    ObjectInstruction,
    ObjectInstructionKind,
    ObjectRequest,
    ObjectRequestKind,
    ObjectStatus,
    PayloadKind,
    PeerRole,
    Profiling,
    Task,
    TaskBatch,
    TaskCancel,
    TaskResult,
    TaskResultBatch,
    TaskStatus,
)
from scaler.protocol.version import PROTOCOL_VERSION


def add(a, b=10, *, c=100):
    return a + b + c


def fail(message):
    raise ValueError(message)


def tasks_sent(scheduler: FakeScheduler) -> List[Task]:
    return [task for batch in scheduler.messages(TaskBatch) for task in batch.tasks]


def answer(scheduler: FakeScheduler, client: Client, *results: TaskResult) -> None:
    scheduler.send(client.client_id, TaskResultBatch(results=list(results)))


@pytest.fixture
def client(scheduler: FakeScheduler):
    with Client(scheduler.address, timeout_seconds=10, heartbeat_interval_seconds=0.5) as connected:
        yield connected


@pytest.fixture
def running_client(executing_scheduler: FakeScheduler):
    with Client(executing_scheduler.address, timeout_seconds=10) as connected:
        yield connected


# --- handshake ------------------------------------------------------------------------------------------------


def test_handshake_says_hello_to_scheduler_and_storage(scheduler, storage, client):
    (hello,) = scheduler.wait_for(Hello)
    assert hello.role == PeerRole.CLIENT and hello.version == PROTOCOL_VERSION
    assert scheduler.identities() == [client.client_id]
    assert client.client_id.startswith(b"C|")
    storage.wait_for(Hello)
    assert storage.identities() == [client.client_id]
    assert client.connected


def test_refusal_raises_protocol_error_naming_both_versions(storage):
    refusing = FakeScheduler(storage, hello="refuse")
    try:
        with pytest.raises(ProtocolError) as raised:
            Client(refusing.address, timeout_seconds=10)
        ours = f"{PROTOCOL_VERSION.major}.{PROTOCOL_VERSION.minor}"
        assert ours in str(raised.value) and f"{PROTOCOL_VERSION.major + 1}.0" in str(raised.value)
    finally:
        refusing.stop()


def test_silent_scheduler_raises_disconnected_error_within_the_bound(storage):
    silent = FakeScheduler(storage, hello="silent")
    try:
        with pytest.raises(DisconnectedError) as raised:
            Client(silent.address, timeout_seconds=0.5)
        assert str(raised.value) == f"no scheduler answered at {silent.address} within 0.5s"
        silent.wait_for(Hello)
    finally:
        silent.stop()


def test_nobody_listening_raises_disconnected_error():
    address = f"tcp://127.0.0.1:{free_tcp_port()}"
    with pytest.raises(DisconnectedError, match="no scheduler answered"):
        Client(address, timeout_seconds=0.3)


def test_address_comes_from_the_environment(scheduler, monkeypatch):
    monkeypatch.setenv("SCALER_SCHEDULER_ADDRESS", scheduler.address)
    with Client() as from_environment:
        assert from_environment.address == scheduler.address
    monkeypatch.delenv("SCALER_SCHEDULER_ADDRESS")
    with pytest.raises(ValueError, match="SCALER_SCHEDULER_ADDRESS"):
        Client()


def test_malformed_input_is_dropped_and_the_client_keeps_working(running_client, executing_scheduler):
    executing_scheduler.send_raw(running_client.client_id, [b"not a capnp message"])
    executing_scheduler.send_raw(running_client.client_id, [b"\x00" * 16])
    assert running_client.submit(add, 1, 2, c=3).result(timeout=10) == 6


# --- what goes on the wire ----------------------------------------------------------------------------------


def test_submit_encodes_positional_and_keyword_arguments(scheduler, storage, client):
    client.submit(add, 1, c=5)
    (task,) = wait_until(lambda: tasks_sent(scheduler), what="the task")
    assert task.client_id == client.client_id
    assert [(a.name, a.kind) for a in task.arguments] == [("", ArgumentKind.INLINE), ("c", ArgumentKind.INLINE)]
    assert [cloudpickle.loads(a.data) for a in task.arguments] == [1, 5]
    assert cloudpickle.loads(storage.objects[task.function_id]) is add
    assert task.serializer_id == b"" and not task.profiling


def test_function_is_put_and_acknowledged_before_its_task_is_sent(scheduler, storage, client):
    client.submit(add, 1)
    (record,) = wait_until(lambda: scheduler.records(TaskBatch), what="the task")
    sequence, _, batch, _ = record
    (task,) = batch.tasks
    put_acknowledged = storage.put_sequence(task.function_id)
    assert put_acknowledged is not None and put_acknowledged < sequence


def test_function_is_serialized_once_per_client(scheduler, storage, client):
    for n in range(5):
        client.submit(add, n)
    tasks = wait_until(lambda: (lambda t: t if len(t) == 5 else None)(tasks_sent(scheduler)), what="5 tasks")
    assert len({task.function_id for task in tasks}) == 1
    puts = [m for m in storage.messages(ObjectRequest) if m.kind == ObjectRequestKind.PUT]
    assert sum(m.object_ids.count(tasks[0].function_id) for m in puts) == 1


def test_capabilities_travel_with_the_task(scheduler, client):
    client.submit_verbose(add, args=(1,), kwargs={"b": 2}, capabilities={"gpu": 1, "linux": -1})
    (task,) = wait_until(lambda: tasks_sent(scheduler), what="the task")
    assert {(c.name, c.value) for c in task.capabilities} == {("gpu", 1), ("linux", -1)}
    assert [a.name for a in task.arguments] == ["", "b"]


def test_bad_capabilities_are_refused_before_anything_is_sent(client):
    with pytest.raises(TypeError, match="capabilities"):
        client.submit_verbose(add, (1,), {}, capabilities={"gpu": "yes"})
    with pytest.raises(ValueError, match="64-bit"):
        client.submit_verbose(add, (1,), {}, capabilities={"gpu": 2**64})
    assert client.connected


def test_large_argument_goes_through_storage_and_is_deleted_after_the_result(running_client, storage):
    big = b"x" * (INLINE_ARGUMENT_LIMIT + 1)
    assert running_client.submit(len, big).result(timeout=10) == len(big)
    (delete,) = wait_until(
        lambda: [m for m in storage.messages(ObjectRequest) if m.kind == ObjectRequestKind.DELETE], what="a delete"
    )
    puts = [m for m in storage.messages(ObjectRequest) if m.kind == ObjectRequestKind.PUT]
    argument_id = delete.object_ids[0]
    assert any(argument_id in m.object_ids for m in puts)
    assert argument_id not in storage.objects


def test_large_argument_is_an_object_argument(scheduler, storage, client):
    client.submit(len, b"y" * (INLINE_ARGUMENT_LIMIT + 1))
    (task,) = wait_until(lambda: tasks_sent(scheduler), what="the task")
    (argument,) = task.arguments
    assert argument.kind == ArgumentKind.OBJECT
    # the bytes travel as a frame of their own, after a small pickle that refers to them: never copied into it
    header, value = storage.objects[argument.data]
    assert len(header) < 100 and value == b"y" * (INLINE_ARGUMENT_LIMIT + 1)
    assert deserialize_payload(DefaultSerializer(), [header, value]) == value


def test_send_object_gives_a_reference_usable_as_an_argument(running_client, executing_scheduler, storage):
    reference = running_client.send_object([1, 2, 3], name="numbers")
    assert isinstance(reference, ObjectReference) and reference.name == "numbers" and reference.size > 0
    assert reference.object_id in storage.objects
    assert running_client.submit(sum, reference).result(timeout=10) == 6
    assert running_client.submit(sorted, reference, reverse=True).result(timeout=10) == [3, 2, 1]
    task = tasks_sent(executing_scheduler)[-1]
    assert [(a.kind, a.data) for a in task.arguments][0] == (ArgumentKind.OBJECT, reference.object_id)


def test_refused_put_raises_from_send_object_and_fails_submits(storage, scheduler, client):
    storage.put_status = ObjectStatus.TOO_LARGE
    with pytest.raises(ObjectStorageRefusedError, match="too_large"):
        client.send_object(b"data")
    with pytest.raises(ObjectStorageRefusedError):
        client.submit(add, 1).result(timeout=10)
    storage.put_status = None  # the next task puts its function again
    future = client.submit(add, 2)
    (task,) = wait_until(lambda: tasks_sent(scheduler), what="the task")
    assert task.task_id == future.task_id


def test_a_put_refused_by_a_full_storage_server_waits_for_room_instead_of_failing(storage, scheduler, client):
    storage.put_status = ObjectStatus.STORAGE_FULL
    with concurrent.futures.ThreadPoolExecutor(1) as thread:
        sent = thread.submit(client.send_object, b"data")
        wait_until(lambda: len(storage.put_acks) >= 3, what="the object put again while storage is full")
        assert not sent.done()
        storage.put_status = None  # room again
        reference = sent.result(timeout=10)
    assert reference.object_id in storage.objects


class Doubler(Serializer):
    """Doubles ints on the way in, halves them on the way out, to show which serializer ran."""

    def serialize(self, obj: Any) -> bytes:
        return cloudpickle.dumps(obj * 2 if isinstance(obj, int) else obj)

    def deserialize(self, payload: bytes) -> Any:
        value = cloudpickle.loads(payload)
        return value // 2 if isinstance(value, int) else value


def test_custom_serializer_is_put_once_and_named_by_every_task(executing_scheduler, storage):
    with Client(executing_scheduler.address, serializer=Doubler()) as custom:
        assert custom.submit(add, 1, 2, c=3).result(timeout=10) == 6
        assert custom.map(add, [(1,), (2,)]) == [111, 112]
        tasks = tasks_sent(executing_scheduler)
        assert len({task.serializer_id for task in tasks}) == 1 and tasks[0].serializer_id
        assert isinstance(cloudpickle.loads(storage.objects[tasks[0].serializer_id]), Doubler)
        assert cloudpickle.loads(tasks[0].arguments[0].data) == 2  # serialized by Doubler


# --- results ------------------------------------------------------------------------------------------------


def _submitted(scheduler: FakeScheduler, client: Client) -> ScalerFuture:
    future = client.submit(add, 1)
    wait_until(lambda: any(t.task_id == future.task_id for t in tasks_sent(scheduler)), what="the task")
    return future


def test_success_result_is_deserialized_on_demand(scheduler, client):
    future = _submitted(scheduler, client)
    payload = cloudpickle.dumps({"answer": 42})
    answer(scheduler, client, TaskResult(future.task_id, 0, TaskStatus.SUCCESS, PayloadKind.INLINE, payload))
    assert future.result(timeout=10) == {"answer": 42}
    assert future.exception() is None and future.done() and not future.cancelled()


def test_failed_result_raises_the_task_exception_with_the_remote_traceback(scheduler, client):
    future = _submitted(scheduler, client)
    payload = cloudpickle.dumps((KeyError("missing"), "Traceback (most recent call last):\n  remote frame\n"))
    answer(scheduler, client, TaskResult(future.task_id, 0, TaskStatus.FAILED, PayloadKind.INLINE, payload))
    with pytest.raises(KeyError) as raised:
        future.result(timeout=10)
    assert isinstance(raised.value.__cause__, RemoteTraceback)
    assert "remote frame" in str(raised.value.__cause__)


def test_failed_result_without_payload_is_a_remote_task_error(scheduler, client):
    future = _submitted(scheduler, client)
    answer(scheduler, client, TaskResult(future.task_id, 0, TaskStatus.FAILED, error_text="BadError: boom"))
    with pytest.raises(RemoteTaskError, match="BadError: boom"):
        future.result(timeout=10)


def test_exception_that_cannot_be_unpickled_is_a_remote_task_error(scheduler, client):
    future = _submitted(scheduler, client)
    # an exception class from a module the worker has and the client does not
    module = types.ModuleType("not_a_module_xy")
    error_type = type("Err", (Exception,), {"__module__": "not_a_module_xy"})
    module.Err = error_type
    sys.modules["not_a_module_xy"] = module
    try:
        payload = pickle.dumps((error_type("remote"), "Traceback: the remote frames"))
    finally:
        del sys.modules["not_a_module_xy"]
    answer(scheduler, client, TaskResult(future.task_id, 0, TaskStatus.FAILED, PayloadKind.INLINE, payload))
    with pytest.raises(RemoteTaskError, match=r"not_a_module_xy\.Err") as raised:
        future.result(timeout=10)
    assert "the remote frames" in str(raised.value.__cause__)


@pytest.mark.parametrize(
    "status, error_type", [(TaskStatus.WORKER_DIED, WorkerDiedError), (TaskStatus.REJECTED, TaskRejectedError)]
)
def test_worker_died_and_rejected_raise_their_errors(scheduler, client, status, error_type):
    future = _submitted(scheduler, client)
    answer(scheduler, client, TaskResult(future.task_id, 0, status, error_text="the reason"))
    with pytest.raises(error_type, match="the reason"):
        future.result(timeout=10)


def test_cancelled_status_cancels_the_future(scheduler, client):
    future = _submitted(scheduler, client)
    answer(scheduler, client, TaskResult(future.task_id, 0, TaskStatus.CANCELLED))
    with pytest.raises(concurrent.futures.CancelledError):
        future.result(timeout=10)
    assert future.cancelled()


def test_results_stored_as_objects_are_fetched_then_deleted(executing_scheduler, storage, running_client):
    executing_scheduler.result_kind = PayloadKind.OBJECT
    assert running_client.map(add, [(i,) for i in range(20)]) == [i + 110 for i in range(20)]
    wait_until(lambda: not [k for k in storage.objects if k.startswith(b"result-")], what="result objects deleted")


def test_profiling_info(scheduler, storage):
    with Client(scheduler.address, profiling=True) as profiling:
        future = _submitted(scheduler, profiling)
        assert tasks_sent(scheduler)[-1].profiling
        measured = Profiling(duration_seconds=1.5, cpu_seconds=1.0, peak_memory_bytes=1024)
        result = TaskResult(future.task_id, 0, TaskStatus.SUCCESS, PayloadKind.INLINE, cloudpickle.dumps(3))
        result.profiling = measured
        answer(scheduler, profiling, result)
        assert future.result(timeout=10) == 3
        assert future.profiling_info() == measured
    with Client(scheduler.address) as plain:
        future = plain.submit(add, 1)
        with pytest.raises(ValueError, match="profiling=True"):
            future.profiling_info()


# --- futures --------------------------------------------------------------------------------------------------


def test_futures_work_with_concurrent_futures_and_asyncio(running_client):
    futures = [running_client.submit(add, i) for i in range(10)]
    done, not_done = concurrent.futures.wait(futures, timeout=10)
    assert not not_done and len(done) == 10
    assert sorted(f.result() for f in concurrent.futures.as_completed(futures, timeout=10)) == [
        i + 110 for i in range(10)
    ]
    called = threading.Event()
    futures[0].add_done_callback(lambda f: called.set())
    assert called.wait(10)

    async def awaited():
        return await running_client.submit(add, 1, 1)

    assert asyncio.run(awaited()) == 102


def test_wait_first_exception_wakes_on_a_failure(running_client):
    failing = running_client.submit(fail, "boom")
    done, _ = concurrent.futures.wait([failing], timeout=10, return_when=concurrent.futures.FIRST_EXCEPTION)
    assert failing in done and isinstance(failing.exception(), ValueError)


def test_cancel_confirmed_makes_the_future_cancelled(scheduler, client):
    future = _submitted(scheduler, client)
    assert future.cancel() is True
    assert future.cancelled()
    (cancel,) = scheduler.messages(TaskCancel)
    assert cancel.task_ids == [future.task_id]
    assert future.cancel() is True  # cancelling a cancelled future is still a success, as in concurrent.futures


def test_cancel_loses_to_a_result_that_arrives_first(scheduler, client):
    scheduler.cancel_answer = "result"
    future = _submitted(scheduler, client)
    assert future.cancel() is False
    assert future.result(timeout=10) == "finished first"


def test_cancel_refused_returns_false_within_its_bound(scheduler, client):
    scheduler.cancel_answer = "refuse"
    future = _submitted(scheduler, client)
    assert future.cancel() is False
    assert not future.done()


def test_cancel_of_a_finished_future_returns_false(running_client):
    future = running_client.submit(add, 1)
    future.result(timeout=10)
    assert future.cancel() is False


# --- map ------------------------------------------------------------------------------------------------------


def test_map_returns_results_in_order(running_client):
    assert running_client.map(math.sqrt, [(i,) for i in range(100)]) == [math.sqrt(i) for i in range(100)]
    assert running_client.starmap(add, [(1, 2), (3, 4)]) == [103, 107]
    assert running_client.map(add, []) == []


def test_map_of_ten_thousand_tasks_sends_few_batches(running_client, executing_scheduler):
    results = running_client.map(abs, [(-i,) for i in range(10_000)])
    assert results == list(range(10_000))
    batches = executing_scheduler.messages(TaskBatch)
    assert sum(len(batch.tasks) for batch in batches) == 10_000
    assert len(batches) <= 100


def test_map_failure_raises_the_task_exception_and_the_client_stays_usable(running_client):
    with pytest.raises(ValueError, match="bad"):
        running_client.map(fail, [("bad",), ("worse",)])
    assert running_client.submit(add, 1).result(timeout=10) == 111


def test_map_cancels_the_rest_when_a_task_fails(scheduler, client):
    def answer_first_with_failure():
        tasks = wait_until(lambda: (lambda t: t if len(t) == 3 else None)(tasks_sent(scheduler)), what="3 tasks")
        payload = cloudpickle.dumps((ValueError("first failed"), ""))
        answer(scheduler, client, TaskResult(tasks[0].task_id, 0, TaskStatus.FAILED, PayloadKind.INLINE, payload))

    helper = threading.Thread(target=answer_first_with_failure)
    helper.start()
    with pytest.raises(ValueError, match="first failed"):
        client.map(add, [(1,), (2,), (3,)])
    helper.join(10)
    (cancel,) = scheduler.wait_for(TaskCancel)
    assert len(cancel.task_ids) == 2


def test_map_needs_argument_tuples(running_client):
    with pytest.raises(TypeError, match="argument tuples"):
        running_client.map(math.sqrt, [1, 2])


# --- leaving, clear, shutdown -----------------------------------------------------------------------------


def test_scheduler_silence_fails_pending_futures_and_later_calls(scheduler, storage):
    silent_client = Client(scheduler.address, timeout_seconds=1, heartbeat_interval_seconds=0.2)
    future = _submitted(scheduler, silent_client)
    scheduler.echo = False
    with pytest.raises(DisconnectedError, match="sent nothing"):
        future.result(timeout=30)
    with pytest.raises(DisconnectedError):
        silent_client.submit(add, 1)
    assert not silent_client.connected
    silent_client.disconnect()  # harmless once disconnected


def test_heartbeats_are_sent(scheduler, client):
    scheduler.wait_for(ClientHeartbeat, count=2)


def test_disconnect_cancels_pending_futures_and_fails_later_calls(scheduler, storage):
    """As the earlier engine: what the client gave up by leaving ends cancelled."""
    leaving = Client(scheduler.address)
    future = _submitted(scheduler, leaving)
    leaving.disconnect()
    scheduler.wait_for(DisconnectRequest)
    with pytest.raises(concurrent.futures.CancelledError):
        future.result(timeout=10)
    assert future.cancelled()
    with pytest.raises(DisconnectedError):
        leaving.submit(add, 1)
    leaving.disconnect()


def test_disconnect_is_bounded_when_the_scheduler_does_not_answer(scheduler, storage):
    scheduler.answer_disconnect = False
    leaving = Client(scheduler.address, timeout_seconds=0.5)
    leaving.disconnect()  # returns: a hang fails the test at its time limit
    assert not leaving.connected


def test_context_manager_disconnects(scheduler):
    with Client(scheduler.address) as scoped:
        pass
    scheduler.wait_for(DisconnectRequest)
    assert not scoped.connected


def test_clear_cancels_pending_tasks_and_the_client_stays_usable(executing_scheduler, storage):
    executing_scheduler.execute = False
    with Client(executing_scheduler.address) as clearing:
        future = _submitted(executing_scheduler, clearing)
        clearing.clear()
        (instruction,) = executing_scheduler.messages(ObjectInstruction)
        assert instruction.kind == ObjectInstructionKind.CLEAR and instruction.owner_id == clearing.client_id
        assert future.cancelled()
        executing_scheduler.execute = True
        assert clearing.submit(add, 1).result(timeout=10) == 111
        first, second = (task.function_id for task in tasks_sent(executing_scheduler))
        assert first != second  # the function was put again after the clear


def test_shutdown_accepted(scheduler, client):
    assert client.shutdown() is True
    assert not client.connected


def test_shutdown_refused_raises_an_error_that_says_so(scheduler, client):
    scheduler.shutdown_accept = False
    with pytest.raises(ShutdownRefusedError, match="refused to shut down: the scheduler is protected"):
        client.shutdown()
    assert client.connected


# --- pickling --------------------------------------------------------------------------------------------


def test_pickled_client_reconnects_to_the_same_address(running_client, executing_scheduler):
    copy = pickle.loads(pickle.dumps(running_client))
    try:
        assert isinstance(copy, Client) and copy is not running_client
        assert copy.address == running_client.address and copy.client_id != running_client.client_id
        assert copy.submit(add, 2).result(timeout=10) == 112
        assert set(executing_scheduler.identities()) >= {running_client.client_id, copy.client_id}
    finally:
        copy.disconnect()
    copy = cloudpickle.loads(cloudpickle.dumps(running_client))
    copy.disconnect()


def test_unreferenced_client_disconnects(scheduler):
    Client(scheduler.address)  # dropped at once
    import gc

    gc.collect()
    scheduler.wait_for(DisconnectRequest)


def test_concurrent_submits_from_many_threads(running_client):
    def work(offset: int) -> List[int]:
        return [running_client.submit(add, offset, i, c=0).result(timeout=30) for i in range(50)]

    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        results = list(pool.map(work, range(4)))
    assert results == [[offset + i for i in range(50)] for offset in range(4)]


def test_storage_used_is_the_one_the_scheduler_named(scheduler, storage, client):
    client.submit(add, 1)
    wait_until(lambda: storage.messages(ObjectRequest), what="a put")  # at the storage HelloAck named
    assert storage.identities() == [client.client_id]


def test_map_raises_a_late_task_failure_without_waiting_for_earlier_tasks(scheduler, client):
    def fail_the_last_task():
        tasks = wait_until(lambda: (lambda t: t if len(t) == 3 else None)(tasks_sent(scheduler)), what="3 tasks")
        payload = cloudpickle.dumps((ValueError("last failed"), ""))
        answer(scheduler, client, TaskResult(tasks[2].task_id, 0, TaskStatus.FAILED, PayloadKind.INLINE, payload))

    helper = threading.Thread(target=fail_the_last_task)
    helper.start()
    with pytest.raises(ValueError, match="last failed"):  # the first two tasks never get a result
        client.map(add, [(1,), (2,), (3,)])
    helper.join(10)
    (cancel,) = scheduler.wait_for(TaskCancel)
    assert len(cancel.task_ids) == 2


def test_functions_forgotten_by_the_cache_are_deleted_from_storage(
    running_client, executing_scheduler, storage, monkeypatch
):
    import scaler.client.storage_requests as state_module

    monkeypatch.setattr(builder_module, "_FUNCTION_CACHE_LIMIT", 2)
    monkeypatch.setattr(state_module, "RELEASE_GRACE_SECONDS", 0.0)
    functions = [lambda n=n: n for n in range(3)]  # three distinct function objects
    assert [running_client.submit(function).result(timeout=10) for function in functions] == [0, 1, 2]
    first_function_id = tasks_sent(executing_scheduler)[0].function_id
    wait_until(lambda: first_function_id not in storage.objects, what="the forgotten function deleted")
    assert running_client.submit(functions[0]).result(timeout=10) == 0  # put again when needed again


def _offline_builder() -> TaskBuilder:
    """A TaskBuilder with no agent behind it (its function is cached, so nothing is put)."""
    builder = TaskBuilder(b"C|offline|1|0", None, True)
    builder._functions = {id(math.sqrt): (math.sqrt, b"f" * 16)}
    builder.send = lambda event: pytest.fail(f"an offline builder sent {event!r}")
    return builder


@pytest.mark.parametrize("positional", [True, False])
def test_build_fills_every_task_field_on_both_construction_paths(monkeypatch, positional):
    assert builder_module._POSITIONAL_MESSAGES  # the fast path is the one taken with today's messages
    monkeypatch.setattr(builder_module, "_POSITIONAL_MESSAGES", positional)
    builder = _offline_builder()
    capabilities = [Capability(name="gpu", value=1)]
    puts: dict = {}
    task = builder.build(math.sqrt, (4, b"x" * (INLINE_ARGUMENT_LIMIT + 1)), {"k": 2}, capabilities, puts)
    stored_id = task.arguments[1].data
    assert task == Task(
        task_id=task.task_id,
        client_id=b"C|offline|1|0",
        function_id=b"f" * 16,
        arguments=[
            Argument(name="", kind=ArgumentKind.INLINE, data=pickle.dumps(4, protocol=pickle.HIGHEST_PROTOCOL)),
            Argument(name="", kind=ArgumentKind.OBJECT, data=stored_id),
            Argument(name="k", kind=ArgumentKind.INLINE, data=pickle.dumps(2, protocol=pickle.HIGHEST_PROTOCOL)),
        ],
        capabilities=capabilities,
        profiling=True,
    )
    # the large argument is put before the task goes (what the task then waits for: test_client_core.py)
    assert [object_id for object_id, _ in puts[task.task_id]] == [stored_id]
    plain = builder.build(math.sqrt, (4,), {}, [], puts)
    assert plain.task_id != task.task_id and list(puts) == [task.task_id]
