"""Topological bookkeeping of one task graph: who waits for whom, who still needs whom.

Nodes are numbered 0..size-1; an edge ``(d, n)`` says that node ``n`` needs the
result of node ``d``. Two implementations answer the same questions with the
same results (tests run both on the same graphs):

- `PythonGraphIndex`: compressed adjacency arrays and counters, plain Python;
- `GraphBLASGraphIndex`: a sparse adjacency matrix in python-graphblas (the
  ``graphblas`` extra of scaler-scheduler); whole-graph questions (degree counts,
  roots, everything downstream of a failure) and batched completions are sparse
  matrix-vector products.

`make_graph_index` picks GraphBLAS when it is installed (unless told otherwise).
Every list returned is sorted ascending, so both give identical answers.
"""

from __future__ import annotations

import importlib.util
from array import array
from typing import Any, List, Optional, Protocol, Sequence, Tuple


class GraphIndex(Protocol):
    size: int

    def roots(self) -> List[int]:
        """Nodes that need no other node."""

    def dependant_counts(self) -> List[int]:
        """For each node, how many nodes need it (at construction)."""

    def unfinished_dependants(self, node: int) -> int:
        """How many nodes that need ``node`` have not finished yet."""

    def descendants(self, nodes: Sequence[int]) -> List[int]:
        """Every node reachable from ``nodes`` through one edge or more, without ``nodes`` themselves."""

    def finish(self, nodes: Sequence[int]) -> Tuple[List[int], List[int]]:
        """Record that ``nodes`` finished (each node exactly once, in any outcome).

        Returns the nodes all of whose dependencies have now finished (ready),
        and the nodes all of whose dependants have now finished (freed), each
        counting only those reached through ``nodes``.
        """


def graphblas_available() -> bool:
    return importlib.util.find_spec("graphblas") is not None


def make_graph_index(
    size: int, sources: Sequence[int], targets: Sequence[int], use_graphblas: Optional[bool] = None
) -> GraphIndex:
    """The index of a graph whose edges are ``sources[k] -> targets[k]`` (unique pairs, no self-loops)."""
    if use_graphblas is None:
        use_graphblas = graphblas_available()
    if use_graphblas:
        return GraphBLASGraphIndex(size, sources, targets)
    return PythonGraphIndex(size, sources, targets)


def _compressed(size: int, keys: Sequence[int], values: Sequence[int]) -> Tuple[array, array]:
    """CSR layout: the values of key k are ``flat[offsets[k]:offsets[k + 1]]``."""
    offsets = array("q", bytes(8 * (size + 1)))
    for key in keys:
        offsets[key + 1] += 1
    for k in range(size):
        offsets[k + 1] += offsets[k]
    position = array("q", offsets[:size])
    flat = array("q", bytes(8 * len(keys)))
    for key, value in zip(keys, values, strict=True):
        flat[position[key]] = value
        position[key] += 1
    return offsets, flat


class PythonGraphIndex:
    def __init__(self, size: int, sources: Sequence[int], targets: Sequence[int]) -> None:
        self.size = size
        self._dependant_offsets, self._dependants = _compressed(size, sources, targets)
        self._dependency_offsets, self._dependencies = _compressed(size, targets, sources)
        offsets = self._dependency_offsets
        self._waiting = [offsets[k + 1] - offsets[k] for k in range(size)]  # unfinished dependencies
        offsets = self._dependant_offsets
        self._holding = [offsets[k + 1] - offsets[k] for k in range(size)]  # unfinished dependants

    def roots(self) -> List[int]:
        return [node for node, waiting in enumerate(self._waiting) if waiting == 0]

    def dependant_counts(self) -> List[int]:
        offsets = self._dependant_offsets
        return [offsets[k + 1] - offsets[k] for k in range(self.size)]

    def unfinished_dependants(self, node: int) -> int:
        return self._holding[node]

    def descendants(self, nodes: Sequence[int]) -> List[int]:
        offsets, dependants = self._dependant_offsets, self._dependants
        start = set(nodes)
        seen = set()
        stack = list(start)
        while stack:
            node = stack.pop()
            for dependant in dependants[offsets[node] : offsets[node + 1]]:
                if dependant not in seen:
                    seen.add(dependant)
                    stack.append(dependant)
        return sorted(seen - start)

    def finish(self, nodes: Sequence[int]) -> Tuple[List[int], List[int]]:
        ready: List[int] = []
        freed: List[int] = []
        waiting, holding = self._waiting, self._holding
        out_offsets, dependants = self._dependant_offsets, self._dependants
        in_offsets, dependencies = self._dependency_offsets, self._dependencies
        for node in nodes:
            for dependant in dependants[out_offsets[node] : out_offsets[node + 1]]:
                waiting[dependant] -= 1
                if waiting[dependant] == 0:
                    ready.append(dependant)
            for dependency in dependencies[in_offsets[node] : in_offsets[node + 1]]:
                holding[dependency] -= 1
                if holding[dependency] == 0:
                    freed.append(dependency)
        ready.sort()
        freed.sort()
        return ready, freed


