"""The SQLite vector half's owners' vectors kept in memory, one float32 matrix per owner
(and model and dimensions), checked against the owner's stamp on every search.

SQLite has no vector index: a search compares the query with every vector of the owner.
Read from the file each time, 2,000 memories' vectors (3 MB of blobs) cost most of a
search (issue 31: p50 64 ms at 2,000 memories per owner). Kept here, a search reads one
row, the owner's stamp (migration 0005_vector_stamps: its triggers give it a new value at
every change of the owner's embeddings, by any process), and reads the vectors again only
when it moved. Bounded by MAX_BYTES, least recently searched owner evicted first.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

# 64 MB: about 21 owners of 2,000 memories at 384 dimensions. Only a deployment with
# embeddings configured and searched fills it (numpy itself is imported lazily, issue 24).
MAX_BYTES = 64 * 1024 * 1024


@dataclass(frozen=True)
class OwnerVectors:
    """The owner's embeddings by one model as they were at `stamp`: row i of `matrix` is
    the unit vector of memory `ids[i]`, whose script is CJK when `cjk[i]` (centering)."""

    stamp: int
    ids: tuple[str, ...]
    matrix: npt.NDArray[np.float32]
    cjk: npt.NDArray[np.bool_]


Key = tuple[str, str, int]  # owner, model, dimensions


class VectorCache:
    """OwnerVectors by (owner, model, dimensions), least recently used first out."""

    def __init__(self, max_bytes: int = MAX_BYTES) -> None:
        self.max_bytes = max_bytes
        self._entries: OrderedDict[Key, OwnerVectors] = OrderedDict()
        self._bytes = 0
        # The engine's connections may run on more than one thread (aiosqlite's).
        self._lock = threading.Lock()

    def get(self, key: Key, stamp: int) -> OwnerVectors | None:
        """The owner's vectors if they are still those of `stamp`."""
        with self._lock:
            found = self._entries.get(key)
            if found is None or found.stamp != stamp:
                return None
            self._entries.move_to_end(key)
            return found

    def put(self, key: Key, vectors: OwnerVectors) -> None:
        with self._lock:
            self._drop(key)
            if vectors.matrix.nbytes > self.max_bytes:
                return
            self._entries[key] = vectors
            self._bytes += vectors.matrix.nbytes
            while self._bytes > self.max_bytes:
                _, evicted = self._entries.popitem(last=False)
                self._bytes -= evicted.matrix.nbytes

    def forget_owner(self, owner: str) -> None:
        """Drops every entry of `owner` (it has no embeddings any more)."""
        with self._lock:
            for key in [k for k in self._entries if k[0] == owner]:
                self._drop(key)

    @property
    def bytes(self) -> int:
        return self._bytes

    def _drop(self, key: Key) -> None:
        old = self._entries.pop(key, None)
        if old is not None:
            self._bytes -= old.matrix.nbytes
