"""The codec: every message type round-trips; malformed input of any kind is a ProtocolError."""

from __future__ import annotations

import dataclasses
import enum
import struct
import typing

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from scaler.protocol import codec, messages, routed
from scaler.protocol.errors import ProtocolError

DECODERS = [codec.decode, routed.decode_routed]

# --- values drawn from the schema's own field types ---------------------------------------------

_INTEGERS = {
    "int8": (-(2**7), 2**7 - 1),
    "int16": (-(2**15), 2**15 - 1),
    "int32": (-(2**31), 2**31 - 1),
    "int64": (-(2**63), 2**63 - 1),
    "uint8": (0, 2**8 - 1),
    "uint16": (0, 2**16 - 1),
    "uint32": (0, 2**32 - 1),
    "uint64": (0, 2**64 - 1),
}
_TEXT = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"), max_size=20)


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(part.title() for part in rest)


_PACKED = {  # a packed column (Data in the schema) holds numbers of its type
    messages.UInt32s: st.integers(*_INTEGERS["uint32"]),
    messages.Float64s: st.floats(allow_nan=False),
}


def _value_strategy(capnp_type, hint) -> st.SearchStrategy:
    kind = capnp_type.which()
    if hint in _PACKED:
        return st.lists(_PACKED[hint], max_size=3).map(hint)
    if kind in _INTEGERS:
        low, high = _INTEGERS[kind]
        return st.integers(low, high)
    if kind == "bool":
        return st.booleans()
    if kind == "float32":  # values a 32-bit float holds exactly
        return st.floats(width=32, allow_nan=False)
    if kind == "float64":
        return st.floats(allow_nan=False)
    if kind == "text":
        return _TEXT
    if kind == "data":
        return st.binary(max_size=24)
    if kind == "enum":
        return st.sampled_from(list(hint))
    if kind == "struct":
        return message_strategy(hint)
    if kind == "list":
        (item_hint,) = typing.get_args(hint)
        return st.lists(_value_strategy(capnp_type.list.elementType, item_hint), max_size=3)
    raise AssertionError(f"no strategy for Cap'n Proto type {kind}")


def message_strategy(cls: type) -> st.SearchStrategy:
    """Instances of the dataclass ``cls`` with every field drawn from its Cap'n Proto type."""
    hints = typing.get_type_hints(cls, vars(messages))
    fields = getattr(codec.schema, cls.__name__).schema.fields
    return st.builds(
        cls,
        **{
            f.name: _value_strategy(fields[_camel(f.name)].proto.slot.type, hints[f.name])
            for f in dataclasses.fields(cls)
        },
    )


def _ids(cls: type) -> str:
    return cls.__name__


# --- round trips ---------------------------------------------------------------------------------


@pytest.mark.parametrize("cls", messages.MESSAGE_TYPES, ids=_ids)
def test_default_message_round_trips(cls):
    message, blobs = codec.decode(codec.encode(cls()))
    assert message == cls()
    assert type(message) is cls
    assert blobs == []


@pytest.mark.parametrize("cls", messages.MESSAGE_TYPES, ids=_ids)
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_every_message_round_trips(cls, data):
    message = data.draw(message_strategy(cls))
    frames = codec.encode(message)
    decoded, blobs = codec.decode(frames)
    assert decoded == message
    assert blobs == []


def test_blobs_travel_after_the_message():
    request = messages.ObjectRequest(
        request_id=7, kind=messages.ObjectRequestKind.PUT, owner_id=b"C|h|1|a", object_ids=[b"a", b"b"]
    )
    frames = codec.encode(request, [b"payload a", memoryview(b"payload b")])
    assert len(frames) == 3
    decoded, blobs = codec.decode(frames)
    assert decoded == request
    assert [bytes(blob) for blob in blobs] == [b"payload a", b"payload b"]


def test_decode_accepts_frames_with_a_buffer():
    class Frame:  # what pyzmq's recv_multipart(copy=False) returns: an object with .buffer
        def __init__(self, data: bytes) -> None:
            self.buffer = memoryview(data)

    message = messages.TaskCancel(task_ids=[b"x" * 16])
    assert codec.decode([Frame(codec.encode(message)[0])])[0] == message


def test_every_message_type_is_in_the_schema_union():
    union = set(codec.schema.Message.schema.union_fields)
    names = {codec.message_name(cls) for cls in messages.MESSAGE_TYPES}
    assert names == union


