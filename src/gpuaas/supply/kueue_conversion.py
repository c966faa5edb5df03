"""Older Kueue API versions converted to ``kueue.x-k8s.io/v1beta2``, as Kueue converts them.

Kueue users write ``kueue.x-k8s.io/v1beta1`` (the storage version up to Kueue 0.14) and, for
the Topology and Cohort kinds of Kueue 0.9 to 0.13, ``kueue.x-k8s.io/v1alpha1``. Kueue serves
them through its conversion webhook (``apis/kueue/v1beta1/*_conversion.go``); gpuaas applies the
same changes before loading, so that the stored and exported form is always v1beta2 and an old
file means here what Kueue makes of it:

- ClusterQueue ``spec.cohort`` becomes ``spec.cohortName``; ``spec.admissionChecks`` (a list of
  names, which v1beta1 had next to ``admissionChecksStrategy``) becomes
  ``spec.admissionChecksStrategy.admissionChecks[].name``; the deprecated
  flavor-fungibility values ``Borrow`` (whenCanBorrow) and ``Preempt`` (whenCanPreempt) become
  ``MayStopSearch``, their v1beta2 name.
- Cohort (v1alpha1 only) ``spec.parent`` becomes ``spec.parentName``; v1beta1 already writes
  ``parentName``.
- ResourceFlavor, LocalQueue, WorkloadPriorityClass and Topology specs are the same in both
  versions (they differ only in ``status``, which is runtime output and never loaded).

A field the old version does not have (``cohortName`` in a v1beta1 ClusterQueue) is refused by
name rather than guessed at, and :func:`as_written` lets an error about a converted field name
the field as the user wrote it.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

from gpuaas.model.errors import InvalidValue

GROUP = "kueue.x-k8s.io"
V1BETA2 = f"{GROUP}/v1beta2"
V1BETA1 = f"{GROUP}/v1beta1"
V1ALPHA1 = f"{GROUP}/v1alpha1"
#: Kinds each older version served (the ones gpuaas has a meaning for; other Kueue kinds are
#: converted by apiVersion only and refused by kind when loaded).
V1ALPHA1_KINDS = ("Cohort", "Topology")
#: v1beta1 name of each v1beta2 ClusterQueue spec field that was renamed.
_CQ_RENAMED = {"cohortName": "cohort", "admissionChecksStrategy": "admissionChecks"}
_DEPRECATED_FUNGIBILITY = {"whenCanBorrow": "Borrow", "whenCanPreempt": "Preempt"}


def is_older_version(api_version: object) -> bool:
    """Whether ``api_version`` is a Kueue version that :func:`to_v1beta2` converts."""
    return api_version in (V1BETA1, V1ALPHA1)


def to_v1beta2(obj: Mapping[str, Any], where: str) -> dict[str, Any]:
    """``obj`` as a v1beta2 object (a copy; ``obj`` itself is left alone). Objects of other API
    groups and v1beta2 objects come back unchanged."""
    out = copy.deepcopy(dict(obj))
    version = obj.get("apiVersion")
    if not is_older_version(version):
        return out
    kind = obj.get("kind")
    if version == V1ALPHA1 and kind not in V1ALPHA1_KINDS:
        raise InvalidValue(
            f"{where}: apiVersion",
            f"{kind} is not a {V1ALPHA1} kind (that version served only "
            f"{', '.join(V1ALPHA1_KINDS)}); write it as {V1BETA1} or {V1BETA2}",
        )
    out["apiVersion"] = V1BETA2
    spec = out.get("spec")
    if not isinstance(spec, dict):
        return out  # the loader reports a spec of the wrong shape
    if kind == "ClusterQueue":
        _cluster_queue(spec, f"{where}: spec")
    elif kind == "Cohort" and version == V1ALPHA1:
        _rename(spec, "parent", "parentName", f"{where}: spec", V1ALPHA1)
    return out


def _cluster_queue(spec: dict[str, Any], where: str) -> None:
    """Kueue's ``Convert_v1beta1_ClusterQueueSpec_To_v1beta2_ClusterQueueSpec``."""
    _rename(spec, "cohort", "cohortName", where, V1BETA1)
    if spec.get("admissionChecksStrategy") and spec.get("admissionChecks"):
        raise InvalidValue(
            f"{where}.admissionChecks",
            "cannot be set together with admissionChecksStrategy (Kueue refuses both)",
        )
    checks = spec.pop("admissionChecks", None)
    if checks:
        names = checks if isinstance(checks, list) else [checks]
        spec["admissionChecksStrategy"] = {"admissionChecks": [{"name": n} for n in names]}
    fungibility = spec.get("flavorFungibility")
    if isinstance(fungibility, dict):
        for key, old in _DEPRECATED_FUNGIBILITY.items():
            if fungibility.get(key) == old:
                fungibility[key] = "MayStopSearch"


def _rename(spec: dict[str, Any], old: str, new: str, where: str, version: str) -> None:
    if new in spec:
        raise InvalidValue(
            f"{where}.{new}", f"is not a {version} field (in {version} it is written {old!r})"
        )
    if old in spec:
        spec[new] = spec.pop(old)


def as_written(original: Mapping[str, Any], error: InvalidValue) -> InvalidValue:
    """``error`` (about the converted object) naming the field as ``original`` wrote it:
    ``spec.cohortName`` of a v1beta1 ClusterQueue is ``spec.cohort``, with a note of the
    conversion; an error about a field that was not renamed comes back as it is."""
    version, kind = original.get("apiVersion"), original.get("kind")
    spec = original.get("spec")
    written = spec if isinstance(spec, Mapping) else {}
    renamed: dict[str, str] = {}
    if version == V1BETA1 and kind == "ClusterQueue":
        renamed = {new: old for new, old in _CQ_RENAMED.items() if old in written}
    elif version == V1ALPHA1 and kind == "Cohort" and "parent" in written:
        renamed = {"parentName": "parent"}
    for new, old in renamed.items():
        marker = f"spec.{new}"
        if marker in error.field:
            return InvalidValue(
                error.field.replace(marker, f"spec.{old}", 1),
                f"{error.problem} ({version} spec.{old} is spec.{new} in {V1BETA2}, "
                "as Kueue converts it)",
            )
    return error
