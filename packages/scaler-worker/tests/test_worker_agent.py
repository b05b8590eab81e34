"""A real worker process (agent + processor) against a test-side scheduler socket and an object storage
server, with real encoded messages."""

from __future__ import annotations

import os
import signal
import sys

import pytest
import worker_tasks as tasks
from worker_harness import FakeScheduler, TaskDriver, pid_gone, start_process, stop_process, wait_until

from scaler.protocol import messages as m
from scaler.protocol.errors import ObjectNotFoundError, TaskTimeoutError
from scaler.protocol.ids import show
from scaler.protocol.version import PROTOCOL_VERSION
from scaler.worker.processor_protocol import TINY_TASKS_PIPELINE_DEPTH


def read_pid(path) -> int:
    return int(wait_until(lambda: os.path.exists(path) and open(path).read(), f"pid file {path}"))


# ----------------------------------------------------------------------------- running tasks


def test_hello_names_the_worker(scheduler, storage_server, start_worker):
    start_worker(scheduler.address, "-pwc", "gpu,linux,mem=64", "-wqs", "17")
    identity, hello = scheduler.accept(storage_server.address)
    assert identity.startswith(b"W|")
    assert hello.role == m.PeerRole.WORKER and hello.version == PROTOCOL_VERSION
    assert hello.worker_info.slots == 1 and hello.worker_info.queue_capacity == 17
    assert [(c.name, c.value) for c in hello.worker_info.capabilities] == [("gpu", -1), ("linux", -1), ("mem", 64)]


def test_inline_arguments_give_the_right_value(driver: TaskDriver):
    task_id = driver.submit(tasks.add, 2, b=40)
    assert driver.value(task_id) == 42
    named = driver.submit(tasks.describe, 1, "two", x=3, y=[4])
    assert driver.value(named) == ((1, "two"), {"x": 3, "y": [4]})


def test_result_echoes_the_attempt(driver: TaskDriver):
    task_id = driver.send(driver.task(tasks.add, 1, attempt=7))[0]
    assert driver.result(task_id).attempt == 7


def test_object_arguments_and_a_large_result_go_through_storage(driver: TaskDriver):
    task_id = driver.submit(tasks.large, 200_000, object_arguments=True)
    result = driver.result(task_id)
    assert result.payload_kind == m.PayloadKind.OBJECT and len(result.payload) == 16
    assert driver.value(task_id) == b"r" * 200_000


def test_store_result_keeps_a_small_result_in_storage(driver: TaskDriver):
    task = driver.task(tasks.add, 1, 2)
    task.store_result = True
    driver.send(task)
    assert driver.result(task.task_id).payload_kind == m.PayloadKind.OBJECT
    assert driver.value(task.task_id) == 3


def test_missing_function_fails_with_object_not_found(driver: TaskDriver):
    task = driver.task(tasks.add, 1)
    task.function_id = b"\x00" * 16
    driver.send(task)
    error, _ = driver.failure(task.task_id)
    assert isinstance(error, ObjectNotFoundError)
    assert str(error) == (
        f"object {'00' * 16} is not in object storage, or not one the tasks of client {show(task.client_id)} may read"
    )


def test_custom_serializer_is_used_for_arguments_and_result(driver: TaskDriver):
    serializer = tasks.PrefixSerializer()
    task_id = driver.submit(tasks.add, 20, 22, serializer=serializer)
    assert driver.result(task_id).payload.startswith(b"PREFIX:")
    assert driver.value(task_id, serializer) == 42


def test_processor_environment_names_scheduler_and_worker(driver: TaskDriver):
    task_id = driver.submit(tasks.environment, "SCALER_SCHEDULER_ADDRESS", "SCALER_WORKER_ID")
    assert driver.value(task_id) == {
        "SCALER_SCHEDULER_ADDRESS": driver.scheduler.address,
        "SCALER_WORKER_ID": driver.worker_id.decode(),
    }


def test_profiling(driver: TaskDriver):
    task_id = driver.send(driver.task(tasks.allocate, 200_000, profiling=True))[0]
    result = driver.result(task_id)
    assert result.status == m.TaskStatus.SUCCESS
    assert result.profiling.peak_memory_bytes > 200_000 * 8  # the list of 200,000 references at least


# ----------------------------------------------------------------------------- failures


def test_exception_travels_with_its_traceback(driver: TaskDriver):
    task_id = driver.submit(tasks.fail, "it went wrong")
    error, traceback_text = driver.failure(task_id)
    assert type(error).__name__ == "TaskError" and str(error) == "it went wrong"
    assert "in fail" in traceback_text and "it went wrong" in traceback_text
    assert "processor.py" not in traceback_text  # the processor's own frame is left out