def test_enums_match_the_schema():
    for cls in vars(messages).values():
        if isinstance(cls, type) and issubclass(cls, enum.IntEnum):
            schema_enum = getattr(codec.schema, cls.__name__).schema
            assert [_camel(member.name.lower()) for member in cls] == list(schema_enum.enumerants), cls


# --- malformed input ------------------------------------------------------------------------------


def _valid_frame() -> bytes:
    task = messages.Task(task_id=b"t" * 16, client_id=b"C|h|1|a", arguments=[messages.Argument("x", data=b"1")])
    return codec.encode(messages.TaskBatch(tasks=[task]))[0]


@pytest.mark.parametrize("decode", DECODERS, ids=["decode", "decode_routed"])
def test_no_frames(decode):
    with pytest.raises(ProtocolError, match="no frames"):
        decode([])


@pytest.mark.parametrize("decode", DECODERS, ids=["decode", "decode_routed"])
def test_empty_frame(decode):
    with pytest.raises(ProtocolError, match="0 bytes"):
        decode([b""])


@pytest.mark.parametrize("extra", range(1, 8))
@pytest.mark.parametrize("decode", DECODERS, ids=["decode", "decode_routed"])
def test_wrong_word_alignment(decode, extra):
    frame = _valid_frame()
    with pytest.raises(ProtocolError, match="whole number of Cap'n Proto words"):
        decode([frame + b"\x00" * extra])
    with pytest.raises(ProtocolError, match="whole number of Cap'n Proto words"):
        decode([frame[:-extra]])


@pytest.mark.parametrize("column, size", [("runSeconds", 8), ("clients", 4)])
def test_a_packed_column_of_part_of_a_number_is_refused(column, size):
    builder = codec.schema.Message.new_message()
    setattr(builder.init("workerHeartbeat").init("endedRuns"), column, b"\x01" * (size + 3))
    with pytest.raises(ProtocolError, match=f"column of {size + 3} bytes is not a whole number of {size}-byte"):
        codec.decode([builder.to_bytes()])


def test_packed_columns_are_little_endian_whatever_the_host():
    runs = messages.TaskRuns(clients=[1, 2], run_seconds=[0.5])
    reader, _, _, _ = codec.read_message(codec.encode(messages.WorkerHeartbeat(ended_runs=runs)))
    written = reader.workerHeartbeat.endedRuns
    assert bytes(written.clients) == struct.pack("<2I", 1, 2) and bytes(written.runSeconds) == struct.pack("<d", 0.5)


@pytest.mark.parametrize("decode", DECODERS, ids=["decode", "decode_routed"])
def test_every_truncation_is_refused(decode):
    frame = _valid_frame()
    for size in range(8, len(frame), 8):
        with pytest.raises(ProtocolError):
            decode([frame[:size]])


@pytest.mark.parametrize("decode", DECODERS, ids=["decode", "decode_routed"])
def test_oversized_frame(decode, monkeypatch):
    monkeypatch.setattr(codec, "MAX_FRAME_BYTES", 64)
    with pytest.raises(ProtocolError, match="over the limit"):
        decode([b"\x00" * 72])


@pytest.mark.parametrize("decode", DECODERS, ids=["decode", "decode_routed"])
def test_segment_table_claiming_more_than_the_frame(decode):
    frame = bytearray(_valid_frame())
    struct.pack_into("<I", frame, 4, 1 << 28)  # first segment size, in words
    with pytest.raises(ProtocolError):
        decode([bytes(frame)])


def _with_union_discriminant(discriminant: int) -> bytes:
    """A valid Message whose union discriminant is replaced."""
    frame = bytearray(codec.encode(messages.BalanceRequest(count=3))[0])
    (segments_minus_one,) = struct.unpack_from("<I", frame, 0)
    assert segments_minus_one == 0
    (root,) = struct.unpack_from("<Q", frame, 8)  # the root struct pointer: first word of segment 0
    assert root & 3 == 0, "root pointer is not a struct pointer"
    offset = (root & 0xFFFFFFFF) >> 2
    data_section = 8 + 8 * (1 + offset)
    assert struct.unpack_from("<H", frame, data_section)[0] == messages.MESSAGE_TYPES.index(messages.BalanceRequest)
    struct.pack_into("<H", frame, data_section, discriminant)
    return bytes(frame)


