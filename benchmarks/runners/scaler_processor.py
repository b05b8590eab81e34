"""A real processor subprocess, fed as its agent feeds it during a map of no-op tasks: one task running and
``TINY_TASKS_PIPELINE_DEPTH`` (32) sent ahead, one more sent for each result (``AHEAD``: another depth; 4 is
what quick tasks that are not tiny get). Prints the processor's CPU time per task (psutil), the processor
alone: no scheduler, no client, no agent core. Run it with the interpreter of a build of this project, e.g.
``benchmarks/.envs/scaler/bin/python benchmarks/runners/scaler_processor.py`` and, for the commit a
``--baseline`` run built, ``benchmarks/.envs/scaler-baseline/bin/python ...``, several times in turn.

    python scaler_processor.py [TASKS [AHEAD]]   # default 20,000, after 2,000 to warm up
"""

from __future__ import annotations

import sys
import time

import cloudpickle
import psutil

from scaler.worker.processor_link import ProcessorLink
from scaler.worker.processor_protocol import TINY_TASKS_PIPELINE_DEPTH, ProcessorResult, ProcessorTask


def noop(value):
    return value


class Feeder:
    def __init__(self, link: ProcessorLink, in_flight: int) -> None:
        self.link = link
        self.in_flight = in_flight  # the one running and those sent ahead
        self.number = 0
        self.function = cloudpickle.dumps(noop)  # the first task carries it, the others its ID
        self.argument = cloudpickle.dumps(1)

    def task(self, sent_ahead: bool) -> ProcessorTask:
        self.number += 1
        function, self.function = self.function, None
        return ProcessorTask(
            self.number.to_bytes(16, "big"), b"noop".ljust(16, b"_"), function, b"", None,
            [("", self.argument, b"")], False, sent_ahead=sent_ahead,
        )  # fmt: skip

    def run(self, count: int) -> None:
        self.link.send([self.task(False)] + [self.task(True) for _ in range(self.in_flight - 1)])
        sent, received = self.in_flight, 0
        while received < sent:
            message = self.link.receive(10)
            parts = message if type(message) is list else [message]
            ended = sum(1 for part in parts if type(part) is ProcessorResult)
            received += ended
            more = min(ended, count - sent)
            if more > 0:
                self.link.send([self.task(True) for _ in range(more)])
                sent += more


def main() -> None:
    tasks = int(sys.argv[1]) if len(sys.argv) > 1 else 20_000
    ahead = int(sys.argv[2]) if len(sys.argv) > 2 else TINY_TASKS_PIPELINE_DEPTH
    link = ProcessorLink.start(0, "tcp://127.0.0.1:1", "W|bench|0|000000000000")
    try:
        feeder = Feeder(link, 1 + ahead)
        process = psutil.Process(link.pid)
        feeder.run(2_000)
        before, started = process.cpu_times(), time.perf_counter()
        feeder.run(tasks)
        after, wall = process.cpu_times(), time.perf_counter() - started
        cpu = after.user + after.system - before.user - before.system
        print(f"processor: {cpu / tasks * 1e6:.1f} µs of CPU per task, {wall / tasks * 1e6:.1f} µs of wall time")
    finally:
        link.kill()
        link.reap(5)


if __name__ == "__main__":
    main()
