"""Request and response bodies of datasets (camelCase JSON); see docs/datasets.md."""

from __future__ import annotations

from pydantic import Field

from gpuaas.model.dataset import CacheRuntime, DatasetScheme
from gpuaas.service.models.common import bytes_schema
from gpuaas.service.models.identity import CamelIn, CamelOut, Text

_CHAR = "[^\\x00-\\x08\\x0b-\\x1f]"
_PATH_CHAR = "[^:/\\x00-\\x08\\x0b-\\x1f]"
#: ``<scheme>://<location>`` (a location not only slashes), or an absolute path in which no
#: ``:`` is followed by ``//`` (else its head would read as a scheme): ``check_uri``'s rule
URI_PATTERN = (
    f"^(({'|'.join(s.value for s in DatasetScheme)})://{_CHAR}*[^/\\x00-\\x08\\x0b-\\x1f]{_CHAR}*"
    f"|/([^:\\x00-\\x08\\x0b-\\x1f]|:+{_PATH_CHAR}|:+/{_PATH_CHAR})*(:+/?)?)$"
)
_BYTES_OR_NULL = {"anyOf": [*bytes_schema(zero=True)["anyOf"], {"type": "null"}]}


class DatasetIn(CamelIn):
    """A dataset as registered (on PUT the name may be left out: it comes from the path).

    ``size`` and ``cacheSize`` are bytes or a quantity (``500Gi``); ``cacheSize`` is the cache's
    capacity per node (0 or absent: the dataset's size)."""

    name: Text | None = Field(default=None, max_length=63)
    uri: Text = Field(min_length=1, max_length=4096, json_schema_extra={"pattern": URI_PATTERN})
    size: int | Text | None = Field(default=None, json_schema_extra=_BYTES_OR_NULL)
    runtime: CacheRuntime = CacheRuntime.ALLUXIO
    cache_size: int | Text | None = Field(default=None, json_schema_extra=_BYTES_OR_NULL)


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
