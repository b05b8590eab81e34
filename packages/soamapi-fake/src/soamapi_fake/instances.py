"""Service instances of the fake grid: where an application's tasks run.

A `Dispatcher` per application keeps its pending tasks (first come, first served) and starts instances as tasks
wait, up to the application's slots. An instance serves one task at a time: it creates its service (once),
enters a task's session (leaving the one it served before), invokes, and hands the outcome back: an output,
a failure the service raised (retried up to the application's limit), or the end of the instance itself.

- `ThreadInstance`: a thread of this process holding an instance of the service class (``module:Class``); a
  task it runs can find itself with `current_task`.
- `ProcessInstance`: a process running the service program, whose `ServiceContainer.run` talks to its instance
  thread over a pipe (`serve_grid`): the real service file, real pickling between processes, a real crash.
  Aborting its running task kills it; the next task starts a new one.
"""

from __future__ import annotations

import ctypes
import importlib
import multiprocessing
import multiprocessing.connection
import os
import signal
import subprocess
import threading
import time
from collections import deque
from typing import Any, Deque, List, Optional, Tuple

from soamapi_fake.errors import EmbeddedServiceException, FatalException, SoamException
from soamapi_fake.fake_grid import STOP_SECONDS, Application, FakeGrid, FakeTask, SessionState

INSTANCE_VARIABLE = "SOAMAPI_FAKE_INSTANCE"  # in a service-instance process: the file descriptor of its pipe

Outcome = Tuple[Any, ...]  # ("output", records) | ("failure", type name, message, fatal) | ("crash", why)

_current = threading.local()


def current_task() -> Tuple[str, str]:
    """(session ID, task ID) of the task the calling thread runs as a service (thread mode)."""
    task = getattr(_current, "task", None)
    if task is None:
        raise RuntimeError("current_task(): this thread runs no task of the fake grid")
    return task


class Dispatcher:
    def __init__(self, grid: FakeGrid, application: Application) -> None:
        self._grid = grid
        self._application = application
        self._pending: Deque[FakeTask] = deque()
        self._ready = threading.Condition()
        self._instances: List[_Instance] = []
        self._idle = 0
        self._stopping = False

    def enqueue(self, task: FakeTask, first: bool = False) -> None:
        with self._ready:
            if self._stopping:
                raise SoamException("the grid is shutting down")
            task.state = "pending"
            if first:
                self._pending.appendleft(task)
            else:
                self._pending.append(task)
            if self._idle == 0 and len(self._instances) < self._application.slots:
                kind = ThreadInstance if self._application.mode == "thread" else ProcessInstance
                instance = kind(self, self._application, len(self._instances))
                self._instances.append(instance)
                instance.start()
            self._ready.notify()

    def take(self, instance: _Instance) -> Optional[FakeTask]:
        """The next task for ``instance`` to run; None when the grid stops."""
        with self._ready:
            while not self._stopping:
                while self._pending:
                    task = self._pending.popleft()
                    if task.state == "pending":  # not aborted meanwhile
                        task.state = "running"
                        task.attempts += 1
                        task.instance = instance
                        return task
                self._idle += 1
                self._ready.wait()
                self._idle -= 1
            return None

    def delay(self, task: FakeTask) -> bool:
        """Wait the application's delay before a run (a slow grid); whether the task is still to run."""
        with self._ready:
            self._ready.wait_for(
                lambda: task.state != "running" or self._stopping, self._application.task_delay_seconds
            )
            if task.state == "running" and not self._stopping:
                return True
            task.instance = None
            return False

    def started(self, task: FakeTask) -> None:
        self._grid.run_started(task)

    def finished(self, task: FakeTask, outcome: Outcome) -> None:
        self._grid.run_ended(task)
        with self._ready:
            task.instance = None
            if task.state != "running":  # aborted while it ran: its output is dropped
                return
        session = task.session
        retry_limit = self._application.task_retry_limit
        if task.injected_failure:
            session.failed_output(task, task.injected_failure, None)
        elif outcome[0] == "output":
            session.deliver(task, outcome[1], None)
        elif outcome[0] == "failure":
            _, type_name, message, fatal = outcome
            if not fatal and task.attempts <= retry_limit:
                self.enqueue(task, first=True)
            else:
                text = f"task {task.task_id} failed in its service: {type_name}: {message}"
                session.failed_output(task, text, EmbeddedServiceException(type_name, message))
        elif task.attempts <= retry_limit:  # the instance ended: Symphony runs the task again
            self.enqueue(task, first=True)
        else:
            session.failed_output(task, f"the service instance running task {task.task_id} ended: {outcome[1]}", None)

    def abort(self, task: FakeTask) -> None:
        with self._ready:
            was, task.state = task.state, "aborted"
            instance = task.instance
            self._ready.notify_all()  # a task waiting out the application's delay is not run
        if was == "running" and instance is not None:
            instance.abort_running()

    def stop(self) -> None:
        with self._ready:
            self._stopping = True
            self._ready.notify_all()
            instances = list(self._instances)
        for instance in instances:
            instance.join(STOP_SECONDS)