def test_unpicklable_exception_travels_as_text(driver: TaskDriver):
    task_id = driver.submit(tasks.fail_unpicklably, "cannot pickle me")
    result = driver.result(task_id)
    assert result.status == m.TaskStatus.FAILED
    assert result.payload == b"" and result.payload_kind == m.PayloadKind.NONE
    assert result.error_text.startswith("UnpicklableError: cannot pickle me\n")
    assert "in fail_unpicklably" in result.error_text


def test_unserializable_result_fails_saying_why(driver: TaskDriver):
    task_id = driver.submit(tasks.return_unserializable)
    error, _ = driver.failure(task_id)
    assert "the result of the task could not be serialized" in str(error)
    assert "lock" in str(error)


def test_sys_exit_in_a_task_is_its_failure(driver: TaskDriver):
    task_id = driver.submit(tasks.call_sys_exit, 5)
    error, _ = driver.failure(task_id)
    assert isinstance(error, SystemExit) and error.code == 5
    assert driver.value(driver.submit(tasks.add, 1, 1)) == 2


@pytest.mark.parametrize(
    ("function", "argument", "cause"),
    [
        (tasks.exit_process, 3, "processor exited with code 3"),
        (tasks.crash, None, "processor was killed by signal SIGSEGV"),
    ],
)
def test_processor_death_is_reported_and_the_next_task_runs(driver: TaskDriver, function, argument, cause):
    first_pid = driver.value(driver.submit(tasks.process_id))
    task = driver.task(function, argument, attempt=4) if argument is not None else driver.task(function, attempt=4)
    follower = driver.task(tasks.process_id)
    driver.send(task, follower)
    result = driver.result(task.task_id)
    assert (result.status, result.error_text, result.attempt) == (m.TaskStatus.WORKER_DIED, cause, 4)
    second_pid = driver.value(follower.task_id)
    assert second_pid != first_pid


def test_killed_processor_is_reported_and_replaced(driver: TaskDriver, tmp_path):
    pid_path = str(tmp_path / "pid")
    task = driver.task(tasks.block, pid_path)
    follower = driver.task(tasks.add, 1, 2)
    driver.send(task, follower)
    pid = read_pid(pid_path)
    os.kill(pid, signal.SIGKILL)
    result = driver.result(task.task_id)
    assert result.status == m.TaskStatus.WORKER_DIED
    assert result.error_text == "processor was killed by signal SIGKILL"
    assert driver.value(follower.task_id) == 3


def test_task_timeout_fails_it_and_the_next_task_runs(driver: TaskDriver, tmp_path):
    task = driver.task(tasks.block, str(tmp_path / "pid"), timeout_seconds=0.2)
    follower = driver.task(tasks.add, 5)
    driver.send(task, follower)
    error, _ = driver.failure(task.task_id)
    assert isinstance(error, TaskTimeoutError)
    assert str(error) == f"task {task.task_id.hex()} exceeded its timeout of 0.2 seconds"
    assert driver.value(follower.task_id) == 5


# ----------------------------------------------------------------------------- scheduler requests


def test_cancel_running_queued_and_unknown_tasks(driver: TaskDriver, tmp_path):
    pid_path = str(tmp_path / "pid")
    running = driver.task(tasks.block, pid_path)
    queued = driver.task(tasks.add, 1)
    driver.send(running, queued)
    pid = read_pid(pid_path)
    unknown = b"\x07" * 16
    driver.scheduler.send(driver.worker_id, m.TaskCancel([running.task_id, queued.task_id, unknown]))
    confirm = driver.expect(m.TaskCancelConfirm)
    assert confirm.task_ids == [running.task_id, queued.task_id, unknown]
    assert confirm.cancelled == [True, True, False]
    wait_until(lambda: pid_gone(pid), "the cancelled task's processor to end")
    after = driver.submit(tasks.process_id)
    assert driver.value(after) != pid
    assert running.task_id not in driver.results and queued.task_id not in driver.results


def test_higher_priority_runs_first(driver: TaskDriver, tmp_path):
    release = tmp_path / "release"
    blocker = driver.task(tasks.block, str(tmp_path / "pid"), str(release))
    driver.send(blocker)
    read_pid(str(tmp_path / "pid"))
    waiting = [driver.task(tasks.add, p, priority=p) for p in (0, 5, 1, 5)]
    driver.send(*waiting)
    # the heartbeat shows them queued before the blocker is released
    wait_until(lambda: _heartbeat(driver).queued_tasks == 4, "a heartbeat with 4 queued tasks")
    release.touch()
    order = []
    while len(order) < 5:
        message = driver.expect(m.TaskResultBatch)
        order.extend(result.task_id for result in message.results)
    assert order == [blocker.task_id, waiting[1].task_id, waiting[3].task_id, waiting[2].task_id, waiting[0].task_id]


