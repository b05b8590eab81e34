"""Calls on every worker (protocol 1.8: `Client.upload_file`, `run`, `restart`, `get_worker_logs`), without I/O.

A client's `WorkerCall` goes to every worker of protocol 1.8 connected now, with the client's ID written in; the
scheduler gathers each worker's `WorkerCallResult` and answers the client one `WorkerCallAnswer` once every one
of those workers answered or left (a worker that left is an answer that says so). An upload is kept while its
client stays (the latest of each file name), and sent to each worker that joins meanwhile, after its HelloAck,
so that every worker of the cluster has the files of the clients connected; what it keeps of a client is bounded
(`MAX_KEPT_BYTES`: an upload past it is refused, answered at once with a failure that says so), and each file by
the scheduler's message size limit.
"""

from __future__ import annotations

import logging
from typing import Dict, List, Tuple

from scaler.protocol import messages as m
from scaler.protocol.ids import show
from scaler.scheduler.outbox import Outbox
from scaler.scheduler.peers import Worker
from scaler.scheduler.scheduler_events import Send

logger = logging.getLogger(__name__)

MAX_KEPT_BYTES = 256 * 1024 * 1024  # the uploads the scheduler keeps of one client, for the workers that join later


class _Gathering:
    """A call sent to workers: the results so far, and the workers yet to answer."""

    __slots__ = ("results", "waiting")

    def __init__(self, waiting: List[bytes]) -> None:
        self.results: List[m.WorkerCallResult] = []
        self.waiting = set(waiting)


class WorkerCalls:
    def __init__(self, workers: Dict[bytes, Worker]) -> None:
        self._workers = workers
        self._gathering: Dict[Tuple[bytes, int], _Gathering] = {}  # (client, call ID) -> its answers so far
        self._uploads: Dict[bytes, Dict[str, m.WorkerCall]] = {}  # client -> file name -> its upload

    def on_call(self, source: bytes, call: m.WorkerCall, now: float, out: Outbox) -> None:
        call.client_id = source
        if call.kind == m.WorkerCallKind.UPLOAD and not self._keep(source, call, out):
            return
        workers = [worker.worker_id for worker in self._workers.values() if worker.takes_calls]
        for worker_id in workers:
            out.sends.append(Send(worker_id, call))
        gathering = _Gathering(workers)
        self._gathering[(source, call.call_id)] = gathering
        self._answer_if_done(source, call.call_id, gathering, out)

    def on_result(self, source: bytes, result: m.WorkerCallResult, now: float, out: Outbox) -> None:
        key = (result.client_id, result.call_id)
        gathering = self._gathering.get(key)
        if gathering is None or source not in gathering.waiting:  # a late worker's upload, or its client left
            return
        gathering.waiting.discard(source)
        result.worker_id = source
        gathering.results.append(result)
        self._answer_if_done(*key, gathering, out)

    def _keep(self, source: bytes, call: m.WorkerCall, out: Outbox) -> bool:
        """Keep an upload for the workers that join later; False (the client answered) past `MAX_KEPT_BYTES`."""
        uploads = self._uploads.setdefault(source, {})
        kept = sum(len(upload.payload) for name, upload in uploads.items() if name != call.name)
        if kept + len(call.payload) > MAX_KEPT_BYTES:
            why = (f"the scheduler keeps at most {MAX_KEPT_BYTES:,} bytes of uploads per client: {call.name!r} "
                   f"({len(call.payload):,} bytes) is past it, with the {kept:,} it keeps")  # fmt: skip
            failure = m.WorkerCallResult(call.call_id, source, b"", False, b"", why)
            logger.warning(f"Scheduler: refused an upload of client {show(source)}: {why}")
            out.sends.append(Send(source, m.WorkerCallAnswer(call.call_id, [failure])))
            return False
        uploads[call.name] = call
        return True

    def worker_joined(self, worker: Worker, out: Outbox) -> None:
        """The uploads of the clients connected, for a worker that joins (their results are not waited for)."""
        if worker.takes_calls:
            for uploads in self._uploads.values():
                for call in uploads.values():
                    out.sends.append(Send(worker.worker_id, call))

    def worker_gone(self, worker_id: bytes, out: Outbox) -> None:
        for (client_id, call_id), gathering in list(self._gathering.items()):
            if worker_id in gathering.waiting:
                gathering.waiting.discard(worker_id)
                why = f"worker {show(worker_id)} left before it answered"
                gathering.results.append(m.WorkerCallResult(call_id, client_id, worker_id, False, b"", why))
                self._answer_if_done(client_id, call_id, gathering, out)

    def client_gone(self, client_id: bytes) -> None:
        self._uploads.pop(client_id, None)
        for key in [key for key in self._gathering if key[0] == client_id]:
            del self._gathering[key]

    def _answer_if_done(self, client_id: bytes, call_id: int, gathering: _Gathering, out: Outbox) -> None:
        if not gathering.waiting:
            del self._gathering[(client_id, call_id)]
            out.sends.append(Send(client_id, m.WorkerCallAnswer(call_id, gathering.results)))
