"""A worker whose tasks run on Symphony: the worker agent of scaler-worker with the Symphony runner."""

from __future__ import annotations

from typing import Tuple

from scaler.symphony.symphony_host import SymphonyHost
from scaler.symphony.symphony_runner import SymphonyRunner
from scaler.symphony.symphony_settings import SymphonySettings
from scaler.worker.task_runner import RunnerHost, TaskRunner
from scaler.worker.worker_agent import RunnerFactory, WorkerAgent
from scaler.worker.worker_config import WorkerConfig


def symphony_runner(settings: SymphonySettings) -> RunnerFactory:
    """The runner factory of `WorkerAgent` for tasks that run in ``settings.application`` on Symphony."""

    def make(config: WorkerConfig, worker_id: str, delegation_key: bytes) -> Tuple[TaskRunner, RunnerHost]:
        # the tasks run on other hosts, which do not hold the key: their Clients stand for themselves only
        host = SymphonyHost(settings, config.scheduler_address, f"Worker {worker_id}")
        return SymphonyRunner(settings.base_concurrency), host

    return make


def run_symphony_worker(config: WorkerConfig, settings: SymphonySettings) -> int:
    """Run one Symphony worker in an event loop of its own until it leaves; its exit code. Blocks."""
    from scaler.protocol.command_line import run_event_loop

    agent = WorkerAgent(config, runner=symphony_runner(settings))
    code: int = run_event_loop(agent.run, config.event_loop)
    return code