class _Instance(threading.Thread):
    def __init__(self, dispatcher: Dispatcher, application: Application, number: int) -> None:
        super().__init__(name=f"soam-{application.name}-instance-{number}", daemon=True)
        self._dispatcher = dispatcher
        self._application = application

    def run(self) -> None:
        try:
            while True:
                task = self._dispatcher.take(self)
                if task is None:
                    return
                if self._application.task_delay_seconds and not self._dispatcher.delay(task):
                    continue
                self._dispatcher.started(task)
                self._dispatcher.finished(task, self.invoke(task))
        finally:
            self.destroy()

    def invoke(self, task: FakeTask) -> Outcome:
        raise NotImplementedError

    def abort_running(self) -> None:
        pass

    def destroy(self) -> None:
        pass


class ThreadInstance(_Instance):
    def __init__(self, dispatcher: Dispatcher, application: Application, number: int) -> None:
        super().__init__(dispatcher, application, number)
        self._container: Any = None
        self._session: Optional[SessionState] = None

    def invoke(self, task: FakeTask) -> Outcome:
        from soamapi_fake.api import ServiceContext, SessionContext, TaskContext

        session = task.session
        try:
            if self._container is None:
                module, _, name = str(self._application.service).partition(":")
                container = getattr(importlib.import_module(module), name)()
                container.on_create_service(ServiceContext(self._application.name))
                self._container = container
            if self._session is not session:
                if self._session is not None:
                    self._container.on_session_leave()
                self._session = None
                self._container.on_session_enter(SessionContext(session.session_id, session.common_data))
                self._session = session
            context = TaskContext(session.session_id, task.task_id, task.records)
            _current.task = (session.session_id, task.task_id)
            try:
                self._container.on_invoke(context)
            finally:
                _current.task = None
            return ("output", context.output if context.output is not None else [])
        except BaseException as error:
            return _failure(error)

    def destroy(self) -> None:
        if self._container is None:
            return
        try:
            if self._session is not None:
                self._container.on_session_leave()
            self._container.on_destroy_service()
        except Exception:
            pass


class _Ended(Exception):
    """The service-instance process ended, or did not answer in time."""


