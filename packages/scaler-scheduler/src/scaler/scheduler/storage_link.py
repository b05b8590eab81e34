"""The scheduler's conversation with the object storage server, as one table, without I/O.

At start the core says Hello to the storage address and waits, bounded, for the answer. Without
``--object-storage-address`` (the default address, port + 1) it waits briefly and, if nothing answers, asks
the shell to start a storage server there (`StartStorage`) and waits for that one; with the flag it waits
longer for the server it was given. Once the server answered, the shell starts serving clients and
workers (`StartServing`); if none answers in time, or it refuses, the scheduler stops (`StartFailed`).

Later, when the connection goes down, the requests for storage (deletes, clear by owner) are held; when it
is back up the core says Hello again and sends them once it is answered. For monitors, it asks a server of
protocol 1.8 or later what each client's objects take (`ask_usage`, answered into `stored_bytes` and, of that,
what is spilled to disk, `spilled_bytes`) and which objects are the largest (`ask_summary`, answered into
`object_summary`, with the bytes in memory and on disk), and keeps the quota of each client that
the server's HelloAck states.

A server of protocol 1.8 admits the clients the scheduler serves (`admit`): each client's HelloAck waits until
the server answered its admission, so no worker can put a result for a client, or read for a task's scope,
before the server knows that client. When the server answers again after its connection went down, the held
requests go first, then every client is admitted again (``readmit``; a restarted server knows none).
"""

from __future__ import annotations

import enum
import itertools
import logging
from typing import Any, Callable, Dict, List, Optional, Tuple

from scaler.protocol import messages as m
from scaler.protocol.lifecycle import Lifecycle, Transition
from scaler.protocol.version import ISOLATION_VERSION, PROTOCOL_VERSION, USAGE_VERSION, incompatibility, knows
from scaler.scheduler.outbox import Outbox
from scaler.scheduler.scheduler_events import STORAGE, Send, StartFailed, StartServing, StartStorage

logger = logging.getLogger(__name__)

PROBE_SECONDS = 1.0  # how long a server at the default address has to answer before one is started there
ANSWER_SECONDS = 15.0  # how long a given or started server has to answer


class LinkState(enum.Enum):
    PROBING = "probing"  # Hello sent to the default address; waiting briefly for an answer
    WAITING = "waiting"  # Hello sent to the given address; waiting for that server to answer
    STARTING = "starting"  # no server answered at the default address: one was started; waiting for it
    READY = "ready"
    RECONNECTING = "reconnecting"  # the connection went down: storage requests are held until Hello is answered
    FAILED = "failed"  # no server answered in time, or it refused the scheduler


class LinkEvent(enum.Enum):
    START = "start"
    ANSWERED = "answered"  # HelloAck of a compatible version
    REFUSED = "refused"  # Refusal, HelloAck of an incompatible version, or the scheduler's key refused
    DEADLINE = "deadline"  # the time to answer ran out
    CONNECTED = "connected"
    LOST = "lost"


class LinkAction(enum.Enum):
    SEND_HELLO = "send_hello"
    WAIT_BRIEFLY = "wait_briefly"
    WAIT_FOR_ANSWER = "wait_for_answer"
    START_STORAGE = "start_storage"
    SERVE = "serve"
    SEND_HELD = "send_held"  # the storage requests held while there was no answered Hello, then the admissions
    WARN_LOST = "warn_lost"
    LOG_REFUSAL = "log_refusal"
    FAIL_REFUSED = "fail_refused"
    FAIL_NO_ANSWER = "fail_no_answer"
    FAIL_STARTED_NO_ANSWER = "fail_started_no_answer"


