"""What a scheduler is started with (`SchedulerSettings`): the command line's and `SchedulerClusterCombo`'s options,
as the core and its shell read them."""

from __future__ import annotations

from dataclasses import dataclass

from scaler.protocol.message_limits import DEFAULT_MAX_MESSAGE_SIZE
from scaler.scheduler.graph_tasks import DEFAULT_INLINE_BUDGET
from scaler.scheduler.scaling_policy import DEFAULT_SCALING, ScalingSettings
from scaler.scheduler.task_routing import DEFAULT_MAX_CLIENT_TASKS


@dataclass
class SchedulerSettings:
    object_storage_address: str = ""
    object_storage_address_given: bool = False  # else the default: a server is started there if none answers
    pid: int = 0  # this process's, for the Hello to the object storage server
    heartbeat_interval_seconds: float = 1.0
    client_timeout_seconds: float = 60.0
    worker_timeout_seconds: float = 60.0
    protected: bool = False
    allocate_policy: str = "even"  # or "capability", the same: tasks go only to workers with the capabilities they need
    missing_capabilities: str = "wait"  # tasks whose capabilities no worker has: "wait" (with a warning) or "fail"
    max_task_deaths: int = 3  # a task whose processor or worker died this many times fails
    graph_sorter: str = "auto"  # graph bookkeeping: "graphblas", "python", or "auto" (GraphBLAS if installed)
    graph_inline_bytes: int = DEFAULT_INLINE_BUDGET  # small graph results held here for dependants; 0: all in storage
    snapshot_every_second: bool = False  # a snapshot each second even with no monitor subscribed (--metrics-port)
    scaling: ScalingSettings = DEFAULT_SCALING  # when worker managers grow and shrink their groups
    adapter_webhook_url: str = ""  # an OpenGRIS worker adapter's webhook: one more manager (--adapter-webhook-url)
    max_message_size: int = DEFAULT_MAX_MESSAGE_SIZE  # the ROUTER's ZMQ_MAXMSGSIZE (--max-message-size)
    max_client_tasks: int = DEFAULT_MAX_CLIENT_TASKS  # a client's quota of tasks here (--max-client-tasks)
    monitor_address: str = ""  # where monitors subscribe, told to clients that ask (SchedulerInfo)
    dashboard_link: str = ""  # the web monitor's page, told to clients that ask (--dashboard-link)
