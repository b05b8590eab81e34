"""The Symphony runner's I/O half (`scaler.worker.task_runner.RunnerHost`): the worker's Symphony session.

Every call into ``soamapi`` but the callbacks runs on one thread of its own (a daemon: a call Symphony never
answers cannot keep the worker from exiting), in the order the runner asked
(`OpenSession`, `SubmitTask`, `AbortTask`), so the worker's event loop never blocks on Symphony (sending to a
recoverable session waits for Symphony to persist the input). Outputs arrive on Symphony's callback thread,
which reads each one (`task_payload.task_result`) and hands it to the event loop. A lock held across
``send_task_input`` and the recording of the task's Symphony ID makes an output that comes back at once wait
until its task is known. Everything that happens reaches the runner as a `FromRunner` event; a session that
cannot be opened stops the worker (`Broken`).

Leaving (`close`): the session is closed (its tasks destroyed), then the connection, then the library
uninitialized, each attempted whatever became of the one before, within a bound.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
import logging
import queue
import threading
import time
import traceback
from typing import Any, Callable, Dict, NamedTuple, Optional, Tuple

import cloudpickle
import soamapi

from scaler.protocol import messages as m
from scaler.protocol.serializer import DefaultSerializer
from scaler.symphony.soam_message import PayloadMessage
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
from scaler.symphony.task_payload import task_input, task_result
from scaler.worker.lru_cache import LRUCache
from scaler.worker.task_failure import failure_payload
from scaler.worker.worker_events import Broken, FromRunner

logger = logging.getLogger(__name__)

CLOSE_SECONDS = 30.0  # bound of closing the session, the connection and the library
_LOADED_CACHE_CAPACITY = 256  # function names and serializers kept loaded


class _Submission(NamedTuple):
    serial: int
    serializer: Any  # the client's, to serialize the result with
    function: str  # its module.qualname, for the heartbeats' per-function totals
    sent_at: float


class SymphonyHost:
    def __init__(self, settings: SymphonySettings, scheduler_address: str, worker_name: str) -> None:
        self._settings = settings
        self._scheduler_address = scheduler_address  # told to the service: tasks may connect clients to it
        self._name = worker_name
        self._calls: queue.Queue[Any] = queue.Queue()  # (function, arguments) for the Symphony thread; None: stop
        self._thread = threading.Thread(target=self._serve_calls, name="symphony", daemon=True)
        self._loop: Optional[asyncio.AbstractEventLoop] = None
        self._deliver: Callable[[Any], None] = _not_open
        self._lock = threading.Lock()  # guards what the callback thread reads: _submissions, _symphony_ids
        self._initialized = False
        self._connection: Optional[soamapi.Connection] = None
        self._session: Optional[soamapi.Session] = None
        self._session_id = ""
        self._submissions: Dict[Tuple[str, str], _Submission] = {}  # (session ID, Symphony task ID) ->
        self._symphony_ids: Dict[int, Tuple[str, str]] = {}  # serial -> (session ID, Symphony task ID)
        self._function_names: LRUCache[bytes, str] = LRUCache(_LOADED_CACHE_CAPACITY)
        self._serializers: LRUCache[bytes, Any] = LRUCache(_LOADED_CACHE_CAPACITY)
        self._default_serializer = DefaultSerializer()
        self._warned_no_abort = False
        self.effect_handlers: Dict[type, Callable[[Any], None]] = {
            OpenSession: lambda effect: self._on_thread(self._open_session),
            SubmitTask: lambda effect: self._on_thread(self._submit, effect),
            AbortTask: lambda effect: self._on_thread(self._abort, effect),
        }

    # ------------------------------------------------------------------------- RunnerHost

    def open(self, loop: asyncio.AbstractEventLoop, deliver: Callable[[Any], None]) -> None:
        self._loop = loop
        self._deliver = deliver
        self._thread.start()

    async def close(self) -> None:
        closed: concurrent.futures.Future[None] = concurrent.futures.Future()
        self._on_thread(self._close_all, closed)
        self._calls.put(None)
        try:
            await asyncio.wait_for(asyncio.wrap_future(closed), CLOSE_SECONDS)
        except asyncio.TimeoutError:
            logger.error(f"{self._name}: closing the Symphony session took longer than {CLOSE_SECONDS:g}s; leaving")
        self._deliver = _discard

    def usage(self) -> Tuple[float, int]:
        return 0.0, 0  # the tasks run on the Symphony grid, not here

    # ------------------------------------------------------------------------- the Symphony thread

    def _on_thread(self, function: Callable[..., None], *arguments: Any) -> None:
        self._calls.put((function, arguments))

    def _serve_calls(self) -> None:
        while True:
            call = self._calls.get()
            if call is None:
                return
            function, arguments = call
            try:
                function(*arguments)
            except Exception as error:  # a bug here must stop the worker, not leave its tasks hanging
                logger.exception(f"{self._name}: internal error in the Symphony thread")
                self._post_event(Broken(f"internal error in the Symphony thread: {type(error).__name__}: {error}"))

    def _open_session(self) -> None:
        settings = self._settings
        old, self._session = self._session, None
        if old is not None:  # it died: let the library forget it
            _attempt(lambda: old.close(soamapi.SessionCloseFlags.DESTROY_ON_CLOSE), "close the dead session")
        try:
            if not self._initialized:
                soamapi.initialize()
                self._initialized = True
            try:
                session = self._create_session()
            except soamapi.SoamException as error:
                if self._connection is None:
                    raise
                logger.warning(f"{self._name}: cannot create a Symphony session ({error}); connecting again")
                connection, self._connection = self._connection, None
                _attempt(connection.close, "close the old connection")
                session = self._create_session()
        except Exception as error:
            why = f"cannot open a session of Symphony application {settings.application!r}: {_describe(error)}"
            self._post_event(Broken(why))
            return
        session_id = session.get_id()
        with self._lock:
            self._session = session
            self._session_id = session_id
            self._submissions.clear()
            self._symphony_ids.clear()
        self._post(SessionOpened(session_id))

    def _create_session(self) -> soamapi.Session:
        settings = self._settings
        if self._connection is None:
            logger.info(
                f"{self._name}: connecting to Symphony application {settings.application!r} as {settings.user}, "
                f"session type {settings.session_type}, base concurrency {settings.base_concurrency}"
            )
            security = soamapi.DefaultSecurityCallback(settings.user, settings.password)
            self._connection = soamapi.connect(settings.application, security)
        callback = _Callback(self)
        attributes = soamapi.SessionCreationAttributes()
        attributes.set_session_type(settings.session_type)
        attributes.set_session_name(self._name)
        attributes.set_session_flags(soamapi.SessionFlags.PARTIAL_ASYNC)
        attributes.set_session_callback(callback)
        try:  # what Client() without an address reaches inside a task
            common = soamapi.DefaultTextMessage()
            common.set_text(json.dumps({"scheduler_address": self._scheduler_address}))
            attributes.set_common_data(common)
        except AttributeError:  # a soamapi without them: tasks name their scheduler themselves
            logger.warning(f"{self._name}: this soamapi cannot give the session common data")
        session = self._connection.create_session(attributes)
        callback.session_id = session.get_id()
        return session

    def _submit(self, effect: SubmitTask) -> None:
        session = self._session
        if session is None or effect.session_id != self._session_id:
            return  # its session died meanwhile: the runner returned the task to the queue
        ready = effect.ready
        task = ready.task
        try:
            payload = task_input(ready)
            function = self._function_name(task.function_id, ready.function)
            serializer = self._serializer(task.serializer_id, ready.serializer)
        except Exception as error:
            failure, error_text = failure_payload(error, traceback.format_exc())
            self._post(TaskOutput(effect.serial, m.TaskStatus.FAILED, failure, error_text, "", 0.0))
            return
        attributes = soamapi.TaskSubmissionAttributes()
        attributes.set_task_input(PayloadMessage(payload))
        with self._lock:  # an output that comes back at once waits until the task is known
            try:
                symphony_task_id = session.send_task_input(attributes).get_id()
            except Exception as error:
                self._post(TaskFailed(effect.serial, f"Symphony did not take the task: {_describe(error)}"))
                return
            key = (effect.session_id, symphony_task_id)
            self._submissions[key] = _Submission(effect.serial, serializer, function, time.monotonic())
            self._symphony_ids[effect.serial] = key
            self._post(Submitted(effect.serial, symphony_task_id))

    def _abort(self, effect: AbortTask) -> None:
        with self._lock:
            key = self._symphony_ids.get(effect.serial)
        session = self._session
        if key is None or session is None or key[0] != self._session_id:
            return  # its output came meanwhile, or its session is gone: the runner has heard of it
        try:
            session.abort_tasks([key[1]])
        except AttributeError:  # this soamapi cannot abort tasks: its output, when it comes, is dropped
            if not self._warned_no_abort:
                self._warned_no_abort = True
                logger.warning(f"{self._name}: this soamapi has no Session.abort_tasks: ended tasks run to their end")
            return
        except Exception as error:
            logger.warning(f"{self._name}: Symphony did not abort task {key[1]}: {_describe(error)}")
            return
        with self._lock:
            self._symphony_ids.pop(effect.serial, None)
            self._submissions.pop(key, None)
        self._post(TaskAborted(effect.serial))

    def _close_all(self, closed: concurrent.futures.Future[None]) -> None:
        session, self._session = self._session, None
        connection, self._connection = self._connection, None
        if session is not None:
            _attempt(lambda: session.close(soamapi.SessionCloseFlags.DESTROY_ON_CLOSE), "close the session")
        if connection is not None:
            _attempt(connection.close, "close the connection")
        if self._initialized:
            self._initialized = False
            _attempt(soamapi.uninitialize, "uninitialize the library")
        closed.set_result(None)

    def _function_name(self, function_id: bytes, function: Optional[bytes]) -> str:
        name = self._function_names.get(function_id)
        if name is None:
            try:
                loaded = cloudpickle.loads(function)
                name = f"{loaded.__module__}.{loaded.__qualname__}"
            except Exception:
                name = ""  # it loads where it runs, maybe not here
            self._function_names.put(function_id, name)
        return name

    def _serializer(self, serializer_id: bytes, serializer: Optional[bytes]) -> Any:
        if not serializer_id:
            return self._default_serializer
        loaded = self._serializers.get(serializer_id)
        if loaded is None:
            if serializer is None:
                raise ValueError(f"the task's serializer {serializer_id.hex()} is missing")
            loaded = cloudpickle.loads(serializer)
            self._serializers.put(serializer_id, loaded)
        return loaded

    # ------------------------------------------------------------------------- the callback thread

    def on_response(self, session_id: str, handle: soamapi.TaskOutputHandle) -> None:
        key = (session_id, handle.get_id())
        with self._lock:
            submission = self._submissions.pop(key, None)
            if submission is not None:
                del self._symphony_ids[submission.serial]
        if submission is None:
            logger.debug(f"{self._name}: dropped an output of Symphony task {key[1]}: not waited for")
            return
        seconds = time.monotonic() - submission.sent_at
        try:
            if not handle.is_successful():
                self._post(TaskFailed(submission.serial, _describe(handle.get_exception())))
                return
            message = PayloadMessage()
            handle.populate_task_output(message)
            status, payload, error_text = task_result(message.payload, submission.serializer)
        except Exception as error:
            self._post(TaskFailed(submission.serial, f"its output could not be read: {_describe(error)}"))
            return
        self._post(TaskOutput(submission.serial, status, payload, error_text, submission.function, seconds))

    def on_exception(self, session_id: str, exception: soamapi.SoamException) -> None:
        self._post(SessionLost(session_id, _describe(exception)))

    # ------------------------------------------------------------------------- to the event loop

    def _post(self, message: Any) -> None:
        self._post_event(FromRunner(message))

    def _post_event(self, event: Any) -> None:
        loop = self._loop
        if loop is None:
            return
        try:
            loop.call_soon_threadsafe(self._deliver, event)
        except RuntimeError:  # the loop is closed: the worker has left
            pass


class _Callback(soamapi.SessionCallback):
    """Symphony calls it on its own thread; anything raised here would be lost in Symphony, so nothing is."""

    def __init__(self, host: SymphonyHost) -> None:
        super().__init__()
        self._host = host
        self.session_id = ""

    def on_response(self, task_output_handle: soamapi.TaskOutputHandle) -> None:
        try:
            self._host.on_response(self.session_id, task_output_handle)
        except Exception:
            logger.exception("Symphony: failed to handle a task output")

    def on_exception(self, exception: soamapi.SoamException) -> None:
        try:
            self._host.on_exception(self.session_id, exception)
        except Exception:
            logger.exception("Symphony: failed to handle a session exception")


def _describe(error: Optional[BaseException]) -> str:
    """A Symphony error as text (never the soamapi object: the client may have no soamapi to load it)."""
    if error is None:
        return "Symphony gave no reason"
    text = f"{type(error).__name__}: {error}"
    get_embedded = getattr(error, "get_embedded_exception", None)
    embedded = get_embedded() if get_embedded is not None else None
    if embedded is not None:
        text += f" (raised in the service: {type(embedded).__name__}: {embedded})"
    return text


def _attempt(step: Callable[[], Any], what: str) -> None:
    try:
        step()
    except Exception as error:
        logger.warning(f"Symphony: could not {what}: {_describe(error)}")


def _not_open(event: Any) -> None:
    raise RuntimeError("SymphonyHost.open() was not called")


def _discard(event: Any) -> None:
    pass
