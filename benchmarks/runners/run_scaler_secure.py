"""Runner for this project with CurveZMQ keys on every connection (``SchedulerClusterCombo(security=True)``)."""

import logging

import bench_common
from run_scaler import ScalerEngine

from scaler import Client, SchedulerClusterCombo


class ScalerSecureEngine(ScalerEngine):
    name = "scaler-secure"

    def start(self):
        logging.disable(logging.WARNING)  # no client-side log lines in the measurements
        self.cluster = SchedulerClusterCombo(
            n_workers=self.workers, logging_level="WARNING", event_loop=self.event_loop, security=True
        )
        self.client = Client(address=self.cluster.get_address(), security=self.cluster.security)


if __name__ == "__main__":
    bench_common.main(ScalerSecureEngine)