def _heartbeat(driver: TaskDriver) -> m.WorkerHeartbeat:
    _, heartbeat = driver.scheduler.expect(m.WorkerHeartbeat, skip=(m.WaitingTasks,))
    return heartbeat


def test_heartbeat_reports_usage_and_counts(driver: TaskDriver, tmp_path):
    driver.send(driver.task(tasks.block, str(tmp_path / "pid")))
    read_pid(str(tmp_path / "pid"))
    heartbeat = wait_until(
        lambda: (h := _heartbeat(driver)).running_tasks == 1 and h, "a heartbeat with a running task"
    )
    assert heartbeat.agent_rss_bytes > 0 and heartbeat.processor_rss_bytes > 0


def test_balance_gives_back_queued_tasks_not_the_running_one(driver: TaskDriver, tmp_path):
    release = tmp_path / "release"
    blocker = driver.task(tasks.block, str(tmp_path / "pid"), str(release), "done")
    # the first (quick, tiny) task lets the worker send tasks ahead while the blocker runs: those stay
    numbers = list(range(2, TINY_TASKS_PIPELINE_DEPTH + 4))
    queued = [driver.task(tasks.add, 1, priority=1)] + [driver.task(tasks.add, n) for n in numbers]
    driver.send(blocker, *queued)
    read_pid(str(tmp_path / "pid"))
    driver.scheduler.send(driver.worker_id, m.BalanceRequest(2))
    response = driver.expect(m.BalanceResponse)
    assert response.task_ids == [queued[-1].task_id, queued[-2].task_id]
    release.touch()
    assert driver.value(blocker.task_id) == "done"
    assert driver.value(queued[0].task_id) == 1
    for task, number in zip(queued[1:-2], numbers, strict=False):
        assert driver.value(task.task_id) == number  # sent ahead: run here, after the blocker


def test_malformed_message_is_dropped_and_the_worker_goes_on(driver: TaskDriver):
    driver.scheduler.socket.send_multipart([driver.worker_id, b"\x01\x02\x03", b"junk"])
    driver.scheduler.socket.send_multipart([driver.worker_id, b"\x00" * 8])
    assert driver.value(driver.submit(tasks.add, 3, 4)) == 7


# ----------------------------------------------------------------------------- life cycle


def test_refusal_makes_the_worker_exit_non_zero(scheduler: FakeScheduler, start_worker):
    worker = start_worker(scheduler.address)
    identity, _ = scheduler.expect(m.Hello)
    scheduler.send(identity, m.Refusal(m.Version(9, 0), "protocol version 1.0 is not compatible with 9.0"))
    assert worker.wait(30) == 78
    assert "refused by scheduler" in open(start_worker.log_path).read()


def test_refusal_after_hello_ack_makes_the_worker_exit_to_be_replaced(scheduler, storage_server, start_worker):
    worker = start_worker(scheduler.address)
    identity, _ = scheduler.accept(storage_server.address)
    scheduler.send(identity, m.Refusal(PROTOCOL_VERSION, "send Hello first (got WorkerHeartbeat)"))
    assert worker.wait(30) == 1
    assert "scheduler no longer knows us" in open(start_worker.log_path).read()


def test_storage_refusing_the_worker_makes_it_exit_and_say_goodbye(scheduler: FakeScheduler, start_worker):
    storage = FakeScheduler()  # a ROUTER where the storage server would be, refusing
    try:
        worker = start_worker(scheduler.address)
        identity, _ = scheduler.accept(storage.address)
        storage_peer, _ = storage.expect(m.Hello)
        assert storage_peer == identity
        storage.send(storage_peer, m.Refusal(m.Version(3, 0), "protocol version 1.0 is not compatible with 3.0"))
        assert worker.wait(30) == 78
        _, goodbye = scheduler.expect(m.DisconnectRequest)
        assert "refused by object storage" in goodbye.reason
    finally:
        storage.close()


def test_no_hello_ack_makes_the_worker_exit_non_zero(scheduler: FakeScheduler, start_worker):
    worker = start_worker(scheduler.address, "--worker-timeout-seconds", "0.5")
    scheduler.expect(m.Hello)
    assert worker.wait(30) == 1
    assert "no answer from scheduler" in open(start_worker.log_path).read()


