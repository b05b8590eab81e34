from hypothesis import given, settings
from hypothesis import strategies as st

from scaler.protocol import codec
from scaler.protocol import messages as m
from scaler.protocol.message_limits import batches, message_budget, result_size, show_size, task_size

_data = st.binary(max_size=300)
_text = st.text(max_size=20)
_arguments = st.lists(st.builds(m.Argument, _text, st.sampled_from(m.ArgumentKind), _data), max_size=5)
_capabilities = st.lists(st.builds(m.Capability, _text, st.integers(-(2**63), 2**63 - 1)), max_size=3)
_tasks = st.builds(
    m.Task, task_id=_data, client_id=_data, function_id=_data, arguments=_arguments, priority=st.integers(-5, 5),
    capabilities=_capabilities, attempt=st.integers(0, 9), timeout_seconds=st.floats(0, 9), retries=st.integers(0, 9),
    profiling=st.booleans(), serializer_id=_data, store_result=st.booleans(), stream_output=st.booleans(),
)  # fmt: skip
_results = st.builds(
    m.TaskResult, task_id=_data, attempt=st.integers(0, 9), status=st.sampled_from(m.TaskStatus),
    payload_kind=st.sampled_from(m.PayloadKind), payload=_data, error_text=_text,
    profiling=st.builds(m.Profiling, st.floats(0, 9), st.floats(0, 9), st.integers(0, 2**63)),
)  # fmt: skip


LIMIT = 1 << 20
OVERHEAD = LIMIT - LIMIT // 16 - message_budget(LIMIT)  # the message's own bytes, beyond its items'


@settings(max_examples=200, deadline=None)
@given(st.lists(_tasks, min_size=1, max_size=40))
def test_what_senders_count_of_tasks_is_never_less_than_what_they_take_encoded(tasks):
    counted = OVERHEAD + sum(map(task_size, tasks))
    assert len(codec.encode(m.TaskBatch(tasks, 7))[0]) <= counted
    assert len(codec.encode(m.GraphTask(b"g" * 16, tasks, [b"t" * 16], True))[0]) <= counted


@settings(max_examples=200, deadline=None)
@given(st.lists(_results, min_size=1, max_size=40))
def test_what_senders_count_of_results_is_never_less_than_what_they_take_encoded(results):
    assert len(codec.encode(m.TaskResultBatch(results))[0]) <= OVERHEAD + sum(map(result_size, results))


def test_batches_split_by_count_and_by_size_and_set_apart_what_cannot_fit():
    runs, too_large = batches([3, 3, 3, 11, 3, 3, 3, 3], lambda size: size, budget=10, most=2)
    assert runs == [[3, 3], [3, 3], [3, 3], [3]]
    assert too_large == [(11, 11)]
    assert batches([], len, 10, 2) == ([], [])


def test_show_size():
    assert show_size(0) == "0 bytes"
    assert show_size(1023) == "1023 bytes"
    assert show_size(1536) == "1.5 KiB"
    assert show_size(64 << 20) == "64.0 MiB"
    assert show_size(3 << 40) == "3.0 TiB"
