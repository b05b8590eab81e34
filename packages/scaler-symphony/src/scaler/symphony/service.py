"""The Symphony service that runs Scaler tasks: ``python -m scaler.symphony.service`` (the ``startCmd`` of the
application profile in docs/symphony.md).

`ScalerService` loads each task's input, calls the function, and sets the tagged output (`task_payload`).
While it runs a task, the clients made there (a `Client` passed as an argument, or made by the task) name the
task in their IDs, so that the worker lets the tasks they submit past its base concurrency; and ``Client()``
without an address connects to the worker's scheduler, which the worker tells the service in the session's
common data, as it does on an ordinary worker.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
from typing import ContextManager

import soamapi

from scaler.protocol.ids import clients_made_in
from scaler.symphony.soam_message import PayloadMessage
from scaler.symphony.task_payload import run_task, task_origin

SCHEDULER_ADDRESS_VARIABLE = "SCALER_SCHEDULER_ADDRESS"  # what Client() reads, as inside an ordinary worker

logger = logging.getLogger(__name__)


class ScalerService(soamapi.ServiceContainer):
    def on_session_enter(self, session_context: soamapi.SessionContext) -> None:
        common = soamapi.DefaultTextMessage()
        try:
            session_context.populate_common_data(common)
            address = json.loads(common.get_text())["scheduler_address"]
        except (soamapi.SoamException, ValueError, KeyError, TypeError) as error:  # a worker that tells nothing
            logger.info(f"Scaler service: session {session_context.get_session_id()} names no scheduler ({error})")
            return
        os.environ[SCHEDULER_ADDRESS_VARIABLE] = address

    def on_invoke(self, task_context: soamapi.TaskContext) -> None:
        task_input = PayloadMessage()
        task_context.populate_task_input(task_input)
        made_here: ContextManager[None]
        try:
            made_here = clients_made_in(task_origin(task_context.get_session_id(), task_context.get_task_id()))
        except AttributeError:  # a soamapi that cannot name the task: the tasks its clients submit are not nested
            made_here = contextlib.nullcontext()
        with made_here:
            output = run_task(task_input.payload)
        task_context.set_task_output(PayloadMessage(output))


def main() -> None:
    ScalerService().run()


if __name__ == "__main__":
    main()
