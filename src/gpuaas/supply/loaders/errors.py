"""The one error every fleet loader raises, so the CLI can print it without a traceback."""

from __future__ import annotations

from os import PathLike

from gpuaas.model.errors import GpuaasError


class FleetFileError(GpuaasError):
    """A fleet file is missing, unreadable or wrong.

    The message reads ``FILE: ENTRY: FIELD: PROBLEM`` (empty parts left out), e.g.
    ``fleet.yaml: nodes[2] (h100-rack1-003): gpus.count: must be a positive integer, got -1``,
    so an operator can go straight to the line to fix.
    """

    def __init__(
        self,
        path: str | PathLike[str],
        problem: str,
        *,
        entry: str = "",
        field: str = "",
    ) -> None:
        self.path = str(path)
        self.entry = entry
        self.field = field
        self.problem = problem
        super().__init__(": ".join(part for part in (self.path, entry, field, problem) if part))
