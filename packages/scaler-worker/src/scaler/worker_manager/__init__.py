"""Scaler worker managers: grow and shrink groups of workers as the scheduler decides (docs/scaling.md).

``scaler_worker_manager native`` runs each group as local processes, ``scaler_worker_manager slurm`` as a
Slurm job; ``scaler_native_worker_adapter`` serves the OpenGRIS worker adapter webhook. The decisions of a
manager are `manager_core.ManagerCore` (sans-I/O), its shell `manager_agent.ManagerAgent`, what runs its
groups a `group_backend.GroupBackend`.
"""

from scaler.worker._version import __version__

__all__ = ["__version__"]
