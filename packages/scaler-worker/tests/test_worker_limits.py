"""The worker core keeps every message within what the scheduler and the storage server take (their HelloAck's
``maxMessageSize``): it splits its batches, keeps inline only results that fit, and says why what cannot fit
did not come."""

from __future__ import annotations

import cloudpickle
from core_harness import CLIENT, Harness, load_failure, make_task, task_id

from scaler.protocol import codec
from scaler.protocol import messages as m
from scaler.protocol.errors import ObjectStorageRefusedError
from scaler.protocol.version import PROTOCOL_VERSION
from scaler.worker.processor_protocol import TaskOutputText
from scaler.worker.worker_events import FromStorage

LIMIT = 1 << 20  # the scheduler's --max-message-size in these tests


def within_limit(messages) -> bool:
    return all(len(codec.encode(message)[0]) <= LIMIT for message in messages)


def test_results_that_together_exceed_the_limit_leave_in_several_batches():
    h = Harness(max_message_size=LIMIT, inline_threshold_bytes=LIMIT, result_batch_seconds=60.0, pipeline_depth=8)
    h.assign(*(make_task(n) for n in range(1, 7)))
    h.answer_gets()
    for _ in range(6):
        h.finish(payload=bytes(230 << 10))  # inline: each is under a quarter of what a message holds
    batches = h.take(m.TaskResultBatch)
    assert len(batches) > 1 and within_limit(batches)
    results = [result for batch in batches for result in batch.results]
    assert [r.task_id for r in results] == [task_id(n) for n in range(1, 7)]
    assert all(r.payload_kind == m.PayloadKind.INLINE for r in results)


def test_a_result_too_large_to_travel_inline_goes_through_storage_whatever_the_threshold():
    h = Harness(max_message_size=LIMIT, inline_threshold_bytes=LIMIT)
    h.assign(make_task(1))
    h.answer_gets()
    h.finish(payload=bytes(LIMIT // 2))
    [(request, blobs)] = h.puts
    assert request.owner_id == CLIENT and blobs == [bytes(LIMIT // 2)]


def test_a_failure_whose_exception_cannot_fit_in_any_message_says_so():
    h = Harness(max_message_size=LIMIT)
    h.assign(make_task(1), make_task(2))
    h.answer_gets()
    h.finish(status=m.TaskStatus.FAILED, payload=bytes(LIMIT))  # an exception that pickles to 1 MiB
    h.answer_gets()
    h.finish()
    first, second = h.results()
    assert (first.status, first.payload_kind, first.payload) == (m.TaskStatus.FAILED, m.PayloadKind.NONE, b"")
    assert f"the exception of task {task_id(1).hex()} takes about 1.0 MiB" in first.error_text
    assert "the scheduler's message size limit of 1.0 MiB (scaler_scheduler --max-message-size)" in first.error_text
    assert second.status == m.TaskStatus.SUCCESS


def test_a_result_with_a_frame_larger_than_the_storage_server_takes_fails_unsent():
    h = Harness(max_message_size=LIMIT)
    h.handle(FromStorage(m.HelloAck(PROTOCOL_VERSION, role=m.PeerRole.OBJECT_STORAGE, max_message_size=LIMIT), []))
    h.assign(make_task(1))
    h.answer_gets()
    h.finish(payload=[cloudpickle.dumps(None), bytes(LIMIT + 1)])  # a result of two frames: through storage
    assert h.puts == []
    [result] = h.results()
    error, _ = load_failure(result)
    assert isinstance(error, ObjectStorageRefusedError)
    assert f"the result of task {task_id(1).hex()} takes about 1.0 MiB" in str(error)
    assert "(scaler_object_storage_server --max-object-size)" in str(error)


def test_what_a_task_prints_is_split_over_messages_within_the_limit():
    h = Harness(max_message_size=LIMIT)
    h.assign(make_task(1))
    h.answer_gets()
    out = m.OutputStream.STDOUT
    huge = "x" * (LIMIT * 2)
    h.tell([TaskOutputText(task_id(1), out, "a\n"), TaskOutputText(task_id(1), out, huge)])
    batches = h.take(m.TaskOutputBatch)
    assert len(batches) > 1 and within_limit(batches)
    assert "".join(output.text for batch in batches for output in batch.outputs) == "a\n" + huge
