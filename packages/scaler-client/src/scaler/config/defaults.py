"""The earlier engine's scaler.config.defaults (scaler.io.config in 1.x): the names that mean something here,
with our values (docs/compatibility.md; the tests compare each with the default it names)."""

DEFAULT_CLIENT_TIMEOUT_SECONDS = 10  # Client(timeout_seconds=): how long a call waits on a silent peer
DEFAULT_HEARTBEAT_INTERVAL_SECONDS = 1  # the heartbeats of clients, workers and the scheduler's expectation
DEFAULT_WORKER_TIMEOUT_SECONDS = 60  # scaler_scheduler and scaler_worker --worker-timeout-seconds
DEFAULT_PER_WORKER_QUEUE_SIZE = 1000  # scaler_worker and scaler_cluster --per-worker-queue-size
DEFAULT_TASK_TIMEOUT_SECONDS = 0  # Client.submit_verbose(timeout_seconds=): 0 is no limit
DEFAULT_MAX_NUMBER_OF_TASKS_WAITING = -1  # the scheduler queues any number of tasks (-1: no limit)
DEFAULT_LOGGING_LEVEL = "INFO"  # --logging-level of every command
DEFAULT_LOGGING_PATHS = ("/dev/stdout",)  # --logging-paths of every command
