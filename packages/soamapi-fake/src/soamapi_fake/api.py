"""The fake's `soamapi`: every name of the `soamapi-stubs` distribution, behaving as the real API does where it
matters to a client or a service (see the package's README). ``import soamapi`` finds this module through the
shim directory (`soamapi_fake.shim_path`), never through site-packages.
"""

from __future__ import annotations

import os
import threading
from typing import Iterable, List, Optional

from soamapi_fake import fake_grid as _grid
from soamapi_fake.errors import FailureException, FatalException, SoamException
from soamapi_fake.streams import InputStream, OutputStream, Record, deserialize, serialize

__all__ = [
    "initialize", "uninitialize", "connect", "SoamException", "FailureException", "FatalException",
    "InputStream", "OutputStream", "Message", "DefaultTextMessage", "SecurityCallback", "DefaultSecurityCallback",
    "SessionFlags", "SessionCloseFlags", "TaskInputHandle", "TaskOutputHandle", "SessionCallback",
    "SessionCreationAttributes", "SessionOpenAttributes", "TaskSubmissionAttributes", "Session", "Connection",
    "ServiceContext", "SessionContext", "TaskContext", "ServiceContainer",
]  # fmt: skip

# --- library --------------------------------------------------------------------------------------


def initialize() -> None:
    _grid.grid().initialize()


def uninitialize() -> None:
    _grid.grid().uninitialize()


def connect(application_name: str, security_callback: SecurityCallback) -> Connection:
    if not isinstance(security_callback, SecurityCallback):
        raise SoamException(f"connect: the security callback must be a SecurityCallback, not {security_callback!r}")
    return Connection(_grid.grid().connect(application_name))


# --- messages -------------------------------------------------------------------------------------


class Message:
    """Subclassed by users; a subclass need not call this ``__init__``."""

    def __init__(self) -> None:
        pass

    def on_serialize(self, stream: OutputStream) -> None:
        pass

    def on_deserialize(self, stream: InputStream) -> None:
        pass


class DefaultTextMessage(Message):
    def __init__(self, text: str = "") -> None:
        self._text = text

    def set_text(self, text: str) -> None:
        self._text = text

    def get_text(self) -> str:
        return self._text

    def on_serialize(self, stream: OutputStream) -> None:
        stream.write_string(self._text)

    def on_deserialize(self, stream: InputStream) -> None:
        self._text = stream.read_string()


# --- client side ------------------------------------------------------------------------------------


class SecurityCallback:
    pass


class DefaultSecurityCallback(SecurityCallback):
    def __init__(self, user_name: str, password: str) -> None:
        self.user_name = user_name
        self.password = password


class SessionFlags:
    RECEIVE_SYNC = 0x1
    SEND_SYNC = 0x2
    RECEIVE_ASYNC = 0x4
    SYNC = SEND_SYNC | RECEIVE_SYNC
    PARTIAL_ASYNC = SEND_SYNC | RECEIVE_ASYNC


class SessionCloseFlags:
    DESTROY_ON_CLOSE = 0x1
    DETACH_ON_CLOSE = 0x2


class TaskInputHandle:
    def __init__(self, task_id: str) -> None:
        self._task_id = task_id

    def get_id(self) -> str:
        return self._task_id


class TaskOutputHandle:
    def __init__(self, task_id: str, records: Optional[List[Record]], exception: Optional[SoamException]) -> None:
        self._task_id = task_id
        self._records = records
        self._exception = exception

    def get_id(self) -> str:
        return self._task_id

    def is_successful(self) -> bool:
        return self._exception is None

    def populate_task_output(self, message: Message) -> None:
        if self._records is None:
            raise SoamException(f"task {self._task_id} failed: it has no output ({self._exception})")
        deserialize(message, self._records)

    def get_exception(self) -> Optional[SoamException]:
        return self._exception


class SessionCallback:
    """Subclassed by users; a subclass need not call this ``__init__``."""

    def __init__(self) -> None:
        pass

    def on_response(self, task_output_handle: TaskOutputHandle) -> None:
        pass

    def on_exception(self, exception: SoamException) -> None:
        pass


class _SessionAttributes:
    """What creating a session and opening one again both set."""

    def __init__(self) -> None:
        self.session_name = ""
        self.flags = 0
        self.callback: Optional[SessionCallback] = None

    def set_session_name(self, session_name: str) -> None:
        self.session_name = session_name

    def set_session_flags(self, flags: int) -> None:
        self.flags = flags

    def set_session_callback(self, callback: SessionCallback) -> None:
        self.callback = callback


class SessionCreationAttributes(_SessionAttributes):
    def __init__(self) -> None:
        super().__init__()
        self.session_type = ""
        self.common_data: Optional[List[Record]] = None
        self.priority = 1
        self.tag = ""
        self.service_name = ""
        self.max_services = 0

    def set_session_type(self, session_type: str) -> None:
        self.session_type = session_type

    def set_common_data(self, message: Message) -> None:
        self.common_data = serialize(message)

    def set_session_priority(self, priority: int) -> None:
        if not 1 <= priority <= 10000:
            raise SoamException(f"session priority {priority} is outside 1..10000")
        self.priority = priority

    def set_session_tag(self, tag: str) -> None:
        self.tag = tag

    def set_service_name(self, service_name: str) -> None:
        self.service_name = service_name

    def set_max_services(self, count: int) -> None:
        self.max_services = count


