"""The Symphony runner's host (`SymphonyHost`) against the fake Symphony in this process: what it asks of
soamapi, from which thread, and what it tells the runner back."""

from __future__ import annotations

import asyncio
import os
import threading
import time
from typing import Any, Callable, List

import cloudpickle

from scaler.protocol import messages as m
from scaler.protocol.serializer import DefaultSerializer, serialize_payload
from scaler.symphony.symphony_runner import (
    AbortTask,
    OpenSession,
    SessionLost,
    SessionOpened,
    SubmitTask,
    Submitted,
    TaskAborted,
    TaskFailed,
    TaskOutput,
)
from scaler.symphony.symphony_settings import SymphonySettings
from scaler.worker.task_runner import ReadyTask
from scaler.worker.worker_events import Broken, FromRunner

SCHEDULER = "tcp://127.0.0.1:2345"


def _ready(number: int, function: Callable, *arguments: Any) -> ReadyTask:
    task = m.Task(number.to_bytes(16, "big"), b"C|test|1|0", b"F" * 16)
    serialized = [("", serialize_payload(DefaultSerializer(), argument), b"") for argument in arguments]
    return ReadyTask(task, cloudpickle.dumps(function), None, serialized, 0)


class Driver:
    """A host in an event loop of this test: effects in, what it delivers collected."""

    def __init__(self, **settings: Any) -> None:
        from scaler.symphony.symphony_host import SymphonyHost

        self.host = SymphonyHost(SymphonySettings("ScalerApp", 2, **settings), SCHEDULER, "Worker test")
        self.events: List[Any] = []
        self.threads: List[str] = []

    def _deliver(self, event: Any) -> None:
        self.threads.append(threading.current_thread().name)
        self.events.append(event.message if isinstance(event, FromRunner) else event)

    def run(self, scenario: Callable[[Driver], Any]) -> None:
        async def main() -> None:
            self.host.open(asyncio.get_running_loop(), self._deliver)
            try:
                await scenario(self)
            finally:
                await self.host.close()

        asyncio.run(main())

    def do(self, effect: Any) -> None:
        self.host.effect_handlers[type(effect)](effect)

    async def until(self, kind: type, count: int = 1) -> List[Any]:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            found = [event for event in self.events if isinstance(event, kind)]
            if len(found) >= count:
                return found
            await asyncio.sleep(0.01)
        raise TimeoutError(f"no {count} {kind.__name__} within 30 s; got {self.events}")


def _square(x):
    return x * x


def test_tasks_go_to_a_session_of_the_application_and_their_outputs_come_back_on_the_event_loop(fake_grid):
    driver = Driver()

    async def scenario(d: Driver) -> None:
        d.do(OpenSession())
        [opened] = await d.until(SessionOpened)
        for number in range(1, 4):
            d.do(SubmitTask(number, opened.session_id, _ready(number, _square, number)))
        outputs = await d.until(TaskOutput, 3)
        assert sorted(cloudpickle.loads(output.payload) for output in outputs) == [1, 4, 9]
        assert {output.status for output in outputs} == {m.TaskStatus.SUCCESS}
        assert {output.function for output in outputs} == {f"{__name__}._square"}
        submitted = await d.until(Submitted, 3)
        for output in outputs:  # each task was known before its output came
            assert d.events.index(next(s for s in submitted if s.serial == output.serial)) < d.events.index(output)

    driver.run(scenario)
    main = threading.main_thread().name
    assert set(driver.threads) == {main}  # delivered on the event loop's thread, never Symphony's
    [session] = fake_grid.sessions
    assert session.state == "closed" and session.connection.closed and fake_grid.uninitialized
    assert fake_grid.leaks == [] and fake_grid.invocations == 3


def _scheduler_address():
    return os.environ.get("SCALER_SCHEDULER_ADDRESS")


def test_the_service_learns_the_scheduler_s_address_from_the_session(fake_grid):
    os.environ.pop("SCALER_SCHEDULER_ADDRESS", None)

    async def scenario(d: Driver) -> None:
        d.do(OpenSession())
        [opened] = await d.until(SessionOpened)
        d.do(SubmitTask(1, opened.session_id, _ready(1, _scheduler_address)))
        [output] = await d.until(TaskOutput)
        assert cloudpickle.loads(output.payload) == SCHEDULER

    try:
        Driver().run(scenario)
    finally:
        os.environ.pop("SCALER_SCHEDULER_ADDRESS", None)


