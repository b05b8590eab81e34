"""What the scheduler's core tells of its limits and enforces of its quotas, driven directly."""

from __future__ import annotations

from test_scheduler_core import CLIENT, WORKER_A, hello, sent, serving

from scaler.protocol import messages as m
from scaler.scheduler.scheduler_core import SchedulerCore, SchedulerSettings
from scaler.scheduler.scheduler_events import FromPeer


def test_every_hello_ack_states_the_message_size_limit():
    core = serving(SchedulerCore(SchedulerSettings(max_message_size=3 << 20)))
    for peer, role in ((CLIENT, m.PeerRole.CLIENT), (WORKER_A, m.PeerRole.WORKER)):
        (ack,) = sent(core.handle(FromPeer(peer, hello(role)), 0.0))
        assert type(ack) is m.HelloAck and ack.max_message_size == 3 << 20
