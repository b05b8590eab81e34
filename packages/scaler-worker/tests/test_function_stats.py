import functools
import math

from scaler.protocol import messages as m
from scaler.protocol.task_runs import function_name
from scaler.worker.function_stats import OTHER_FUNCTIONS, UNKNOWN_FUNCTION, FunctionStatsTable


def test_runs_are_summed_per_function():
    table = FunctionStatsTable()
    table.record("mod.square", True, 0.5)
    table.record("mod.square", False, 0.25)
    table.record("mod.square", True, 1.0)
    table.record("", False, 0.0)
    table.record("", False, 0.0)
    assert table.report() == [m.FunctionStats("mod.square", 2, 1, 1.75), m.FunctionStats(UNKNOWN_FUNCTION, 0, 2, 0.0)]


def test_the_most_run_functions_are_reported_and_the_rest_summed():
    table = FunctionStatsTable()
    for index in range(5):
        for _ in range(index + 1):
            table.record(f"f{index}", True, 1.0)
    report = table.report(limit=2)
    assert [stats.name for stats in report] == ["f4", "f3", OTHER_FUNCTIONS]
    assert report[-1] == m.FunctionStats(OTHER_FUNCTIONS, 1 + 2 + 3, 0, 6.0)


def _local(x):
    return x


def test_qualified_names():
    assert function_name(math.sqrt) == "math.sqrt"
    assert function_name(_local) == f"{__name__}._local"
    assert function_name(functools.partial(_local, 1)) == f"{__name__}._local"
    assert function_name(lambda: 0) == f"{__name__}.test_qualified_names.<locals>.<lambda>"