S, E, A, T = LinkState, LinkEvent, LinkAction, Transition
STORAGE_LINK_LIFECYCLE: Lifecycle[LinkState, LinkEvent] = Lifecycle(
    "object storage link",
    states=LinkState,
    terminal={S.FAILED},
    always_possible=(E.ANSWERED, E.REFUSED, E.CONNECTED, E.LOST),
    table={
        (S.PROBING, E.START): T(S.PROBING, (A.SEND_HELLO, A.WAIT_BRIEFLY)),
        (S.PROBING, E.ANSWERED): T(S.READY, (A.SERVE,)),
        (S.PROBING, E.REFUSED): T(S.FAILED, (A.FAIL_REFUSED,)),
        (S.PROBING, E.DEADLINE): T(S.STARTING, (A.START_STORAGE, A.WAIT_FOR_ANSWER)),  # the Hello waits in ZeroMQ
        (S.PROBING, E.CONNECTED): T(S.PROBING),
        (S.PROBING, E.LOST): T(S.PROBING),
        (S.WAITING, E.START): T(S.WAITING, (A.SEND_HELLO, A.WAIT_FOR_ANSWER)),
        (S.WAITING, E.ANSWERED): T(S.READY, (A.SERVE,)),
        (S.WAITING, E.REFUSED): T(S.FAILED, (A.FAIL_REFUSED,)),
        (S.WAITING, E.DEADLINE): T(S.FAILED, (A.FAIL_NO_ANSWER,)),
        (S.WAITING, E.CONNECTED): T(S.WAITING),
        (S.WAITING, E.LOST): T(S.WAITING),
        (S.STARTING, E.ANSWERED): T(S.READY, (A.SERVE,)),
        (S.STARTING, E.REFUSED): T(S.FAILED, (A.FAIL_REFUSED,)),
        (S.STARTING, E.DEADLINE): T(S.FAILED, (A.FAIL_STARTED_NO_ANSWER,)),
        (S.STARTING, E.CONNECTED): T(S.STARTING),
        (S.STARTING, E.LOST): T(S.STARTING),
        (S.READY, E.ANSWERED): T(S.READY),
        (S.READY, E.REFUSED): T(S.READY, (A.LOG_REFUSAL,)),  # a request it refused: nothing waits for it
        (S.READY, E.CONNECTED): T(S.READY),
        (S.READY, E.LOST): T(S.RECONNECTING, (A.WARN_LOST,)),
        (S.RECONNECTING, E.ANSWERED): T(S.READY, (A.SEND_HELD,)),
        (S.RECONNECTING, E.REFUSED): T(S.RECONNECTING, (A.LOG_REFUSAL,)),
        (S.RECONNECTING, E.CONNECTED): T(S.RECONNECTING, (A.SEND_HELLO,)),
        (S.RECONNECTING, E.LOST): T(S.RECONNECTING),
    },
)
del S, E, A, T