def _fail_in_symphony():
    import soamapi_fake

    soamapi_fake.grid().fail_task(*soamapi_fake.current_task())


def test_a_task_symphony_fails_is_reported_with_symphony_s_reason(fake_grid):
    async def scenario(d: Driver) -> None:
        d.do(OpenSession())
        [opened] = await d.until(SessionOpened)
        d.do(SubmitTask(1, opened.session_id, _ready(1, _fail_in_symphony)))
        [failed] = await d.until(TaskFailed)
        assert failed.serial == 1 and "failed in Symphony (injected failure)" in failed.reason

    Driver().run(scenario)


def _wait_for(path: str) -> str:
    deadline = time.monotonic() + 60
    while not os.path.exists(path) and time.monotonic() < deadline:
        time.sleep(0.01)
    return "released"


def test_an_abort_stops_the_task_in_symphony_and_its_output_never_comes(fake_grid, tmp_path):
    gate = str(tmp_path / "gate")

    async def scenario(d: Driver) -> None:
        d.do(OpenSession())
        [opened] = await d.until(SessionOpened)
        d.do(SubmitTask(1, opened.session_id, _ready(1, _wait_for, gate)))
        await d.until(Submitted)
        d.do(AbortTask(1))
        [aborted] = await d.until(TaskAborted)
        assert aborted.serial == 1
        open(gate, "w").close()  # the service's thread ends the task; its output is dropped
        while fake_grid.running_now:
            await asyncio.sleep(0.01)
        d.do(SubmitTask(2, opened.session_id, _ready(2, _square, 3)))
        [output] = await d.until(TaskOutput)
        assert output.serial == 2

    Driver().run(scenario)


def _abort_the_session():
    import soamapi_fake

    soamapi_fake.grid().abort_sessions("injected")


def test_a_session_that_dies_is_reported_lost_and_a_new_one_opens(fake_grid):
    async def scenario(d: Driver) -> None:
        d.do(OpenSession())
        [opened] = await d.until(SessionOpened)
        d.do(SubmitTask(1, opened.session_id, _ready(1, _abort_the_session)))
        [lost] = await d.until(SessionLost)
        assert lost.session_id == opened.session_id and "injected" in lost.reason
        d.do(SubmitTask(2, opened.session_id, _ready(2, _square, 2)))  # for the dead session: dropped
        d.do(OpenSession())
        opened_twice = await d.until(SessionOpened, 2)
        assert opened_twice[1].session_id != opened.session_id
        d.do(SubmitTask(3, opened_twice[1].session_id, _ready(3, _square, 3)))
        [output] = await d.until(TaskOutput)
        assert output.serial == 3

    Driver().run(scenario)
    assert [session.state for session in fake_grid.sessions] == ["closed", "closed"]  # the dead one closed too


def test_a_refused_connect_stops_the_worker_naming_the_application_and_the_reason(fake_grid):
    fake_grid.refuse_connect = "no such user"

    async def scenario(d: Driver) -> None:
        d.do(OpenSession())
        [broken] = await d.until(Broken)
        assert "'ScalerApp'" in broken.reason and "no such user" in broken.reason

    Driver().run(scenario)


def test_a_session_type_the_profile_lacks_stops_the_worker_naming_it(fake_grid):
    async def scenario(d: Driver) -> None:
        d.do(OpenSession())
        [broken] = await d.until(Broken)
        assert "'NoSuchType' is not defined" in broken.reason

    Driver(session_type="NoSuchType").run(scenario)


def test_a_task_whose_serializer_does_not_load_fails_without_reaching_symphony(fake_grid):
    async def scenario(d: Driver) -> None:
        d.do(OpenSession())
        [opened] = await d.until(SessionOpened)
        ready = _ready(1, _square, 2)
        task = ready.task
        task.serializer_id = b"S" * 16
        d.do(SubmitTask(1, opened.session_id, ready._replace(serializer=b"not a pickle")))
        [output] = await d.until(TaskOutput)
        assert output.status == m.TaskStatus.FAILED and fake_grid.invocations == 0

    Driver().run(scenario)
