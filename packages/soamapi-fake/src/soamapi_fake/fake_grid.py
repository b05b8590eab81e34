"""The fake grid: applications, connections, sessions, and what they do with tasks.

One `FakeGrid` per process (`grid()`), configured from the environment variable `CONFIG_VARIABLE` (JSON, or
the path of a JSON file) when it is first used, or installed by a test (`install`). An application's tasks
run on service instances (`instances`): threads of this process running the service class, or processes
running the service program, at most ``slots`` at once, each serving one task at a time. A session's outputs
reach its callback on one thread of the session's own, never on the thread that submitted, as on a real
grid; a callback that raises is recorded in `FakeGrid.callback_errors` (and printed), not lost.

Failure injection: a refused connect (``refuse_connect``), a session that dies (`FakeGrid.abort_sessions`),
a task Symphony fails (`FakeGrid.fail_task`), a service instance that dies (a process-mode service that
exits), a slow start of every task (``task_delay_seconds``), a service that raises (retried up to
``task_retry_limit`` times, then failed with the exception embedded as `EmbeddedServiceException`).
"""

from __future__ import annotations

import atexit
import itertools
import json
import os
import queue
import sys
import threading
import time
import traceback
from collections import deque
from dataclasses import dataclass
from typing import Any, Deque, Dict, List, Optional, Tuple, Union

from soamapi_fake.errors import SoamException, soam_exception
from soamapi_fake.streams import Record

CONFIG_VARIABLE = "SOAMAPI_FAKE_CONFIG"
DEFAULT_SESSION_TYPES = (
    "RecoverableAllHistoricalData",
    "RecoverableNoHistoricalData",
    "UnrecoverableAllHistoricalData",
    "UnrecoverableNoHistoricalData",
)
STOP_SECONDS = 10.0  # bound of every wait for a thread or a process of the fake to end


@dataclass
class Application:
    """An application as `soamreg` would register it."""

    name: str
    service: Union[str, List[str]]  # thread mode: "module:Class"; process mode: the command that runs the service
    mode: str = "thread"  # or "process"
    slots: int = 256  # service instances at once (a real grid's slots; large, so the fake hides no overshoot)
    session_types: Tuple[str, ...] = DEFAULT_SESSION_TYPES
    task_retry_limit: int = 1  # runs after the first failed one
    abort_session_if_task_fail: bool = False
    task_delay_seconds: float = 0.0  # each run starts this much later: a slow grid
    startup_seconds: float = 60.0  # process mode: a service that does not call run() within this fails its task

    def __post_init__(self) -> None:
        if self.mode not in ("thread", "process"):
            raise ValueError(f"application {self.name}: mode must be 'thread' or 'process', not {self.mode!r}")
        self.session_types = tuple(self.session_types)


class FakeTask:
    __slots__ = ("session", "task_id", "records", "attempts", "state", "instance", "injected_failure")

    def __init__(self, session: SessionState, task_id: str, records: List[Record]) -> None:
        self.session = session
        self.task_id = task_id
        self.records = records
        self.attempts = 0
        self.state = "pending"  # -> running -> done; aborted from either
        self.instance: Any = None
        self.injected_failure = ""