class StorageLink:
    def __init__(self, address: str, address_given: bool, pid: int, readmit: Callable[[Outbox], None]) -> None:
        self.address = address
        self.state = LinkState.WAITING if address_given else LinkState.PROBING
        self.deadline: Optional[float] = None  # when the answer is due, while waiting for one
        self.admits = False  # the server's HelloAck says 1.8 or later: it admits clients
        self._pid = pid
        self._readmit = readmit  # admits every client again (the core knows them)
        self._request_ids = itertools.count(1)
        self._admitting: Dict[int, bytes] = {}  # admit request ID -> its client, until answered
        self._unacknowledged: Dict[bytes, Send] = {}  # client -> its HelloAck, sent once the server admitted it
        self._held: List[Any] = []  # requests for storage made while the link was not ready
        self.story = 0  # its last events (`Lifecycle.advance`)
        self._reason = ""  # why the server refused, for FAIL_REFUSED and LOG_REFUSAL
        self._answers_usage = False  # its version answers ObjectRequest(usage) and ObjectRequest(summary)
        self.client_memory_quota = 0  # what one client's objects may take there (its HelloAck, 1.8; 0: not said)
        self.stored_bytes: Dict[bytes, int] = {}  # client ID -> what its objects take there, as last answered
        self.spilled_bytes: Dict[bytes, int] = {}  # client ID -> of that, what is spilled to disk
        self.object_summary = m.ObjectSummary()  # its largest objects, as last answered
        carry_out: Dict[LinkAction, Callable[[float, Outbox], None]] = {
            LinkAction.SEND_HELLO: self._send_hello,
            LinkAction.WAIT_BRIEFLY: self._wait_briefly,
            LinkAction.WAIT_FOR_ANSWER: self._wait_for_answer,
            LinkAction.START_STORAGE: self._start_storage,
            LinkAction.SERVE: self._serve,
            LinkAction.SEND_HELD: self._send_held,
            LinkAction.WARN_LOST: self._warn_lost,
            LinkAction.LOG_REFUSAL: self._log_refusal,
            LinkAction.FAIL_REFUSED: self._fail_refused,
            LinkAction.FAIL_NO_ANSWER: self._fail_no_answer,
            LinkAction.FAIL_STARTED_NO_ANSWER: self._fail_started_no_answer,
        }
        self._plans = STORAGE_LINK_LIFECYCLE.plans(carry_out.__getitem__)
        self._by_message: Dict[type, Callable[[Any], Tuple[Optional[LinkEvent], str]]] = {
            m.HelloAck: self._hello_ack_event,
            m.Refusal: _refusal_event,
        }

    @property
    def ready(self) -> bool:
        return self.state is LinkState.READY

    # ----------------------------------------------------------------- events

    def start(self, now: float, out: Outbox) -> None:
        self._step(LinkEvent.START, now, out)

    def on_message(self, message: Any, now: float, out: Outbox) -> None:
        if type(message) is m.ObjectResponse:
            self._on_response(message, out)
            return
        to_event = self._by_message.get(type(message))
        if to_event is None:
            logger.warning(f"Scheduler: dropped {type(message).__name__} from the object storage server")
            return
        event, self._reason = to_event(message)
        if event is not None:
            self._step(event, now, out)

    def on_connection(self, connected: bool, now: float, out: Outbox) -> None:
        self._step(LinkEvent.CONNECTED if connected else LinkEvent.LOST, now, out)

    def on_refused(self, reason: str, now: float, out: Outbox) -> None:
        """The server refused the scheduler's key in the CurveZMQ handshake: as a `Refusal` of its Hello."""
        self._reason = reason
        self._step(LinkEvent.REFUSED, now, out)

    def on_tick(self, now: float, out: Outbox) -> None:
        if self.deadline is not None and now >= self.deadline:
            self.deadline = None
            self._step(LinkEvent.DEADLINE, now, out)

    def ask_usage(self, client_ids: List[bytes], out: Outbox) -> None:
        """Ask what the objects of each client take (a server that can answer, and is connected)."""
        if self._answers_usage and self.state is LinkState.READY and client_ids:
            out.sends.append(Send(STORAGE, m.ObjectRequest(0, m.ObjectRequestKind.USAGE, b"", client_ids)))

    def ask_summary(self, out: Outbox) -> None:
        """Ask which objects are the largest (a server that can answer, and is connected)."""
        if self._answers_usage and self.state is LinkState.READY:
            out.sends.append(Send(STORAGE, m.ObjectRequest(0, m.ObjectRequestKind.SUMMARY)))

    def send(self, message: Any, out: Outbox) -> None:
        """A request for the storage server: sent now, or held until the server answered Hello."""
        if self.state is LinkState.READY:
            out.sends.append(Send(STORAGE, message))
        else:
            self._held.append(message)

    def admit(self, client_id: bytes, scope: bytes, ack: Optional[Send], out: Outbox) -> None:
        """The scheduler serves ``client_id``, whose tasks read the objects of ``scope``: the server is told (if
        it admits clients), and ``ack``, the client's HelloAck, leaves once it answered. While the server is away
        the HelloAck leaves at once: every client is admitted again when it is back."""
        if not (self.admits and self.state is LinkState.READY):
            if ack is not None:
                out.sends.append(ack)
            return
        if ack is not None:
            self._unacknowledged[client_id] = ack
        request_id = next(self._request_ids)
        self._admitting[request_id] = client_id
        scope_id = b"" if scope == client_id else scope
        request = m.ObjectRequest(request_id, m.ObjectRequestKind.ADMIT, client_id, [], scope_id=scope_id)
        out.sends.append(Send(STORAGE, request))

    def acknowledge(self, client_id: bytes, ack: Send, out: Outbox) -> None:
        """A known client said Hello again: answered now, or with its first answer once it is admitted."""
        if client_id in self._unacknowledged:
            self._unacknowledged[client_id] = ack
        else:
            out.sends.append(ack)

    def acknowledged(self, client_id: bytes) -> bool:
        """Whether the client's HelloAck has left (it waits while the server admits the client)."""
        return client_id not in self._unacknowledged

    def forget(self, client_id: bytes) -> None:
        """The client left: no answer is due to it."""
        self._unacknowledged.pop(client_id, None)

    def _on_response(self, response: m.ObjectResponse, out: Outbox) -> None:
        """Answers to the scheduler's requests: an admission lets its client's HelloAck go, a usage and a summary
        are kept for monitors; nothing waits for the others (deletes, clears)."""
        if response.kind == m.ObjectRequestKind.USAGE:
            self.stored_bytes = dict(zip(response.object_ids, response.sizes, strict=False))
            self.spilled_bytes = dict(zip(response.object_ids, response.spilled_sizes, strict=False))
        elif response.kind == m.ObjectRequestKind.SUMMARY:
            self.object_summary = response.summary
        elif response.kind == m.ObjectRequestKind.ADMIT:
            client_id = self._admitting.pop(response.request_id, None)
            ack = self._unacknowledged.pop(client_id, None) if client_id is not None else None
            if ack is not None:
                out.sends.append(ack)

    def _step(self, event: LinkEvent, now: float, out: Outbox) -> None:
        STORAGE_LINK_LIFECYCLE.advance(self._plans, self, event, self.address, (now, out))

    # ----------------------------------------------------------------- actions (LinkAction)

    def _send_hello(self, now: float, out: Outbox) -> None:
        hello = m.Hello(PROTOCOL_VERSION, m.PeerRole.SCHEDULER, self._pid, "", m.WorkerInfo())
        out.sends.append(Send(STORAGE, hello))

    def _wait_briefly(self, now: float, out: Outbox) -> None:
        self.deadline = now + PROBE_SECONDS

    def _wait_for_answer(self, now: float, out: Outbox) -> None:
        self.deadline = now + ANSWER_SECONDS

    def _start_storage(self, now: float, out: Outbox) -> None:
        logger.info(f"Scheduler: no object storage server at {self.address}, starting one")
        out.sends.append(StartStorage(self.address))

    def _hello_ack_event(self, ack: m.HelloAck) -> Tuple[Optional[LinkEvent], str]:
        reason = incompatibility(ack.version)
        if reason is not None:
            return LinkEvent.REFUSED, f"object storage server: {reason}"
        self._answers_usage = knows(ack.version, USAGE_VERSION)
        self.admits = knows(ack.version, ISOLATION_VERSION)
        self.client_memory_quota = ack.client_quota
        return LinkEvent.ANSWERED, ""

    def _serve(self, now: float, out: Outbox) -> None:
        self.deadline = None
        logger.info(f"Scheduler: object storage server {self.address} answered")
        out.sends.append(StartServing())

    def _send_held(self, now: float, out: Outbox) -> None:
        logger.info(f"Scheduler: object storage server {self.address} answered again")
        out.sends.extend(Send(STORAGE, message) for message in self._held)
        self._held = []
        self._admitting.clear()  # asked of the connection that went down: no answer comes
        self._readmit(out)  # after the held requests: a clear held for a client that stays ends its admission

    def _warn_lost(self, now: float, out: Outbox) -> None:
        logger.warning(f"Scheduler: lost the connection to the object storage server {self.address}; reconnecting")

    def _log_refusal(self, now: float, out: Outbox) -> None:
        logger.error(f"Scheduler: {self._reason}")

    def _fail_refused(self, now: float, out: Outbox) -> None:
        self._fail(self._reason, out)

    def _fail_no_answer(self, now: float, out: Outbox) -> None:
        self._fail(f"no object storage server answered at {self.address}", out)

    def _fail_started_no_answer(self, now: float, out: Outbox) -> None:
        self._fail(f"the object storage server started at {self.address} did not answer", out)

    def _fail(self, reason: str, out: Outbox) -> None:
        self.deadline = None
        out.sends.append(StartFailed(reason))


def _refusal_event(refusal: m.Refusal) -> Tuple[Optional[LinkEvent], str]:
    return LinkEvent.REFUSED, f"object storage server refused the scheduler: {refusal.reason}"
