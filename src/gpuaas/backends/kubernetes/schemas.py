"""Offline validation of manifests against the upstream schemas (no API server needed).

Core kinds (``batch/v1`` Job, ``resource.k8s.io/v1`` ResourceClaimTemplate, ...) are checked
against the Kubernetes 1.36 Swagger definitions (``kubernetes/derived_definitions_<gv>.json``
in the schema directory, see its SOURCES.md); custom resources (JobSet, Volcano Job, Kueue and
KAI kinds) against the ``openAPIV3Schema`` of the CRD's version, and their ``metadata`` against
the core ObjectMeta. Both are checked *strictly*: an object that names a field the schema does
not have is refused (the API server, with ``fieldValidation=Strict``, refuses it; with the
default it drops it with a warning, or a CRD prunes it, and the job would silently run
without it). What this cannot show: admission webhooks (Kueue's, Volcano's), CEL validation
rules of the CRDs (``x-kubernetes-validations``), defaulting, and whether the cluster has the
named queue, priority class, DeviceClass or device plugin resources. Needs ``jsonschema`` (a
test extra); imported only here.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import yaml

from gpuaas.model.errors import InvalidValue

#: apiVersion -> the derived definitions file and the definition prefix of its kinds.
CORE = {
    "v1": ("core.v1", "io.k8s.api.core.v1"),
    "batch/v1": ("batch.v1", "io.k8s.api.batch.v1"),
    "resource.k8s.io/v1": ("resource.v1", "io.k8s.api.resource.v1"),
    "scheduling.k8s.io/v1": ("scheduling.v1", "io.k8s.api.scheduling.v1"),
}
#: group -> the directory holding its CRDs.
CRD_DIRS = {
    "jobset.x-k8s.io": "jobset",
    "kueue.x-k8s.io": "kueue",
    "batch.volcano.sh": "volcano",
    "scheduling.volcano.sh": "volcano",
    "scheduling.run.ai": "kai-scheduler",
    "kai.scheduler": "kai-scheduler",
    # Cluster API and its providers (tenant clusters, backends/provisioners/capi_manifests.py)
    "cluster.x-k8s.io": "cluster-api",
    "controlplane.cluster.x-k8s.io": "cluster-api",
    "bootstrap.cluster.x-k8s.io": "cluster-api",
    "infrastructure.cluster.x-k8s.io": "cluster-api",
    "addons.cluster.x-k8s.io": "cluster-api",
    "sriovnetwork.openshift.io": "network",
    "k8s.cni.cncf.io": "network",
    "data.fluid.io": "fluid",
}
OBJECT_META = "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"


def validate(objects: Iterable[Mapping[str, Any]], schema_dir: str | Path) -> None:
    """Raise InvalidValue naming the object, the field path and the problem of the first
    object that does not match its schema."""
    for obj in objects:
        where = f"{obj.get('kind')} {obj.get('metadata', {}).get('name')}"
        api_version = str(obj.get("apiVersion", ""))
        kind = str(obj.get("kind", ""))
        _check(_validator(api_version, kind, str(schema_dir)), obj, where)
        if api_version not in CORE:
            _check(_core_validator("core.v1", OBJECT_META, str(schema_dir)), obj["metadata"],
                   f"{where}: metadata")  # fmt: skip


def _check(validator: Any, obj: Any, where: str) -> None:
    errors = sorted(validator.iter_errors(obj), key=lambda e: [str(p) for p in e.path])
    if errors:
        first = errors[0]
        path = ".".join(str(p) for p in first.path)
        raise InvalidValue(f"{where}: {path}" if path else where, first.message)


@functools.lru_cache(maxsize=64)
def _validator(api_version: str, kind: str, schema_dir: str) -> Any:
    if api_version in CORE:
        group_version, prefix = CORE[api_version]
        return _core_validator(group_version, f"{prefix}.{kind}", schema_dir)
    group, _, version = api_version.partition("/")
    directory = CRD_DIRS.get(group)
    if directory is None:
        raise InvalidValue("apiVersion", f"no schema known for {api_version}")
    for path in sorted((Path(schema_dir) / directory).glob(f"{group}_*.yaml")):
        crd = yaml.safe_load(path.read_text())
        if crd["spec"]["names"]["kind"] != kind:
            continue
        for v in crd["spec"]["versions"]:
            if v["name"] == version:
                return _draft(_strict_crd(v["schema"]["openAPIV3Schema"]))
    raise InvalidValue("kind", f"no CRD for {kind} in {api_version} under {schema_dir}")


@functools.lru_cache(maxsize=16)
def _definitions(group_version: str, schema_dir: str) -> dict[str, Any]:
    path = Path(schema_dir) / "kubernetes" / f"derived_definitions_{group_version}.json"
    definitions = json.loads(path.read_text())["definitions"]
    return {name: _strict_swagger(d) for name, d in definitions.items()}


@functools.lru_cache(maxsize=64)
def _core_validator(group_version: str, definition: str, schema_dir: str) -> Any:
    definitions = _definitions(group_version, schema_dir)
    if definition not in definitions:
        raise InvalidValue("kind", f"no definition {definition} in {group_version}")
    return _draft({"$ref": f"#/definitions/{definition}", "definitions": definitions})


def _draft(schema: Mapping[str, Any]) -> Any:
    import jsonschema  # a test/tooling dependency

    return jsonschema.Draft7Validator(schema)


def _strict_swagger(node: Any) -> Any:
    """Swagger 2.0 definitions: objects with properties admit no others; int-or-string and
    quantities (``format: int-or-string``) accept a number or a string."""
    if isinstance(node, list):
        return [_strict_swagger(n) for n in node]
    if not isinstance(node, dict):
        return node
    out = {k: _strict_swagger(v) for k, v in node.items() if not k.startswith("x-kubernetes")}
    if "properties" in node and "additionalProperties" not in node:
        out["additionalProperties"] = False
    if node.get("format") == "int-or-string":
        out.pop("type", None)
        out["anyOf"] = [{"type": "integer"}, {"type": "string"}]
    return out


def _strict_crd(node: Any) -> Any:
    """A CRD's OpenAPI v3 schema as strict JSON Schema (see :func:`_strict_swagger`); a node
    that preserves unknown fields stays open, and ``metadata`` is checked apart."""
    if isinstance(node, list):
        return [_strict_crd(n) for n in node]
    if not isinstance(node, dict):
        return node
    out = {k: _strict_crd(v) for k, v in node.items() if not k.startswith("x-kubernetes")}
    if node.get("x-kubernetes-int-or-string"):
        out.pop("anyOf", None)
        pattern = out.pop("pattern", None)
        string: dict[str, Any] = {"type": "string"}
        if pattern:
            string["pattern"] = pattern
        out["anyOf"] = [{"type": "integer"}, string]
    if (
        "properties" in node
        and "additionalProperties" not in node
        and not node.get("x-kubernetes-preserve-unknown-fields")
    ):
        out["additionalProperties"] = False
    return out