def test_union_discriminant_is_where_we_patch_it():
    index = messages.MESSAGE_TYPES.index(messages.BalanceResponse)
    message, _ = codec.decode([_with_union_discriminant(index)])
    assert isinstance(message, messages.BalanceResponse)


@pytest.mark.parametrize("discriminant", [len(messages.MESSAGE_TYPES), 999, 0xFFFF])
@pytest.mark.parametrize("decode", DECODERS, ids=["decode", "decode_routed"])
def test_unknown_union_member(decode, discriminant):
    with pytest.raises(ProtocolError):
        decode([_with_union_discriminant(discriminant)])


@settings(max_examples=300, deadline=None)
@given(st.binary(min_size=8, max_size=256).map(lambda data: data[: len(data) - len(data) % 8]))
@pytest.mark.parametrize("decode", DECODERS, ids=["decode", "decode_routed"])
def test_random_bytes_never_raise_anything_but_protocol_error(decode, data):
    try:
        message, _ = decode([data])
        codec.encode(message)
    except ProtocolError:
        return
    assert type(message) in messages.MESSAGE_TYPES


@settings(max_examples=300, deadline=None)
@given(st.data())
@pytest.mark.parametrize("decode", DECODERS, ids=["decode", "decode_routed"])
def test_corrupted_valid_frames_never_raise_anything_but_protocol_error(decode, data):
    frame = bytearray(_valid_frame())
    for _ in range(data.draw(st.integers(1, 4))):
        frame[data.draw(st.integers(0, len(frame) - 1))] = data.draw(st.integers(0, 255))
    try:
        message, _ = decode([bytes(frame)])
        if type(message) is codec.DamagedTaskBatch:  # the tasks that can be read, and why each other cannot
            assert message.damaged and all(damaged.reason for damaged in message.damaged)
            message = messages.TaskBatch(message.tasks, message.sequence)
        codec.encode(message)  # a routed item is read in full only now
    except ProtocolError:
        return
    assert type(message) in messages.MESSAGE_TYPES


# --- decode_routed: tasks and results read only as far as the scheduler routes them ---------------


def _tasks(count: int) -> typing.List[messages.Task]:
    return [
        messages.Task(
            task_id=i.to_bytes(16, "big"), client_id=b"claimed", function_id=b"f" * 32, priority=i % 3,
            arguments=[messages.Argument("x", messages.ArgumentKind.INLINE, bytes([i % 256]) * 40)],
            capabilities=[messages.Capability("gpu", 2)] if i % 2 else [], timeout_seconds=1.5, retries=2,
            profiling=True, serializer_id=b"s", store_result=bool(i % 5 == 0), stream_output=bool(i % 3 == 0),
        )
        for i in range(count)
    ]  # fmt: skip


def test_routed_tasks_carry_what_routing_needs_and_copy_the_rest_through():
    tasks = _tasks(50)
    received, _ = routed.decode_routed(codec.encode(messages.TaskBatch(tasks)))
    assert [t.task_id for t in received.tasks] == [t.task_id for t in tasks]
    assert [(t.priority, list(t.capabilities), t.timeout_seconds, t.retries) for t in received.tasks] == [
        (t.priority, t.capabilities, t.timeout_seconds, t.retries) for t in tasks
    ]
    assert [t.stream_output for t in received.tasks] == [t.stream_output for t in tasks]  # read when it prints
    for t in received.tasks:
        t.client_id, t.attempt = b"the real client", 7
    plain = messages.Task(task_id=b"built here")  # the scheduler's own tasks (graph nodes) go in the same batch
    sent, _ = codec.decode(codec.encode(messages.TaskBatch([*received.tasks[:20], plain])))
    expected = [dataclasses.replace(t, client_id=b"the real client", attempt=7) for t in tasks[:20]]
    assert sent.tasks == [*expected, plain]
    assert received.tasks[3].to_task() == expected[3]


def test_a_routed_task_carries_how_long_it_waited_when_told():
    task = messages.Task(task_id=b"c" * 16, function_id=b"f")
    received, _ = routed.decode_routed(codec.encode(messages.TaskBatch([task, messages.Task(task_id=b"d" * 16)])))
    received.tasks[0].queued_seconds = 2.5  # while workers record task runs
    sent, _ = codec.decode(codec.encode(messages.TaskBatch(received.tasks)))
    assert [t.queued_seconds for t in sent.tasks] == [2.5, 0.0]
    assert sent.tasks[0] == dataclasses.replace(task, queued_seconds=2.5)


