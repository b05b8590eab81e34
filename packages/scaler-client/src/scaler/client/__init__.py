"""The Scaler client: `Client` submits tasks to a scheduler and returns `ScalerFuture` objects."""

from scaler.client._version import __version__
from scaler.client.client import Client
from scaler.client.executor import ScalerExecutor
from scaler.client.future import ScalerFuture
from scaler.client.graph_parser import GraphCycleError, GraphError, GraphKeyError
from scaler.client.object_reference import ObjectReference
from scaler.client.progress_bar import progress
from scaler.client.remote_errors import RemoteTraceback
from scaler.client.serializer import DefaultSerializer, Serializer

__all__ = [
    "Client",
    "DefaultSerializer",
    "GraphCycleError",
    "GraphError",
    "GraphKeyError",
    "ObjectReference",
    "RemoteTraceback",
    "ScalerExecutor",
    "ScalerFuture",
    "Serializer",
    "__version__",
    "progress",
]