def test_silent_scheduler_makes_the_worker_exit(scheduler: FakeScheduler, storage_server, start_worker):
    worker = start_worker(scheduler.address, "-wt", "1", "-hi", "0.2")
    scheduler.accept(storage_server.address)
    assert worker.wait(30) == 1
    assert "nothing heard from scheduler" in open(start_worker.log_path).read()


def test_disconnect_request_from_the_scheduler_stops_the_worker(driver: TaskDriver, tmp_path, start_worker):
    driver.send(driver.task(tasks.block, str(tmp_path / "pid")))
    pid = read_pid(str(tmp_path / "pid"))
    driver.scheduler.send(driver.worker_id, m.DisconnectRequest("scheduler shutting down"))
    worker = _only_worker(start_worker)
    assert worker.wait(30) == 0
    wait_until(lambda: pid_gone(pid), "the processor to end with its agent")


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_stop_signal_says_goodbye_to_the_scheduler(driver: TaskDriver, tmp_path, start_worker, sig):
    driver.send(driver.task(tasks.block, str(tmp_path / "pid")))
    pid = read_pid(str(tmp_path / "pid"))
    worker = _only_worker(start_worker)
    worker.send_signal(sig)
    request = driver.expect(m.DisconnectRequest)
    assert signal.Signals(sig).name in request.reason
    assert worker.wait(30) == 0
    wait_until(lambda: pid_gone(pid), "the processor to end with its agent")


def test_processor_dies_with_a_killed_agent(driver: TaskDriver, tmp_path, start_worker):
    driver.send(driver.task(tasks.block, str(tmp_path / "pid")))
    pid = read_pid(str(tmp_path / "pid"))
    worker = _only_worker(start_worker)
    worker.kill()
    worker.wait(30)
    wait_until(lambda: pid_gone(pid), "the processor to end with its killed agent")


def _only_worker(start_worker):
    [worker] = start_worker.started  # the one the `driver` fixture started
    return worker


def test_many_tasks_in_one_batch(driver: TaskDriver):
    batch = [driver.task(tasks.add, n, n) for n in range(200)]
    driver.send(*batch)
    assert [driver.value(task.task_id) for task in batch] == [2 * n for n in range(200)]


def test_concurrent_cloudpickle_function_cache(driver: TaskDriver):
    """Many tasks of a few functions: every answer right, whichever function the processor has cached."""
    functions = [tasks.add, tasks.describe, tasks.process_id]
    batch = [driver.task(functions[n % 3], *((n,) if n % 3 != 2 else ())) for n in range(30)]
    driver.send(*batch)
    pid = driver.value(batch[2].task_id)
    for n, task in enumerate(batch):
        expected = [n, ((n,), {}), pid][n % 3]
        assert driver.value(task.task_id) == expected


def test_a_task_waiting_in_the_client_runs_the_next_task_on_the_same_processor(driver: TaskDriver, tmp_path):
    """A nested task waits for a task queued behind it on the same worker: no deadlock, no other process."""
    release = str(tmp_path / "release")
    parent = driver.task(tasks.wait_in_client, release)
    child = driver.task(tasks.create_file, release)
    sibling = driver.task(tasks.process_id)
    driver.send(parent, sibling, child)  # while a task waits the newest runs first: child, then sibling
    assert driver.value(child.task_id) == "created"
    assert driver.value(parent.task_id) == "released"
    pid = driver.value(sibling.task_id)
    assert driver.value(driver.submit(tasks.process_id)) == pid  # one processor throughout


def test_the_scheduler_hears_when_a_task_waits_and_runs_again_and_heartbeats_count_it(driver: TaskDriver, tmp_path):
    release = tmp_path / "release"
    parent = driver.send(driver.task(tasks.wait_in_client, str(release)))[0]
    assert driver.expect(m.WaitingTasks) == m.WaitingTasks([parent], [True])
    wait_until(lambda: (h := _heartbeat(driver)).suspended_tasks == 1 and h.running_tasks == 0, "a waiting task")
    release.touch()
    assert driver.value(parent) == "released"
    # the notice that it runs again comes before its result, or in the same turn of the agent, after it
    notices = [message for message in driver.other if isinstance(message, m.WaitingTasks)]
    assert (notices or [driver.expect(m.WaitingTasks)]) == [m.WaitingTasks([parent], [False])]


