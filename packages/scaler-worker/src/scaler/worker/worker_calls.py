"""Calls on every worker (protocol 1.8: `Client.upload_file`, `run`, `restart`, `get_worker_logs`), the worker
core's part, without I/O: what the core does with a `WorkerCall` from the scheduler and how it answers.

A restart replaces the runner's processor now (`TaskRunner.restart`: the tasks started there end as when their
processor dies, and the scheduler runs them again, up to its ``--max-task-deaths``), answered at once. A run,
an upload and a request for the logs are carried out by the shell (`CarryOutCall`: the function runs on a thread
of the agent; the file is saved in the worker's uploads directory; the recent log lines, `worker_setup`),
answered when it says `CallDone`; once a file is
saved, the runner replaces its processor as soon as no task runs there (`TaskRunner.refresh`), so every task
that starts after the answer imports the files as they are now.
"""

from __future__ import annotations

from typing import Any, List

from scaler.protocol import messages as m
from scaler.worker.scheduler_answers import SchedulerAnswers
from scaler.worker.task_runner import RunnerOwner, TaskRunner
from scaler.worker.worker_events import CallDone, CarryOutCall


class WorkerCalls:
    def __init__(self, runner: TaskRunner, answers: SchedulerAnswers) -> None:
        self._runner = runner
        self._answers = answers  # the answers go with the others (held while the scheduler is away)

    def on_call(self, call: m.WorkerCall, owner: RunnerOwner, out: List[Any]) -> None:
        if call.kind == m.WorkerCallKind.RESTART:
            self._runner.restart(owner, "its processor was restarted (Client.restart)", out)
            self._answers.message(m.WorkerCallResult(call.call_id, call.client_id, b"", True))
            return
        out.append(CarryOutCall(call))

    def on_done(self, done: CallDone, out: List[Any]) -> None:
        if done.uploaded and done.result.success:
            self._runner.refresh(out)
        self._answers.message(done.result)