class FakeGrid:
    def __init__(self, applications: Any = (), refuse_connect: str = "", record_path: str = "") -> None:
        self.applications: Dict[str, Application] = {}
        for application in applications:
            if not isinstance(application, Application):
                application = Application(**application)
            self.applications[application.name] = application
        self.refuse_connect = refuse_connect
        self._record_path = record_path
        self._lock = threading.RLock()
        self._ids = itertools.count(1)
        self._initialized = False
        self._connections: Dict[str, ConnectionState] = {}
        self._sessions: Dict[str, SessionState] = {}
        self._dispatchers: Dict[str, Any] = {}
        self.callbacks_paused = threading.Event()
        self.callbacks_paused.set()  # set: callbacks flow
        # observation
        self.callback_errors: List[str] = []
        self.leaks: List[str] = []
        self.running_now = 0
        self.max_running = 0
        self.invocations = 0
        self.uninitialized = False

    @classmethod
    def from_environment(cls) -> FakeGrid:
        text = os.environ.get(CONFIG_VARIABLE, "")
        if text and not text.lstrip().startswith("{"):
            with open(text) as file:
                text = file.read()
        config = json.loads(text) if text else {}
        return cls(config.get("applications", ()), config.get("refuse_connect", ""), config.get("record", ""))

    # ------------------------------------------------------------------------- the library

    def initialize(self) -> None:
        with self._lock:
            self._initialized = True
            self.uninitialized = False

    def uninitialize(self) -> None:
        with self._lock:
            self._check_initialized("uninitialize")
            open_connections = [c for c in self._connections.values() if not c.closed]
            if open_connections:
                self.leaks.append(f"uninitialize with {len(open_connections)} connection(s) open")
            self._initialized = False
            self.uninitialized = True
        for connection in open_connections:
            connection.close()
        self.shutdown()

    def connect(self, application_name: str) -> ConnectionState:
        with self._lock:
            self._check_initialized("connect")
            if self.refuse_connect:
                raise SoamException(f"connect to application {application_name!r} refused: {self.refuse_connect}")
            application = self.applications.get(application_name)
            if application is None:
                raise SoamException(f"connect: no application {application_name!r} is registered")
            connection = ConnectionState(self, application, str(next(self._ids)))
            self._connections[connection.connection_id] = connection
            return connection

    def _check_initialized(self, what: str) -> None:
        if not self._initialized:
            raise SoamException(f"{what}: the API is not initialized (call soamapi.initialize() first)")

    # ------------------------------------------------------------------------- failure injection

    def abort_sessions(self, reason: str, session_id: Optional[str] = None) -> None:
        """The session (every open session if None) dies: its callback's on_exception is called, its tasks are
        gone, and it refuses new ones."""
        with self._lock:
            sessions = [s for s in self._sessions.values() if session_id in (None, s.session_id)]
        for session in sessions:
            session.fail(reason)

    def fail_task(self, session_id: str, task_id: str) -> None:
        """Symphony fails this task when its run ends (a failed output with no embedded exception)."""
        with self._lock:
            session = self._sessions.get(session_id)
            task = session.tasks.get(task_id) if session is not None else None
            if task is None:
                raise KeyError(f"no task {task_id} in session {session_id}")
            task.injected_failure = f"task {task_id} failed in Symphony (injected failure)"

    def pause_callbacks(self) -> None:
        self.callbacks_paused.clear()

    def resume_callbacks(self) -> None:
        self.callbacks_paused.set()

    # ------------------------------------------------------------------------- observation

    def session(self, session_id: str) -> SessionState:
        with self._lock:
            return self._sessions[session_id]

    @property
    def sessions(self) -> List[SessionState]:
        with self._lock:
            return list(self._sessions.values())

    def record(self, event: str, **details: Any) -> None:
        if not self._record_path:
            return
        line = json.dumps({"event": event, "time": time.time(), "running": self.running_now, **details})
        with self._lock, open(self._record_path, "a") as file:
            file.write(line + "\n")

    def callback_error(self, text: str) -> None:
        with self._lock:
            self.callback_errors.append(text)
        print(f"soamapi_fake: a session callback raised:\n{text}", file=sys.stderr, flush=True)

    # ------------------------------------------------------------------------- internals

    def add_session(self, session: SessionState) -> None:
        with self._lock:
            self._sessions[session.session_id] = session

    def new_id(self) -> str:
        return str(next(self._ids))

    def dispatcher(self, application: Application) -> Any:
        from soamapi_fake.instances import Dispatcher

        with self._lock:
            dispatcher = self._dispatchers.get(application.name)
            if dispatcher is None:
                dispatcher = self._dispatchers[application.name] = Dispatcher(self, application)
            return dispatcher

    def run_started(self, task: FakeTask) -> None:
        with self._lock:
            self.running_now += 1
            self.max_running = max(self.max_running, self.running_now)
            self.invocations += 1
        self.record("start", session=task.session.session_id, task=task.task_id)

    def run_ended(self, task: FakeTask) -> None:
        with self._lock:
            self.running_now -= 1
        self.record("end", session=task.session.session_id, task=task.task_id)

    def shutdown(self) -> None:
        """Stop every service instance (on_destroy_service; processes stopped)."""
        with self._lock:
            dispatchers, self._dispatchers = list(self._dispatchers.values()), {}
        for dispatcher in dispatchers:
            dispatcher.stop()


