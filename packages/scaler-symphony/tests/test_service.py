"""The Scaler service (`ScalerService.on_invoke`) with the fake soamapi's task contexts, and one that lacks what
the documentation promises."""

from __future__ import annotations

import cloudpickle

from scaler.protocol.ids import new_client_id
from scaler.symphony.task_payload import RESULT, parent_task


def _context_of(soamapi, function, session_id="7", task_id="3"):
    from soamapi_fake.streams import serialize

    from scaler.symphony.soam_message import PayloadMessage

    return soamapi.TaskContext(session_id, task_id, serialize(PayloadMessage(cloudpickle.dumps((function,)))))


def _output(soamapi, context):
    from soamapi_fake.streams import deserialize

    from scaler.symphony.soam_message import PayloadMessage

    message = PayloadMessage()
    deserialize(message, context.output)
    kind, value = cloudpickle.loads(message.payload)
    assert kind == RESULT
    return value


class _Unnamed:
    """A task context of a soamapi without get_session_id and get_task_id."""

    def __init__(self, context) -> None:
        self.populate_task_input = context.populate_task_input
        self.set_task_output = context.set_task_output
        self.context = context


def test_clients_made_in_a_task_name_it_and_a_context_that_cannot_name_it_still_runs_the_task(fake_grid):
    import soamapi

    from scaler.symphony.service import ScalerService

    service = ScalerService()
    context = _context_of(soamapi, new_client_id)
    service.on_invoke(context)
    assert parent_task(_output(soamapi, context)) == ("7", "3")
    unnamed = _Unnamed(_context_of(soamapi, new_client_id))
    service.on_invoke(unnamed)
    assert parent_task(_output(soamapi, unnamed.context)) is None