def test_graph_nodes_are_routed_and_the_scheduler_replaces_the_arguments_that_name_other_nodes():
    needed = messages.Task(task_id=b"a" * 16, function_id=b"f", arguments=[messages.Argument("x", data=b"1")])
    node = messages.Task(
        task_id=b"b" * 16, function_id=b"g", store_result=True,
        arguments=[
            messages.Argument("", messages.ArgumentKind.TASK, needed.task_id),
            messages.Argument("k", messages.ArgumentKind.INLINE, b"literal"),
            messages.Argument("", messages.ArgumentKind.TASK, needed.task_id),
        ],
    )  # fmt: skip
    graph = messages.GraphTask(graph_id=b"G" * 16, tasks=[needed, node], targets=[node.task_id])
    received, _ = routed.decode_routed(codec.encode(graph))
    assert (received.graph_id, received.targets) == (graph.graph_id, graph.targets)
    first, second = received.tasks
    assert list(first.dependencies) == [] and list(second.dependencies) == [(0, needed.task_id), (2, needed.task_id)]
    second.set_argument(0, messages.ArgumentKind.OBJECT, b"result object")
    second.set_argument(2, messages.ArgumentKind.INLINE, b"result bytes")
    second.store_result = False
    sent, _ = codec.decode(codec.encode(messages.TaskBatch([second])))
    (task,) = sent.tasks
    assert task.arguments == [
        messages.Argument("", messages.ArgumentKind.OBJECT, b"result object"),
        messages.Argument("k", messages.ArgumentKind.INLINE, b"literal"),
        messages.Argument("", messages.ArgumentKind.INLINE, b"result bytes"),
    ]
    assert task.store_result is False and task.function_id == b"g"
    assert codec.decode(codec.encode(messages.TaskBatch([first])))[0].tasks == [needed]  # untouched: as received


def test_a_routed_task_copied_more_often_than_the_traversal_limit_allows_is_read_again():
    tasks = _tasks(20)
    received, _ = routed.decode_routed(codec.encode(messages.TaskBatch(tasks)))
    for _ in range(30):  # every copy reads the whole batch; the limit allows about four
        sent, _ = codec.decode(codec.encode(messages.TaskBatch(received.tasks)))
    assert sent.tasks == tasks


def test_routed_results_read_payload_and_error_lazily_and_may_replace_the_error():
    results = [
        messages.TaskResult(i.to_bytes(16, "big"), 1, messages.TaskStatus.FAILED, messages.PayloadKind.INLINE,
                            bytes([i]) * 30, f"boom {i}", messages.Profiling(1.0, 2.0, i))
        for i in range(10)
    ]  # fmt: skip
    received, _ = routed.decode_routed(codec.encode(messages.TaskResultBatch(results)))
    first = received.results[0]
    assert (first.task_id, first.attempt, first.status) == (results[0].task_id, 1, messages.TaskStatus.FAILED)
    assert (first.payload_kind, first.payload, first.error_text, first.profiling) == (
        results[0].payload_kind, results[0].payload, results[0].error_text, results[0].profiling
    )  # fmt: skip
    first.error_text = "replaced"
    assert first.to_result() == dataclasses.replace(results[0], error_text="replaced")
    sent, _ = codec.decode(codec.encode(messages.TaskResultBatch(received.results)))
    assert sent.results == [dataclasses.replace(results[0], error_text="replaced"), *results[1:]]


def test_a_routed_result_with_an_unknown_status_is_refused():
    attempt = 0x5A5A5A5A  # findable: the status (UInt16) follows the attempt (UInt32) in the data section
    result = messages.TaskResult(b"t", attempt, messages.TaskStatus.REJECTED)
    frame = bytearray(codec.encode(messages.TaskResultBatch([result]))[0])
    at = frame.index(struct.pack("<IH", attempt, messages.TaskStatus.REJECTED)) + 4
    frame[at : at + 2] = struct.pack("<H", 77)
    with pytest.raises(ProtocolError):
        codec.decode([bytes(frame)])
    received, _ = routed.decode_routed([bytes(frame)])
    results, (damaged,) = received.results.read(0, 1)
    assert not results and damaged.task_id == b"t" and "status" in damaged.reason, damaged


@pytest.mark.parametrize("count", [1, 3, 600])
def test_segment_tables_of_every_size_are_split_right(count):
    received, _ = routed.decode_routed(codec.encode(messages.TaskBatch(_tasks(count))))
    assert len(received.tasks) == count
    assert received.tasks[-1].to_task() == _tasks(count)[-1]


