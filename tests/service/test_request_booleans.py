"""A request body's boolean is JSON's true or false, as the OpenAPI document says: pydantic
would read ``1``, ``"yes"`` or ``"on"`` as true, so every boolean field of a request model is
strict (``StrictBool``), or has its own rule in the document (a budget's switches also take the
text ``"true"``/``"false"`` the CLI sends, and say so)."""

from __future__ import annotations

from types import UnionType
from typing import Annotated, Any, Union, get_args, get_origin

import pytest
from pydantic import BaseModel, ValidationError
from pydantic.types import Strict as StrictMarker

from gpuaas.service.app import create_app  # noqa: F401  (imports every request model)
from gpuaas.service.models.common import Strict
from gpuaas.service.models.identity import UserPatch
from gpuaas.service.models.jobs import NetworkSpec, VolumeMount


def _request_models() -> list[type[BaseModel]]:
    out, todo = [], [Strict]
    while todo:
        model = todo.pop()
        out.append(model)
        todo.extend(model.__subclasses__())
    return out


def _lax_bool(annotation: Any, metadata: list[Any]) -> bool:
    """Whether ``annotation`` takes a boolean pydantic reads laxly."""
    if annotation is bool:
        return not any(isinstance(m, StrictMarker) and m.strict for m in metadata)
    if get_origin(annotation) is Annotated:
        inner, *marks = get_args(annotation)
        return _lax_bool(inner, [*metadata, *marks])
    if get_origin(annotation) in (Union, UnionType):
        return any(_lax_bool(a, []) for a in get_args(annotation))
    return False


def test_every_request_boolean_is_strict() -> None:
    lax = [
        f"{model.__name__}.{name}"
        for model in _request_models()
        for name, field in model.model_fields.items()
        if _lax_bool(field.annotation, list(field.metadata)) and field.json_schema_extra is None
    ]
    assert lax == [], f"booleans pydantic reads laxly (1, 'yes'): {lax}"


@pytest.mark.parametrize("value", [1, 0, "yes", "true", "on", 1.0])
def test_booleans_refuse_what_is_not_true_or_false(value: Any) -> None:
    with pytest.raises(ValidationError):
        VolumeMount.model_validate({"name": "v", "mountPath": "/v", "readOnly": value})
    with pytest.raises(ValidationError):
        NetworkSpec.model_validate({"count": 0, "perGpu": value})
    with pytest.raises(ValidationError):
        UserPatch.model_validate({"disabled": value})
    assert UserPatch.model_validate({"disabled": True}).disabled is True
