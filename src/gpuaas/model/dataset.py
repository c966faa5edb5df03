"""Datasets cached next to the GPUs that read them.

A tenant registers a dataset: where it lives (``s3://``, ``hdfs://``, ``nfs://``, ``file://``
or a plain absolute path), its size, and the cache that keeps it warm on compute nodes. On
Kubernetes the cache is a Fluid runtime (Alluxio, JuiceFS, Jindo, or Thin for a mount with no
cache of its own); on the local and Slurm backends a dataset is a path and "warm" means its
files are present on the node. A node is warm for a dataset when the backend reports it, a
job that read it completed there, or a preload ran there; placement prefers warm nodes
(:class:`DataLocality` ``preferred``) or insists on them (``required``).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


class DatasetScheme(StrEnum):
    S3 = "s3"
    HDFS = "hdfs"
    NFS = "nfs"
    FILE = "file"  # a local path (``file:///data/x`` or ``/data/x``)


class CacheRuntime(StrEnum):
    ALLUXIO = "alluxio"
    JUICEFS = "juicefs"
    JINDO = "jindo"
    THIN = "thin"


class DataLocality(StrEnum):
    PREFERRED = "preferred"
    REQUIRED = "required"


@dataclass(frozen=True, slots=True)
class Dataset:
    """A registered dataset: ``name`` is unique within ``tenant``; sizes in bytes."""

    name: str
    tenant: str
    uri: str
    size_bytes: int
    runtime: CacheRuntime = CacheRuntime.ALLUXIO
    cache_bytes: int = 0  # the cache's capacity per node; 0 = the dataset's size

    @property
    def scheme(self) -> DatasetScheme:
        head, sep, _ = self.uri.partition("://")
        return DatasetScheme(head) if sep else DatasetScheme.FILE


@dataclass(frozen=True, slots=True)
class DataRequest:
    """A workload reads ``dataset`` (its registered name within the workload's tenant)."""

    dataset: str
    locality: DataLocality = DataLocality.PREFERRED