class GraphBLASGraphIndex(PythonGraphIndex):
    """The same bookkeeping with the graph held as a GraphBLAS adjacency matrix (``A[d, n]`` set when n needs d).

    GraphBLAS builds the adjacency and the degree counts, finds the roots,
    walks everything downstream of a failure, and settles batches of
    completions (cancel and failure cascades) as sparse matrix-vector products.
    A completion of a few nodes (the usual result batch) is settled on the
    adjacency GraphBLAS exported, as `PythonGraphIndex` does: each
    python-graphblas call costs tens of microseconds, more than the whole
    Python update of one node.
    """

    BATCH = 64  # completions at least this many go through GraphBLAS

    def __init__(self, size: int, sources: Sequence[int], targets: Sequence[int]) -> None:
        import graphblas as gb  # the optional extra; imported only when chosen

        self.size = size
        self._gb = gb
        matrix = gb.Matrix.from_coo(list(sources), list(targets), True, nrows=size, ncols=size, dtype=bool)
        transposed = matrix.T.new()
        self._matrix, self._transposed = matrix, transposed
        self._dependency_counts = matrix.reduce_columnwise(gb.agg.count).new()
        self._dependant_counts = matrix.reduce_rowwise(gb.agg.count).new()
        self._waiting = self._dependency_counts.to_dense(fill_value=0).tolist()
        self._holding = self._dependant_counts.to_dense(fill_value=0).tolist()
        offsets, flat, _ = matrix.to_csr()
        self._dependant_offsets, self._dependants = offsets.tolist(), flat.tolist()
        offsets, flat, _ = transposed.to_csr()
        self._dependency_offsets, self._dependencies = offsets.tolist(), flat.tolist()

    def _indices(self, vector: Any) -> List[int]:
        indices, _ = vector.to_coo(values=False)
        return indices.tolist()  # to_coo sorts by index

    def _vector(self, nodes: Sequence[int]) -> Any:
        return self._gb.Vector.from_coo(list(nodes), True, size=self.size, dtype=bool)

    def roots(self) -> List[int]:
        gb = self._gb
        roots = gb.Vector(bool, size=self.size)
        roots(~self._dependency_counts.S) << True
        return self._indices(roots)

    def dependant_counts(self) -> List[int]:
        return self._dependant_counts.to_dense(fill_value=0).tolist()

    def descendants(self, nodes: Sequence[int]) -> List[int]:
        gb = self._gb
        if not nodes:
            return []
        start = self._vector(nodes)
        seen = gb.Vector(bool, size=self.size)
        frontier = start
        while frontier.nvals:
            reached = gb.Vector(bool, size=self.size)
            reached(~seen.S, replace=True) << frontier.vxm(self._matrix, gb.semiring.any_pair[bool])
            seen(accum=gb.binary.lor) << reached
            frontier = reached
        below = gb.Vector(bool, size=self.size)
        below(~start.S) << seen
        return self._indices(below)

    def finish(self, nodes: Sequence[int]) -> Tuple[List[int], List[int]]:
        if len(nodes) < self.BATCH:
            return super().finish(nodes)
        gb = self._gb
        done = self._vector(nodes)
        plus_pair = gb.semiring.plus_pair[gb.dtypes.INT64]
        ready = _settle(self._waiting, done.vxm(self._matrix, plus_pair).new())  # per dependant: its deps done
        freed = _settle(self._holding, done.vxm(self._transposed, plus_pair).new())  # per dependency: dependants done
        return ready, freed


def _settle(counters: List[int], lost: Any) -> List[int]:
    """Subtract the sparse vector ``lost`` from ``counters``; the indices that reached zero, ascending."""
    indices, values = lost.to_coo()
    zero: List[int] = []
    for index, value in zip(indices.tolist(), values.tolist(), strict=True):
        counters[index] -= value
        if counters[index] == 0:
            zero.append(index)
    return zero
