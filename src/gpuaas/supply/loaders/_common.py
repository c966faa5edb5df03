"""Pieces every loader shares: stable GPU UUIDs, names checked like Kubernetes, file reading."""

from __future__ import annotations

import re
import uuid
from pathlib import Path

from gpuaas.supply.loaders.errors import FleetFileError

#: Node label recording the GPU model exactly as the source named it (a trace's ``V100M32``, a
#: Kubernetes ``NVIDIA-H100-80GB-HBM3``, an inventory's ``H100``); ``GPU.model`` holds the
#: catalogue's name. Workloads that name models the source's way (the trace's ``gpu_spec``) match
#: this label.
SOURCE_MODEL_LABEL = "gpuaas.io/source-gpu-model"
HOSTNAME_LABEL = "kubernetes.io/hostname"

#: Sanity bounds: a typo such as ``count: 80000`` or a quantity ``8E`` should be an error, not an
#: attempt to build billions of objects. Real servers have at most 16 GPUs; device plugins are
#: configured with tens of replicas.
MAX_GPUS_PER_NODE = 128
MAX_REPLICAS = 256

_GPU_NAMESPACE = uuid.UUID("6f1c3a52-2d7e-5b0a-9a53-0c2f4e7b9d11")
_NODE_NAME = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_LABEL_NAME = re.compile(r"^([A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)$")
_LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")


def gpu_uuid(node: str, index: int) -> str:
    """A UUID in nvidia-smi's ``GPU-...`` form, the same for the same node and index every run."""
    return f"GPU-{uuid.uuid5(_GPU_NAMESPACE, f'{node}/{index}')}"


def node_name_problem(name: str) -> str | None:
    """Why ``name`` is not a valid Kubernetes node name (RFC 1123 subdomain), or None."""
    if not name:
        return "must not be empty"
    if len(name) > 253:
        return f"must be at most 253 characters, got {len(name)}"
    if not _NODE_NAME.fullmatch(name):
        return (
            f"{name!r} is not a valid node name (lowercase letters, digits, '-' and '.'; "
            "starting and ending with a letter or digit)"
        )
    return None


def label_key_problem(key: str) -> str | None:
    """Why ``key`` is not a valid Kubernetes label key (``[prefix/]name``), or None."""
    prefix, _, name = key.rpartition("/")
    if prefix and (len(prefix) > 253 or node_name_problem(prefix) is not None):
        return f"label key {key!r} has an invalid prefix {prefix!r} (must be a DNS subdomain)"
    if not name or len(name) > 63 or not _LABEL_NAME.fullmatch(name):
        return (
            f"label key {key!r} is invalid (name part: 1-63 letters, digits, '-', '_' or '.', "
            "starting and ending with a letter or digit)"
        )
    return None


def label_value_problem(value: str) -> str | None:
    """Why ``value`` is not a valid Kubernetes label value, or None."""
    if len(value) > 63 or not _LABEL_VALUE.fullmatch(value):
        return (
            f"label value {value!r} is invalid (at most 63 letters, digits, '-', '_' or '.', "
            "starting and ending with a letter or digit)"
        )
    return None


def read_text(path: Path) -> str:
    """The file's text, or a FleetFileError that says why it cannot be read."""
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise FleetFileError(path, "no such file") from None
    except IsADirectoryError:
        raise FleetFileError(path, "is a directory, not a fleet file") from None
    except PermissionError:
        raise FleetFileError(path, "permission denied") from None
    except UnicodeDecodeError as exc:
        raise FleetFileError(path, f"not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    except OSError as exc:
        raise FleetFileError(path, f"cannot read: {exc.strerror or exc}") from None
