"""The task functions every engine runs.

Kept in an importable module (the harness puts this folder on PYTHONPATH for the
runner and every process it starts), so each engine pickles them by reference,
as it would a user's library function.
"""

import os
import time


def noop(x):
    return x


def sleep_10ms(x):
    time.sleep(0.01)
    return x


def size_of(data):
    return len(data)


def whoami(_):
    time.sleep(0.05)
    return os.getpid()


def blocked(_):
    """Holds a worker until the run is torn down (the queued-memory workload)."""
    time.sleep(3600)


def inc(x):
    return x + 1


def add(x, y):
    return x + y


def total(*values):
    return sum(values)
