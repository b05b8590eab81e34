"""The one wake-up rule in an asyncio shell (`alarm.Alarm`)."""

from __future__ import annotations

import asyncio
import math
import time
from typing import List

from scaler.protocol.alarm import Alarm


def test_it_rings_once_at_the_earliest_time_asked_and_is_set_again_after():
    async def scenario() -> List[str]:
        rung: List[str] = []
        ringing = [asyncio.get_running_loop().create_future()]

        def ring() -> None:
            rung.append("rang")
            ringing[0].set_result(None)

        alarm = Alarm(ring)
        now = time.monotonic()
        alarm.at(now + 60.0)
        alarm.at(now + 0.01)  # earlier: it moves
        alarm.at(now + 30.0)  # later: it stays
        assert alarm.when == now + 0.01
        await asyncio.wait_for(ringing[0], timeout=10)
        assert rung == ["rang"] and alarm.when == math.inf
        ringing[0] = asyncio.get_running_loop().create_future()
        alarm.at(time.monotonic())  # cancelled before its time: it never rings
        alarm.cancel()
        assert alarm.when == math.inf
        alarm.at(time.monotonic() + 0.05)  # set again: rings once, for this one
        await asyncio.wait_for(ringing[0], timeout=10)
        await asyncio.sleep(0)
        return rung

    assert asyncio.run(scenario()) == ["rang", "rang"]