def test_cancel_of_a_waiting_task_stops_the_processor_and_the_running_task_dies(driver: TaskDriver, tmp_path):
    pid_path = str(tmp_path / "pid")
    parent = driver.task(tasks.wait_in_client, str(tmp_path / "never"))
    child = driver.task(tasks.block, pid_path, "", None, attempt=3)
    driver.send(parent, child)
    pid = read_pid(pid_path)  # the child runs while the parent waits
    driver.scheduler.send(driver.worker_id, m.TaskCancel([parent.task_id]))
    confirm = driver.expect(m.TaskCancelConfirm)
    assert confirm.cancelled == [True]
    result = driver.result(child.task_id)
    assert (result.status, result.attempt) == (m.TaskStatus.WORKER_DIED, 3)
    assert result.error_text == f"its processor was stopped to cancel task {parent.task_id.hex()}"
    wait_until(lambda: pid_gone(pid), "the processor to end")
    assert driver.value(driver.submit(tasks.process_id)) != pid
    assert parent.task_id not in driver.results


def test_timeout_of_a_waiting_task_fails_it_and_the_running_task_dies(driver: TaskDriver, tmp_path):
    parent = driver.task(tasks.wait_in_client, str(tmp_path / "never"), timeout_seconds=1)
    child = driver.task(tasks.block, str(tmp_path / "pid"))
    driver.send(parent, child)
    error, _ = driver.failure(parent.task_id)
    assert isinstance(error, TaskTimeoutError) and "timeout of 1 seconds" in str(error)
    result = driver.result(child.task_id)
    assert result.status == m.TaskStatus.WORKER_DIED and str(error) in result.error_text
    assert driver.value(driver.submit(tasks.add, 1, 1)) == 2


def test_a_killed_processor_fails_every_task_started_on_it(driver: TaskDriver, tmp_path):
    pid_path = str(tmp_path / "pid")
    parent = driver.task(tasks.wait_in_client, str(tmp_path / "never"))
    child = driver.task(tasks.block, pid_path)
    driver.send(parent, child)
    os.kill(read_pid(pid_path), signal.SIGKILL)
    child_result, parent_result = driver.result(child.task_id), driver.result(parent.task_id)
    assert child_result.status == parent_result.status == m.TaskStatus.WORKER_DIED
    assert child_result.error_text == "processor was killed by signal SIGKILL"
    assert parent_result.error_text == (
        f"processor was killed by signal SIGKILL, while task {child.task_id.hex()} ran beside this one"
    )
    assert driver.value(driver.submit(tasks.add, 2, 2)) == 4


def test_uvloop_event_loop(scheduler: FakeScheduler, storage, storage_server, start_worker):
    start_worker(scheduler.address, "--event-loop", "uvloop")
    worker_id, _ = scheduler.accept(storage_server.address)
    driver = TaskDriver(scheduler, storage, worker_id)
    assert driver.value(driver.submit(tasks.add, 40, 2)) == 42
    assert "use event loop: uvloop" in open(start_worker.log_path).read()


# ----------------------------------------------------------------------------- embedded


EMBEDDING_PROGRAM = """
import asyncio, signal, sys

import zmq.asyncio

from scaler.worker import WorkerAgent, WorkerConfig
from scaler.worker.peer_connection import ZmqConnect


async def main():
    context = zmq.asyncio.Context()  # the program's own
    config = WorkerConfig(sys.argv[1], heartbeat_interval_seconds=0.5)
    agent = WorkerAgent(config, connect=ZmqConnect(context), handle_signals=False)
    asyncio.get_running_loop().add_signal_handler(signal.SIGUSR1, agent.stop, "the program is done with it")
    code = await agent.run()
    context.term()
    print(f"the worker returned {code}", flush=True)
    return code


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
"""


def test_a_worker_embedded_in_a_program_runs_in_its_event_loop_on_its_context(
    scheduler: FakeScheduler, storage, storage_server, tmp_path
):
    program = tmp_path / "embedding.py"
    program.write_text(EMBEDDING_PROGRAM)
    log_path = str(tmp_path / "embedding.log")
    process = start_process([sys.executable, str(program), scheduler.address], log_path)
    try:
        worker_id, _ = scheduler.accept(storage_server.address)
        driver = TaskDriver(scheduler, storage, worker_id)
        assert driver.value(driver.submit(tasks.add, 40, 2)) == 42
        process.send_signal(signal.SIGUSR1)
        goodbye = driver.expect(m.DisconnectRequest)
        assert goodbye.reason == "worker the program is done with it"
        assert process.wait(30) == 0
        assert "the worker returned 0" in open(log_path).read()
    finally:
        stop_process(process)
