"""Forms that show the API's own validation next to the field it names.

A :class:`Form` lists its fields, each with the API field path(s) it feeds (``api``, dotted as
in a problem document's ``errors``). The console never validates on its own: it sends what was
typed, and when the API answers 4xx, :meth:`Form.show` puts each error's message under the
field whose path it names (or above the form when it names none), and the page is answered
again with the typed values and the API's status: nothing was created, the API saw to that.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field

from gpuaas.service.console.api import Answer


@dataclass
class Field:
    name: str
    label: str
    kind: str = "text"  # text, number, select, textarea, password, checkbox, hidden
    api: tuple[str, ...] = ()
    value: str = ""
    options: tuple[tuple[str, str], ...] = ()  # (value, label) for a select
    help: str = ""
    required: bool = False
    min: str | None = None
    max: str | None = None
    step: str | None = None
    rows: int = 8
    error: str | None = None

    def paths(self) -> tuple[str, ...]:
        return self.api or (self.name,)


@dataclass
class Form:
    action: str
    fields: list[Field]
    submit: str = "Save"
    id: str = "form"
    errors: list[str] = field(default_factory=list)

    def __getitem__(self, name: str) -> Field:
        for f in self.fields:
            if f.name == name:
                return f
        raise KeyError(name)

    def fill(self, values: dict[str, str]) -> Form:
        for f in self.fields:
            if f.name in values:
                f.value = values[f.name]
            elif f.kind == "checkbox":
                f.value = ""
        return self

    def show(self, answer: Answer) -> Form:
        """The API's refusal on the form: each field error by its field, the rest on top."""
        placed = False
        for path, message in answer.field_errors:
            target = self._field_for(path)
            if target is None:
                self.errors.append(f"{path}: {message}" if path else message)
            else:
                target.error = f"{target.error}; {message}" if target.error else message
            placed = True
        if not placed:
            self.errors.append(answer.detail)
        return self

    def _field_for(self, path: str) -> Field | None:
        """The field fed by ``path``, or by its nearest parent (``resources.gpus`` falls to a
        field feeding ``resources``), or a field feeding a part of it."""
        path = re.sub(r"\[(\d+)\]", r".\1", path)  # podSets[0].x and podSets.0.x alike
        best: tuple[int, Field] | None = None
        for f in self.fields:
            for p in f.paths():
                if path == p:
                    return f
                if path.startswith(p + ".") or path.startswith(p + "["):
                    score = len(p)
                elif p.startswith(path + "."):
                    score = len(path)
                else:
                    continue
                if best is None or score > best[0]:
                    best = (score, f)
        return best[1] if best else None


def options(values: Iterable[str], blank: str | None = None) -> tuple[tuple[str, str], ...]:
    out = [("", blank)] if blank is not None else []
    return (*out, *((v, v) for v in values))
