"""Errors that name what was wrong, so a user can fix it without a traceback."""


class GpuaasError(Exception):
    """Base of every error gpuaas reports to a user."""


class InvalidValue(GpuaasError, ValueError):
    """A value is malformed; the message names the field and the problem."""

    def __init__(self, field: str, problem: str) -> None:
        self.field = field
        self.problem = problem
        super().__init__(f"{field}: {problem}" if field else problem)
