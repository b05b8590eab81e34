"""The calls of Dask's ``Client`` that mean the same here, by Dask's names: `gather`, `scatter`,
`scheduler_info`, `dashboard_link` and `current` (docs/interfaces.md, "Coming from Dask"), and those that put
code on the workers (`worker_calls`: `upload_file`, `run`, `restart`, `get_worker_logs`). `Client` has them
from `DaskCalls`, over what it is made of: its agent (the answers of the scheduler), its object puts and its
address."""

from __future__ import annotations

from typing import Any, Callable, Dict, List, Optional

from scaler.client import current_client
from scaler.client.client_events import AskInfo
from scaler.client.gather_scatter import gather, scatter
from scaler.client.object_reference import ObjectReference
from scaler.client.scheduler_info import info_dict
from scaler.client.worker_calls import WorkerCallsOnClient
from scaler.protocol.messages import SchedulerInfo
from scaler.protocol.version import SCHEDULER_INFO_VERSION, knows, require_scheduler


class DaskCalls(WorkerCallsOnClient):
    _address: str
    _agent: Any
    _dashboard_link: Optional[str]  # once asked: the scheduler's answer ("" for none)
    _put_all: Callable[[List[Any]], List[ObjectReference]]
    _wait: Callable[[Any, str], Any]

    @staticmethod
    def current() -> Any:
        """The current Client, as Dask's ``Client.current()``: the innermost one whose ``with`` block runs, else the
        last one made, while connected; `ValueError` when there is none."""
        client = current_client.current()
        if client is None:
            raise ValueError("no connected Client: make one, Client('tcp://HOST:PORT')")
        return client

    def gather(self, futures: Any, errors: str = "raise") -> Any:
        """``futures`` with each future replaced by its result: a future, or lists, tuples, sets and dicts of them
        at any depth (other values stay as they are). ``errors="raise"``: the first failed future's exception is
        raised; ``"skip"``: failed and cancelled futures are left out."""
        return gather(futures, errors)

    def scatter(self, data: Any, broadcast: bool = False) -> Any:
        """Put ``data`` in object storage and return references to pass as task arguments (as `send_object` does):
        a list or tuple gives a list or tuple of references, one per item, a dict a dict of them, one per value,
        anything else one reference. ``broadcast`` changes nothing: every worker reads objects from the object
        storage server."""
        return scatter(data, self._put_all)

    def scheduler_info(self) -> Dict[str, Any]:
        """What the scheduler serves, as a dict: ``workers`` by ID (host, pid, capabilities, tasks held, CPU,
        memory), ``tasks`` by state, ``clients``, ``address``, ``monitor_address``, ``dashboard_link``
        (`scheduler_info.info_dict`). `ProtocolError` with a scheduler older than protocol 1.8."""
        return info_dict(self._ask_info(), self._address, self._agent.scheduler_version)

    @property
    def dashboard_link(self) -> Optional[str]:
        """The page of the cluster's web monitor, when its scheduler was told of one (``scaler_scheduler
        --dashboard-link``; ``SchedulerClusterCombo(dashboard_address=...)`` and ``scaler_up`` do it); else None."""
        if self._dashboard_link is None:
            if not knows(self._agent.scheduler_version, SCHEDULER_INFO_VERSION):
                return None
            self._dashboard_link = self._ask_info().dashboard_link
        return self._dashboard_link or None

    def _ask_info(self) -> SchedulerInfo:
        require_scheduler(self._agent.scheduler_version, SCHEDULER_INFO_VERSION, "scheduler_info")
        return self._wait(self._agent.ask(AskInfo), "the scheduler")
