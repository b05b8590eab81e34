"""Topological bookkeeping of one task graph: who waits for whom, who still needs whom.

Nodes are numbered 0..size-1; an edge ``(d, n)`` says that node ``n`` needs the
result of node ``d``. A graph may grow while it runs (a graph sent in parts):
`extend` appends nodes whose dependencies are nodes already in the index or
appended with them. While the index is *open* (more parts may come), every
node counts one dependant more than it has, so nothing is freed before the
whole graph is known; `close` takes that count back. Two implementations
answer the same questions with the same results (tests run both on the same
graphs):

- `PythonGraphIndex`: adjacency lists and counters, plain Python;
- `GraphBLASGraphIndex`: the same, plus a sparse adjacency matrix in
  python-graphblas (the ``graphblas`` extra of scaler-scheduler); whole-graph
  questions (roots, everything downstream of a failure) and batched
  completions are sparse matrix-vector products.

`make_graph_index` picks GraphBLAS when it is installed (unless told otherwise).
Every list returned is sorted ascending, so both give identical answers.
"""

from __future__ import annotations

import importlib.util
from array import array
from typing import Any, List, Optional, Protocol, Sequence, Tuple


class GraphIndex(Protocol):
    size: int

    def extend(self, count: int, sources: Sequence[int], targets: Sequence[int]) -> List[int]:
        """Append ``count`` nodes and the edges ``sources[k] -> targets[k]`` (each target one of the new nodes,
        each source any node; unique pairs, no self-loops). Returns the new nodes all of whose dependencies
        have finished already (the roots among them included)."""

    def close(self) -> List[int]:
        """No more nodes will come: the finished nodes that no unfinished node needs any more (freed)."""

    def roots(self) -> List[int]:
        """Nodes that need no other node."""

    def dependant_counts(self) -> List[int]:
        """For each node, how many nodes need it."""

    def unfinished_dependants(self, node: int) -> int:
        """How many nodes that need ``node`` have not finished yet (one more while the index is open)."""

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
    size: int,
    sources: Sequence[int],
    targets: Sequence[int],
    use_graphblas: Optional[bool] = None,
    open: bool = False,
) -> GraphIndex:
    """The index of a graph whose edges are ``sources[k] -> targets[k]`` (unique pairs, no self-loops);
    ``open``: more nodes may come (`GraphIndex.extend`), until `GraphIndex.close`."""
    if use_graphblas is None:
        use_graphblas = graphblas_available()
    if use_graphblas:
        return GraphBLASGraphIndex(size, sources, targets, open)
    return PythonGraphIndex(size, sources, targets, open)


class PythonGraphIndex:
    def __init__(self, size: int, sources: Sequence[int], targets: Sequence[int], open: bool = False) -> None:
        self.size = 0
        self._open = open
        self._dependants: List[List[int]] = []
        self._dependencies: List[List[int]] = []
        self._waiting: List[int] = []  # unfinished dependencies
        self._holding: List[int] = []  # unfinished dependants (one more while open)
        self._done = bytearray()
        self.extend(size, sources, targets)

    def extend(self, count: int, sources: Sequence[int], targets: Sequence[int]) -> List[int]:
        start = self.size
        self.size += count
        dependants, dependencies, holding, done = self._dependants, self._dependencies, self._holding, self._done
        dependants.extend([[] for _ in range(count)])
        dependencies.extend([[] for _ in range(count)])
        holding.extend([1 if self._open else 0] * count)
        done.extend(bytes(count))
        waiting = [0] * count
        for source, target in zip(sources, targets, strict=True):
            dependants[source].append(target)
            dependencies[target].append(source)
            holding[source] += 1
            if not done[source]:
                waiting[target - start] += 1
        self._waiting.extend(waiting)
        return [start + k for k, left in enumerate(waiting) if left == 0]

    def close(self) -> List[int]:
        if not self._open:
            return []
        self._open = False
        holding, done = self._holding, self._done
        freed = []
        for node in range(self.size):
            holding[node] -= 1
            if holding[node] == 0 and done[node]:
                freed.append(node)
        return freed

    def roots(self) -> List[int]:
        return [node for node, needed in enumerate(self._dependencies) if not needed]

    def dependant_counts(self) -> List[int]:
        return [len(dependants) for dependants in self._dependants]

    def unfinished_dependants(self, node: int) -> int:
        return self._holding[node]

    def descendants(self, nodes: Sequence[int]) -> List[int]:
        dependants = self._dependants
        start = set(nodes)
        seen = set()
        stack = list(start)
        while stack:
            node = stack.pop()
            for dependant in dependants[node]:
                if dependant not in seen:
                    seen.add(dependant)
                    stack.append(dependant)
        return sorted(seen - start)

    def finish(self, nodes: Sequence[int]) -> Tuple[List[int], List[int]]:
        ready: List[int] = []
        freed: List[int] = []
        waiting, holding, done = self._waiting, self._holding, self._done
        dependants, dependencies = self._dependants, self._dependencies
        for node in nodes:
            done[node] = 1
            for dependant in dependants[node]:
                waiting[dependant] -= 1
                if waiting[dependant] == 0:
                    ready.append(dependant)
            for dependency in dependencies[node]:
                holding[dependency] -= 1
                if holding[dependency] == 0:
                    freed.append(dependency)
        ready.sort()
        freed.sort()
        return ready, freed


