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