class ProcessInstance(_Instance):
    def __init__(self, dispatcher: Dispatcher, application: Application, number: int) -> None:
        super().__init__(dispatcher, application, number)
        self._process: Optional[subprocess.Popen] = None
        self._pipe: Optional[multiprocessing.connection.Connection] = None
        self._session: Optional[SessionState] = None

    def invoke(self, task: FakeTask) -> Outcome:
        session = task.session
        try:
            if self._process is None:
                self._start()
            if self._session is not session:
                if self._session is not None:
                    self._call(("leave",))
                self._session = None
                self._call(("enter", session.session_id, session.common_data))
                self._session = session
            return self._call(("invoke", session.session_id, task.task_id, task.records))
        except _Ended as ended:
            self._kill()
            return ("crash", str(ended))
        except _ServiceFailed as failed:
            return failed.outcome

    def abort_running(self) -> None:
        process = self._process
        if process is not None:
            try:
                process.kill()  # its invoke sees the end; the task, aborted, is dropped
            except OSError:
                pass

    def destroy(self) -> None:
        if self._process is None:
            return
        try:
            self._call(("destroy",), STOP_SECONDS)
        except (_Ended, _ServiceFailed):
            pass
        self._kill()

    def _start(self) -> None:
        from soamapi_fake import shim_path

        command = self._application.service
        command = command.split() if isinstance(command, str) else list(command)
        parent, child = multiprocessing.Pipe()
        environment = dict(os.environ)
        environment[INSTANCE_VARIABLE] = str(child.fileno())
        environment["PYTHONPATH"] = os.pathsep.join(filter(None, [shim_path(), environment.get("PYTHONPATH")]))
        try:
            self._process = subprocess.Popen(command, env=environment, pass_fds=(child.fileno(),))
        except OSError as error:
            raise _Ended(f"cannot start the service {command}: {error}") from None
        finally:
            child.close()
        self._pipe = parent
        self._session = None
        self._call(("create", self._application.name), self._application.startup_seconds)

    def _call(self, message: Tuple[Any, ...], timeout: Optional[float] = None) -> Outcome:
        process, pipe = self._process, self._pipe
        assert process is not None and pipe is not None
        deadline = None if timeout is None else time.monotonic() + timeout
        try:
            pipe.send(message)
            while not pipe.poll(0.05):
                if process.poll() is not None:
                    raise _Ended(_exit_cause(process.returncode))
                if deadline is not None and time.monotonic() > deadline:
                    raise _Ended(f"the service did not answer {message[0]!r} within {timeout:g} seconds")
            reply = pipe.recv()
        except (EOFError, OSError):
            process.wait(STOP_SECONDS)
            raise _Ended(_exit_cause(process.returncode)) from None
        if reply[0] == "failure" and message[0] != "invoke":
            raise _ServiceFailed(reply)
        return reply

    def _kill(self) -> None:
        process, pipe = self._process, self._pipe
        self._process = self._pipe = None
        self._session = None
        if pipe is not None:
            pipe.close()
        if process is not None:
            if process.poll() is None:
                process.kill()
            process.wait(STOP_SECONDS)


class _ServiceFailed(Exception):
    def __init__(self, outcome: Outcome) -> None:
        super().__init__(outcome[2])
        self.outcome = outcome


def _failure(error: BaseException) -> Outcome:
    return ("failure", type(error).__name__, str(error), isinstance(error, FatalException))


def _exit_cause(code: Optional[int]) -> str:
    if code is not None and code < 0:
        return f"the service-instance process was killed by {signal.Signals(-code).name}"
    return f"the service-instance process exited with code {code}"


# ----------------------------------------------------------------------------- inside the service's process


def serve_grid(container: Any, descriptor: int) -> None:
    """`ServiceContainer.run` in a service-instance process: do what the instance thread asks, until it closes
    the pipe or asks to destroy the service."""
    from soamapi_fake.api import ServiceContext, SessionContext, TaskContext

    _die_with_parent()
    pipe = multiprocessing.connection.Connection(descriptor)
    while True:
        try:
            message = pipe.recv()
        except (EOFError, OSError):
            return
        kind = message[0]
        reply: Outcome = ("ok",)
        try:
            if kind == "create":
                container.on_create_service(ServiceContext(message[1]))
            elif kind == "enter":
                container.on_session_enter(SessionContext(message[1], message[2]))
            elif kind == "invoke":
                context = TaskContext(message[1], message[2], message[3])
                _current.task = (message[1], message[2])
                try:
                    container.on_invoke(context)
                finally:
                    _current.task = None
                reply = ("output", context.output if context.output is not None else [])
            elif kind == "leave":
                container.on_session_leave()
            elif kind == "destroy":
                container.on_destroy_service()
        except BaseException as error:
            reply = _failure(error)
        pipe.send(reply)
        if kind == "destroy":
            return


def _die_with_parent() -> None:
    """SIGKILL this process when the grid's process (the thread that started it) ends (Linux)."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass
