"""How large a frame each listening socket takes, and how long a connection may take to say who it is.

ZeroMQ's ``ZMQ_MAXMSGSIZE`` caps every frame a socket receives: a peer whose frame header announces more is
disconnected at once, before anything of that frame is buffered, and before its handshake is over (the
handshake's own commands are frames too). So an unauthenticated peer cannot make a daemon buffer more than
one frame of the limit per connection. ``ZMQ_HANDSHAKE_IVL`` bounds the handshake: a connection that has not
finished it within `HANDSHAKE_SECONDS` is closed. `security.new_socket` sets both.

The limits (docs/protocol.md, "Message size limits"):

- the scheduler's ROUTER: ``--max-message-size`` (`DEFAULT_MAX_MESSAGE_SIZE`), which its `HelloAck` states
  (protocol 1.8): the Python client and worker split their batches to stay within it and refuse, with an
  error naming the limit, a single task or result that cannot;
- the monitor feed's XPUB: `MONITOR_MAX_MESSAGE_SIZE` (it only receives subscriptions);
- the object storage server's ROUTER: its maximum object size plus `REQUEST_HEADROOM` (the frame of the
  request itself, which lists object IDs), stated in its `HelloAck` too; the Python peers refuse to put an
  object with a frame over it.
"""

from __future__ import annotations

from typing import Any, Callable, List, Tuple

KIB = 1 << 10
MIB = 1 << 20

DEFAULT_MAX_MESSAGE_SIZE = 64 * MIB  # a TaskBatch of 1,000 tasks with one 64 KiB argument each fits
MIN_MAX_MESSAGE_SIZE = 1 * MIB  # heartbeats, cancels and confirms of a full worker queue fit many times
MONITOR_MAX_MESSAGE_SIZE = 4 * KIB  # a subscription is a byte or two; a CurveZMQ handshake command a few hundred
REQUEST_HEADROOM = 16 * MIB  # the storage server takes its maximum object size plus this
HANDSHAKE_SECONDS = 10.0  # a connection that has not finished its ZeroMQ handshake by then is closed


def storage_max_message_size(max_object_size: int) -> int:
    """The largest frame the object storage server takes: an object's payload frame, or a request's frame."""
    return max_object_size + REQUEST_HEADROOM


def show_size(size: int) -> str:
    """Human-readable byte count for logs and errors (``1.5 GiB``)."""
    if size < 1024:
        return f"{size} bytes"
    value, unit = size / 1024, "KiB"
    for larger_unit in ("MiB", "GiB", "TiB"):
        if value < 1024:
            break
        value, unit = value / 1024, larger_unit
    return f"{value:.1f} {unit}"


# What a struct takes in an encoded message beyond the bytes of its Data and Text fields, over-estimated: its
# data words and pointers, and for each Data or Text field its padding to a word and a Text's NUL byte.
_MESSAGE_BYTES = 256  # segment table, root pointer, the union and the batch's own struct and list tags
_TASK_BYTES = 160
_ARGUMENT_BYTES = 48
_CAPABILITY_BYTES = 32
_RESULT_BYTES = 128
_OUTPUT_BYTES = 64


def message_budget(max_message_size: int) -> int:
    """What a sender fills a message with, of a daemon's ``max_message_size`` (0: none stated, the codec's
    largest frame): a sixteenth is left for what `task_size` and `result_size` do not count (the segments a
    large message is encoded in)."""
    limit = max_message_size or 1 << 31
    return limit - limit // 16 - _MESSAGE_BYTES


def task_size(task: Any) -> int:
    """At least the bytes a `Task` takes in a `TaskBatch` or a `GraphTask`."""
    size = _TASK_BYTES + len(task.task_id) + len(task.client_id) + len(task.function_id) + len(task.serializer_id)
    for argument in task.arguments:
        size += _ARGUMENT_BYTES + 4 * len(argument.name) + len(argument.data)  # a name's UTF-8: 4 bytes a character
    if task.capabilities:
        size += sum(_CAPABILITY_BYTES + 4 * len(capability.name) for capability in task.capabilities)
    return size


def result_size(result: Any) -> int:
    """At least the bytes a `TaskResult` takes in a `TaskResultBatch`."""
    return _RESULT_BYTES + len(result.task_id) + len(result.payload) + 4 * len(result.error_text)


def output_size(output: Any) -> int:
    """At least the bytes a `TaskOutput` takes in a `TaskOutputBatch`."""
    return _OUTPUT_BYTES + len(output.task_id) + len(output.client_id) + 4 * len(output.text)


def batches(
    items: List[Any], size_of: Callable[[Any], int], budget: int, most: int
) -> Tuple[List[List[Any]], List[Tuple[Any, int]]]:
    """``items`` in order, in runs of at most ``most`` whose sizes add up to at most ``budget``; and apart, each
    item that alone is larger than ``budget``, with its size (its sender refuses it)."""
    sizes = list(map(size_of, items))
    if sum(sizes) <= budget:  # the usual case: all of them fit in one message
        return [items[start : start + most] for start in range(0, len(items), most)], []
    runs: List[List[Any]] = []
    too_large: List[Tuple[Any, int]] = []
    run: List[Any] = []
    total = 0
    for item, size in zip(items, sizes, strict=True):
        if size > budget:
            too_large.append((item, size))
            continue
        if run and (len(run) == most or total + size > budget):
            runs.append(run)
            run, total = [], 0
        run.append(item)
        total += size
    if run:
        runs.append(run)
    return runs, too_large


STORAGE_OPTION = "scaler_object_storage_server --max-object-size"  # what raises the storage server's limit


def too_large_for(what: str, size: int, max_message_size: int, daemon: str, option: str) -> str:
    """Why ``what`` is not sent: ``size`` bytes cannot fit in a message under ``daemon``'s limit."""
    return (
        f"{what} takes about {show_size(size)} in a message: more than fits in the {daemon}'s message size "
        f"limit of {show_size(max_message_size)} ({option})"
    )
