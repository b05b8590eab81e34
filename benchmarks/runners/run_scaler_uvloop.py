"""Runner for this project with ``--event-loop uvloop`` in the scheduler, storage and workers."""

import bench_common
from run_scaler import ScalerEngine


class ScalerUvloopEngine(ScalerEngine):
    name = "scaler-uvloop"
    event_loop = "uvloop"


if __name__ == "__main__":
    bench_common.main(ScalerUvloopEngine)