# --- task batches with tasks that cannot be read: the others are read, each damaged one named ---------------


def _batch_with(damage: str) -> bytes:
    """A TaskBatch (sequence 9) of three tasks whose second is damaged: ``name`` (an argument name without its
    NUL byte), ``kind`` (an argument kind no version knows) or ``pointer`` (its function ID a struct)."""
    marker = messages.Argument("abc", messages.ArgumentKind.INLINE, b"\x11\x22\x33\x44\x55\x66\x77\x88")
    middle = messages.Task(task_id=b"m" * 16, function_id=b"F" * 8, attempt=3, arguments=[marker])
    tasks = [messages.Task(task_id=bytes([i]) * 16, arguments=[messages.Argument(data=b"1")]) for i in (1, 3)]
    frame = bytearray(codec.encode(messages.TaskBatch([tasks[0], middle, tasks[1]], sequence=9))[0])
    if damage == "name":
        at = frame.index(b"abc\x00")
        frame[at + 3] = ord("d")
    elif damage == "kind":  # the kind (UInt16) is the whole data section of the Argument struct
        at = frame.index(b"abc\x00")
        struct_start = _struct_of_text(frame, at)
        frame[struct_start : struct_start + 2] = struct.pack("<H", 9)
    else:  # the function ID's pointer rewritten as a struct pointer (kind 0) of one data word
        at = frame.index(b"F" * 8)
        pointer = _pointer_to(frame, at)
        frame[pointer : pointer + 8] = struct.pack("<II", ((at - pointer - 8) // 8) << 2, 1)
    return bytes(frame)


def _pointer_to(frame: bytearray, target: int) -> int:
    """The offset of the list pointer that points at ``target`` (words before it, in this single segment)."""
    for at in range(8, target, 8):
        low, _ = struct.unpack_from("<II", frame, at)
        if low & 3 == 1 and at + 8 + ((low >> 2) * 8 if low < 2**31 else 0) == target:
            return at
    raise AssertionError("no pointer to the target")


def _struct_of_text(frame: bytearray, text: int) -> int:
    """The data section of the Argument whose name is the text at ``text``: its name pointer's word, minus one
    word of data (Argument: one data word, two pointers)."""
    return _pointer_to(frame, text) - 8


@pytest.mark.parametrize(
    "damage, where",
    [("name", "arguments[0].name"), ("kind", "arguments[0].kind"), ("pointer", "functionId")],
)
def test_a_damaged_task_is_named_and_the_rest_of_its_batch_is_read(damage, where):
    message, _ = codec.decode([_batch_with(damage)])
    assert type(message) is codec.DamagedTaskBatch and message.sequence == 9
    batch, _ = routed.decode_routed([_batch_with(damage)])  # the scheduler finds the damage as it takes the tasks
    assert type(batch) is messages.TaskBatch and batch.sequence == 9
    for tasks, damage_found in ((message.tasks, message.damaged), batch.tasks.read(0, 3)):
        assert [task.task_id for task in tasks] == [b"\x01" * 16, b"\x03" * 16]
        (damaged,) = damage_found
        assert (damaged.task_id, damaged.attempt) == (b"m" * 16, 3)
        assert damaged.reason.startswith(where), damaged.reason
        if damage == "name":
            assert damaged.reason == "arguments[0].name: a text field lacks its terminating NUL byte"
    with pytest.raises(ProtocolError, match=where.replace("[", r"\[").replace("]", r"\]")):
        list(batch.tasks)


def test_the_tasks_of_a_routed_batch_are_read_when_taken_and_kept():
    received, _ = routed.decode_routed(codec.encode(messages.TaskBatch(_tasks(10))))
    first, _ = received.tasks.read(0, 4)
    assert [task.task_id for task in first] == [task.task_id for task in _tasks(4)]
    assert received.tasks.read(0, 4)[0] == first and received.tasks[3] is first[3]  # the same objects
    rest, damaged = received.tasks.read(4, 100)
    assert len(rest) == 6 and not damaged and len(received.tasks) == 10


def test_a_batch_without_damage_is_a_task_batch_with_its_sequence():
    for decode in DECODERS:
        message, _ = decode(codec.encode(messages.TaskBatch(_tasks(3), sequence=5)))
        assert type(message) is messages.TaskBatch and message.sequence == 5
