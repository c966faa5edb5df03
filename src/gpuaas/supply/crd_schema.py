"""Objects checked against the schema of a CustomResourceDefinition file, as the API server
would check them (without one): the CRD's ``openAPIV3Schema`` for a version, as JSON Schema.

Used by tests and tooling to validate exports offline (needs the ``jsonschema`` test extra).
What only a live API server checks (defaults, CEL ``x-kubernetes-validations``, webhooks) is
not checked here.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import yaml

from gpuaas.model.errors import GpuaasError, InvalidValue
from gpuaas.supply.kueue import _openapi_to_jsonschema


@functools.lru_cache(maxsize=32)
def crd_schema(path: str, version: str) -> dict[str, Any]:
    crd = yaml.safe_load(Path(path).read_text(encoding="utf-8"))
    for entry in crd["spec"]["versions"]:
        if entry["name"] == version:
            return entry["schema"]["openAPIV3Schema"]
    raise GpuaasError(f"{path}: no version {version}")


@functools.lru_cache(maxsize=32)
def _validator(path: str, version: str) -> Any:
    import jsonschema  # a test/tooling dependency

    return jsonschema.Draft7Validator(_openapi_to_jsonschema(crd_schema(path, version)))


def validate_against_crd(objects: Iterable[Mapping[str, Any]], path: str | Path) -> None:
    """Raise InvalidValue naming the object and the path of the first schema error; the version
    is the one in each object's apiVersion."""
    for obj in objects:
        version = str(obj["apiVersion"]).rpartition("/")[2]
        errors = sorted(_validator(str(path), version).iter_errors(obj), key=lambda e: list(e.path))
        if errors:
            where = ".".join(str(p) for p in errors[0].path)
            raise InvalidValue(
                f"{obj['kind']} {obj['metadata']['name']}: {where}", errors[0].message
            )