class GraphBLASGraphIndex(PythonGraphIndex):
    """The same bookkeeping, with the graph also held as a GraphBLAS adjacency matrix (``A[d, n]`` set when n
    needs d).

    GraphBLAS finds the roots, walks everything downstream of a failure, and
    settles batches of completions (cancel and failure cascades) as sparse
    matrix-vector products. A completion of a few nodes (the usual result
    batch) is settled on the adjacency lists, as `PythonGraphIndex` does: each
    python-graphblas call costs tens of microseconds, more than the whole
    Python update of one node. A graph that grows gets its matrix rebuilt (in
    GraphBLAS) when a question next needs it, not with each part: a graph taken
    in many parts (or slices) is not rebuilt once per part.
    """

    BATCH = 64  # completions at least this many go through GraphBLAS

    def __init__(self, size: int, sources: Sequence[int], targets: Sequence[int], open: bool = False) -> None:
        import graphblas as gb  # the optional extra; imported only when chosen

        self._gb = gb
        self._sources: array = array("q")
        self._targets: array = array("q")
        self._built: Optional[Tuple[Any, Any, Any]] = None  # the matrices, made again when next asked for
        super().__init__(size, sources, targets, open)

    def extend(self, count: int, sources: Sequence[int], targets: Sequence[int]) -> List[int]:
        ready = super().extend(count, sources, targets)
        self._sources.extend(sources)
        self._targets.extend(targets)
        self._built = None
        return ready

    def _matrices(self) -> Tuple[Any, Any, Any]:
        """The adjacency matrix, its transpose, and how many nodes each node needs (as a vector)."""
        if self._built is None:
            gb, size = self._gb, self.size
            matrix = gb.Matrix.from_coo(self._sources, self._targets, True, nrows=size, ncols=size, dtype=bool)
            self._built = (matrix, matrix.T.new(), matrix.reduce_columnwise(gb.agg.count).new())
        return self._built

    def _indices(self, vector: Any) -> List[int]:
        indices, _ = vector.to_coo(values=False)
        return indices.tolist()  # to_coo sorts by index

    def _vector(self, nodes: Sequence[int]) -> Any:
        return self._gb.Vector.from_coo(list(nodes), True, size=self.size, dtype=bool)

    def roots(self) -> List[int]:
        gb = self._gb
        roots = gb.Vector(bool, size=self.size)
        roots(~self._matrices()[2].S) << True
        return self._indices(roots)

    def dependant_counts(self) -> List[int]:
        return self._matrices()[0].reduce_rowwise(self._gb.agg.count).new().to_dense(fill_value=0).tolist()

    def descendants(self, nodes: Sequence[int]) -> List[int]:
        gb = self._gb
        if not nodes:
            return []
        matrix = self._matrices()[0]
        start = self._vector(nodes)
        seen = gb.Vector(bool, size=self.size)
        frontier = start
        while frontier.nvals:
            reached = gb.Vector(bool, size=self.size)
            reached(~seen.S, replace=True) << frontier.vxm(matrix, gb.semiring.any_pair[bool])
            seen(accum=gb.binary.lor) << reached
            frontier = reached
        below = gb.Vector(bool, size=self.size)
        below(~start.S) << seen
        return self._indices(below)

    def finish(self, nodes: Sequence[int]) -> Tuple[List[int], List[int]]:
        if len(nodes) < self.BATCH:
            return super().finish(nodes)
        gb = self._gb
        matrix, transposed, _ = self._matrices()
        for node in nodes:
            self._done[node] = 1
        done = self._vector(nodes)
        plus_pair = gb.semiring.plus_pair[gb.dtypes.INT64]
        ready = _settle(self._waiting, done.vxm(matrix, plus_pair).new())  # per dependant: its deps done
        freed = _settle(self._holding, done.vxm(transposed, plus_pair).new())  # per dependency: dependants done
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