class ConnectionState:
    def __init__(self, grid: FakeGrid, application: Application, connection_id: str) -> None:
        self.grid = grid
        self.application = application
        self.connection_id = connection_id
        self.closed = False
        self.sessions: List[SessionState] = []

    def create_session(
        self, session_type: str, name: str, callback: Any, common_data: Optional[List[Record]]
    ) -> SessionState:
        self._check_open("create_session")
        if session_type not in self.application.session_types:
            raise SoamException(
                f"create_session: session type {session_type!r} is not defined in the profile of application "
                f"{self.application.name!r} ({', '.join(self.application.session_types)})"
            )
        session = SessionState(self, self.grid.new_id(), name, callback, common_data)
        self.sessions.append(session)
        self.grid.add_session(session)
        return session

    def open_session(self, session_id: str, callback: Any) -> SessionState:
        self._check_open("open_session")
        for session in self.grid.sessions:
            if session.session_id == session_id and session.state == "detached":
                session.attach(callback)
                self.sessions.append(session)
                return session
        raise SoamException(f"open_session: no detached session {session_id!r}")

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        for session in self.sessions:
            if session.state == "open":
                session.close(detach=False)

    def _check_open(self, what: str) -> None:
        if self.closed:
            raise SoamException(f"{what}: connection {self.connection_id} is closed")