class SessionOpenAttributes(_SessionAttributes):
    def __init__(self) -> None:
        super().__init__()
        self.session_id = ""

    def set_session_id(self, session_id: str) -> None:
        self.session_id = session_id


class TaskSubmissionAttributes:
    def __init__(self) -> None:
        self.message: Optional[Message] = None

    def set_task_input(self, message: Message) -> None:
        self.message = message


class Session:
    def __init__(self, state: _grid.SessionState) -> None:
        self._state = state

    def get_id(self) -> str:
        return self._state.session_id

    def send_task_input(self, attributes: TaskSubmissionAttributes) -> TaskInputHandle:
        if attributes.message is None:
            raise SoamException("send_task_input: the attributes have no task input (set_task_input)")
        records = serialize(attributes.message)  # now, in the caller's thread, as Symphony does
        return TaskInputHandle(self._state.submit(records))

    def fetch_task_output(self, count_max: int, timeout_seconds: int = -1) -> Iterable[TaskOutputHandle]:
        return [TaskOutputHandle(*output) for output in self._state.fetch(count_max, timeout_seconds)]

    def abort_tasks(self, task_ids: List[str]) -> None:
        self._state.abort_tasks(task_ids)

    def close(self, flags: int = SessionCloseFlags.DESTROY_ON_CLOSE) -> None:
        self._state.close(detach=bool(flags & SessionCloseFlags.DETACH_ON_CLOSE))


class Connection:
    def __init__(self, state: _grid.ConnectionState) -> None:
        self._state = state

    def get_id(self) -> str:
        return self._state.connection_id

    def create_session(self, attributes: SessionCreationAttributes) -> Session:
        receive_async = _receive_mode(attributes.flags)
        if receive_async and attributes.callback is None:
            raise SoamException("create_session: a session that receives asynchronously needs a session callback")
        state = self._state.create_session(
            attributes.session_type,
            attributes.session_name,
            attributes.callback if receive_async else None,
            attributes.common_data,
        )
        return Session(state)

    def open_session(self, attributes: SessionOpenAttributes) -> Session:
        receive_async = _receive_mode(attributes.flags)
        if receive_async and attributes.callback is None:
            raise SoamException("open_session: a session that receives asynchronously needs a session callback")
        return Session(self._state.open_session(attributes.session_id, attributes.callback if receive_async else None))

    def close(self) -> None:
        self._state.close()


def _receive_mode(flags: int) -> bool:
    """Whether a session receives asynchronously; its flags must name exactly one way of receiving."""
    receive_sync, receive_async = bool(flags & SessionFlags.RECEIVE_SYNC), bool(flags & SessionFlags.RECEIVE_ASYNC)
    if receive_sync == receive_async:
        raise SoamException(f"session flags {flags:#x} must include exactly one of RECEIVE_SYNC and RECEIVE_ASYNC")
    return receive_async


# --- service side -------------------------------------------------------------------------------------


class ServiceContext:
    def __init__(self, service_name: str) -> None:
        self._service_name = service_name

    def get_service_name(self) -> str:
        return self._service_name


class SessionContext:
    def __init__(self, session_id: str, common_data: Optional[List[Record]]) -> None:
        self._session_id = session_id
        self._common_data = common_data

    def get_session_id(self) -> str:
        return self._session_id

    def populate_common_data(self, message: Message) -> None:
        if self._common_data is None:
            raise SoamException(f"session {self._session_id} has no common data")
        deserialize(message, self._common_data)


class TaskContext:
    def __init__(self, session_id: str, task_id: str, records: List[Record]) -> None:
        self._session_id = session_id
        self._task_id = task_id
        self._records = records
        self.output: Optional[List[Record]] = None

    def get_task_id(self) -> str:
        return self._task_id

    def get_session_id(self) -> str:
        return self._session_id

    def populate_task_input(self, message: Message) -> None:
        deserialize(message, self._records)

    def set_task_output(self, message: Message) -> None:
        self.output = serialize(message)  # now, as Symphony does


class ServiceContainer:
    """Subclassed by a service; a subclass need not call this ``__init__``. On a fake grid in process mode,
    `run` serves the grid that started this process; in thread mode the grid calls the hooks itself."""

    def __init__(self) -> None:
        pass

    def on_create_service(self, service_context: ServiceContext) -> None:
        pass

    def on_session_enter(self, session_context: SessionContext) -> None:
        pass

    def on_session_update(self, session_context: SessionContext) -> None:
        pass

    def on_invoke(self, task_context: TaskContext) -> None:
        pass

    def on_session_leave(self) -> None:
        pass

    def on_destroy_service(self) -> None:
        pass

    def run(self) -> None:
        from soamapi_fake.instances import INSTANCE_VARIABLE, serve_grid

        channel = os.environ.get(INSTANCE_VARIABLE)
        if channel is None or threading.current_thread() is not threading.main_thread():
            raise SoamException("ServiceContainer.run: this process was not started by Symphony as a service instance")
        serve_grid(self, int(channel))
