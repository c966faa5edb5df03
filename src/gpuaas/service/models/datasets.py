"""Request and response bodies of datasets (camelCase JSON); see docs/datasets.md."""

from __future__ import annotations

from pydantic import Field

from gpuaas.service.models.identity import CamelIn, CamelOut, Text


class DatasetIn(CamelIn):
    """A dataset as registered (on PUT the name may be left out: it comes from the path).

    ``size`` and ``cacheSize`` are bytes or a quantity (``500Gi``); ``cacheSize`` is the cache's
    capacity per node (0 or absent: the dataset's size)."""

    name: Text | None = Field(default=None, max_length=63)
    uri: Text = Field(min_length=1, max_length=4096)
    size: int | Text | None = None
    runtime: Text = "alluxio"
    cache_size: int | Text | None = None


class CacheOut(CamelOut):
    """The dataset's cache on one node: ``warm`` (the files are there), ``loading`` (a preload
    waits for the reconciler) or ``failed`` (``error`` says why)."""

    node: str
    state: str
    source: str
    size_bytes: int
    warm_at: float | None
    used_at: float
    error: str = ""


class DatasetOut(CamelOut):
    name: str
    tenant: str
    uri: str
    scheme: str
    size: int = Field(description="bytes")
    runtime: str
    cache_size: int = Field(description="the cache's capacity per node in bytes (0: its size)")
    warm_nodes: list[str] = Field(default_factory=list, description="nodes that hold it warm")
    caches: list[CacheOut] = Field(default_factory=list)
    created_at: float
    updated_at: float


class PreloadIn(CamelIn):
    """Warm the dataset on ``nodes`` (node names of the fleet)."""

    nodes: list[Text] = Field(min_length=1, max_length=1000)