class SessionState:
    def __init__(
        self, connection: ConnectionState, session_id: str, name: str, callback: Any, common_data: Any
    ) -> None:
        self.connection = connection
        self.grid = connection.grid
        self.application = connection.application
        self.session_id = session_id
        self.name = name
        self.common_data = common_data
        self.state = "open"  # -> closed | aborted | detached (-> open again)
        self.tasks: Dict[str, FakeTask] = {}
        self._task_ids = itertools.count(1)
        self._lock = threading.Lock()
        self._callback = callback
        self._outputs: queue.Queue[Any] = queue.Queue()  # to the callback thread
        self._fetched: Deque[Tuple[str, Any, Any]] = deque()  # outputs of a session that receives synchronously
        self._fetch_ready = threading.Condition(self._lock)
        self._callback_thread: Optional[threading.Thread] = None
        if callback is not None:
            self._start_callback_thread()

    # ------------------------------------------------------------------------- the client's calls

    def submit(self, records: List[Record]) -> str:
        with self._lock:
            self._check_usable("send_task_input")
            task = FakeTask(self, str(next(self._task_ids)), records)
            self.tasks[task.task_id] = task
        self.grid.record("submit", session=self.session_id, task=task.task_id)
        self.grid.dispatcher(self.application).enqueue(task)
        return task.task_id

    def fetch(self, count_max: int, timeout_seconds: float) -> List[Tuple[str, Any, Any]]:
        if self._callback is not None:
            raise SoamException("fetch_task_output: this session receives its outputs through its callback")
        deadline = None if timeout_seconds < 0 else time.monotonic() + timeout_seconds
        with self._lock:
            while len(self._fetched) < count_max:
                self._check_usable("fetch_task_output")
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    break
                self._fetch_ready.wait(left)
            return [self._fetched.popleft() for _ in range(min(count_max, len(self._fetched)))]

    def abort_tasks(self, task_ids: List[str]) -> None:
        with self._lock:
            self._check_usable("abort_tasks")
            tasks = [self.tasks[task_id] for task_id in task_ids if task_id in self.tasks]
        dispatcher = self.grid.dispatcher(self.application)
        for task in tasks:
            dispatcher.abort(task)
            self.grid.record("abort", session=self.session_id, task=task.task_id)

    def close(self, detach: bool) -> None:
        if threading.current_thread() is self._callback_thread:
            raise SoamException("Session.close called from the session's callback: it would deadlock")
        with self._lock:
            if self.state in ("closed", "detached"):
                return
            was_open = self.state == "open"
            self.state = "detached" if detach else "closed"
            tasks = list(self.tasks.values())
        self.grid.record("close", session=self.session_id, detach=detach)
        if not detach:
            if was_open:
                dispatcher = self.grid.dispatcher(self.application)
                for task in tasks:
                    dispatcher.abort(task)
            self._stop_callback_thread()
        else:
            self._stop_callback_thread()
            self._callback = None

    def attach(self, callback: Any) -> None:
        with self._lock:
            self.state = "open"
            self._callback = callback
        if callback is not None:
            self._start_callback_thread()

    # ------------------------------------------------------------------------- the grid's side

    def deliver(self, task: FakeTask, records: Optional[List[Record]], exception: Optional[SoamException]) -> None:
        """An output of one of its tasks (a failed one if ``exception``)."""
        from soamapi_fake.api import TaskOutputHandle

        with self._lock:
            task.state = "done"
            if self.state == "closed" or self.state == "aborted":
                return
            output = (task.task_id, records, exception)
            if self._callback is None:
                self._fetched.append(output)
                self._fetch_ready.notify_all()
                return
        self._outputs.put(("response", TaskOutputHandle(*output)))

    def fail(self, reason: str) -> None:
        """The session dies (aborted, connection lost)."""
        with self._lock:
            if self.state not in ("open", "detached"):
                return
            self.state = "aborted"
            tasks = list(self.tasks.values())
            self._fetch_ready.notify_all()
        self.grid.record("session_failed", session=self.session_id, reason=reason)
        dispatcher = self.grid.dispatcher(self.application)
        for task in tasks:
            dispatcher.abort(task)
        self._outputs.put(("exception", SoamException(f"session {self.session_id} aborted: {reason}")))

    def failed_output(self, task: FakeTask, text: str, embedded: Optional[BaseException]) -> None:
        self.deliver(task, None, soam_exception(text, embedded))
        if self.application.abort_session_if_task_fail:
            self.fail(f"task {task.task_id} failed and the application aborts a session when a task fails")

    # ------------------------------------------------------------------------- the callback thread

    def _start_callback_thread(self) -> None:
        self._outputs = queue.Queue()
        thread = threading.Thread(target=self._serve_callback, name=f"soam-callback-{self.session_id}", daemon=True)
        self._callback_thread = thread
        thread.start()

    def _stop_callback_thread(self) -> None:
        thread = self._callback_thread
        if thread is None:
            return
        self._outputs.put(None)
        thread.join(STOP_SECONDS)
        self._callback_thread = None

    def _serve_callback(self) -> None:
        outputs = self._outputs
        while True:
            item = outputs.get()
            if item is None:
                return
            self.grid.callbacks_paused.wait()
            kind, value = item
            callback = self._callback
            if callback is None:
                continue
            try:
                if kind == "response":
                    callback.on_response(value)
                else:
                    callback.on_exception(value)
            except BaseException:
                self.grid.callback_error(traceback.format_exc())

    def _check_usable(self, what: str) -> None:
        if self.state != "open":
            raise SoamException(f"{what}: session {self.session_id} is {self.state}")


# ----------------------------------------------------------------------------- the process's grid

_grid: Optional[FakeGrid] = None
_grid_lock = threading.Lock()


def grid() -> FakeGrid:
    """This process's grid, made from `CONFIG_VARIABLE` on first use."""
    global _grid
    with _grid_lock:
        if _grid is None:
            _grid = FakeGrid.from_environment()
        return _grid


def install(new_grid: Optional[FakeGrid]) -> Optional[FakeGrid]:
    """Make ``new_grid`` this process's grid (None: the next use reads the environment again); returns the old one,
    whose service instances are stopped."""
    global _grid
    with _grid_lock:
        old, _grid = _grid, new_grid
    if old is not None:
        old.shutdown()
    return old


@atexit.register
def _stop_at_exit() -> None:  # no service-instance process outlives this one
    if _grid is not None:
        _grid.shutdown()
