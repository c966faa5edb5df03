"""slurmrestd over a unix socket (``rest_auth/local``) or TCP with a JWT.

One :class:`SlurmRest` holds one HTTP connection pool. Every call either returns Slurm's
parsed answer, raises :class:`~gpuaas.backends.base.BackendUnavailable` when slurmrestd (or the
slurmctld behind it) cannot be reached, or raises :class:`SlurmRefused` with Slurm's own error
text when Slurm answered no. The API version is chosen once (:meth:`SlurmRest.capabilities`)
from what slurmrestd offers and what :mod:`.version` reads.
"""

from __future__ import annotations

from typing import Any

import httpx

from gpuaas.backends.base import BackendUnavailable
from gpuaas.backends.slurm.errors import SlurmRefused
from gpuaas.backends.slurm.version import (
    Capabilities,
    SlurmVersion,
    offered_apis,
    parse_release,
    pick_api,
)

#: Slurm's error codes that mean the controller is not reachable (not a refusal).
_UNREACHABLE_CODES = {1007, 1008, 1011, 5004}  # slurm_protocol / socket errors
_UNREACHABLE_WORDS = ("Unable to contact slurm controller", "Socket timed out", "Zero Bytes")


class SlurmRest:
    """``socket``: slurmrestd's unix socket; or ``url`` with ``user`` and ``token`` (JWT)."""

    def __init__(
        self,
        socket: str | None = None,
        url: str | None = None,
        user: str | None = None,
        token: str | None = None,
        timeout: float = 10.0,
    ) -> None:
        if not socket and not url:
            raise ValueError("give slurmrestd's socket or url")
        headers = {}
        if token:
            headers = {"X-SLURM-USER-NAME": user or "root", "X-SLURM-USER-TOKEN": token}
        transport = httpx.HTTPTransport(uds=socket) if socket else None
        self.where = f"unix:{socket}" if socket else str(url)
        self._http = httpx.Client(
            base_url=url or "http://slurmrestd", transport=transport, headers=headers,
            timeout=timeout,
        )  # fmt: skip
        self._caps: Capabilities | None = None

    def close(self) -> None:
        self._http.close()

    # --- plumbing ---------------------------------------------------------------------------

    def _call(self, method: str, path: str, **kwargs: Any) -> dict[str, Any]:
        try:
            response = self._http.request(method, path, **kwargs)
        except httpx.HTTPError as exc:
            raise BackendUnavailable(f"slurmrestd at {self.where}: {exc}") from exc
        try:
            body = response.json()
        except ValueError:
            body = {}
        errors = body.get("errors") if isinstance(body, dict) else None
        if response.status_code >= 400 or errors:
            problem = (
                "; ".join(str(e.get("error") or e.get("description") or e) for e in errors or [])
                or f"HTTP {response.status_code}: {response.text[:200]}"
            )
            codes = {e.get("error_number") or e.get("error_code") for e in errors or []}
            if (
                response.status_code in (502, 503, 504)
                or codes & _UNREACHABLE_CODES
                or any(word in problem for word in _UNREACHABLE_WORDS)
            ):
                raise BackendUnavailable(f"slurmrestd at {self.where}: {problem}")
            if response.status_code in (401, 403):
                raise BackendUnavailable(f"slurmrestd at {self.where} refused us: {problem}")
            raise SlurmRefused(problem)
        return body if isinstance(body, dict) else {}

    @property
    def api(self) -> str:
        return self.capabilities().api or "v0.0.38"

    def capabilities(self) -> Capabilities:
        """The Slurm release and the API version to use (asked once)."""
        if self._caps is None:
            spec = self._call("GET", "/openapi/v3")
            api = pick_api(offered_apis(list(spec.get("paths") or {})))
            if api is None:
                raise BackendUnavailable(
                    f"slurmrestd at {self.where} offers none of the API versions this backend "
                    "reads (v0.0.37, v0.0.38); use the command-line fallback"
                )
            ping = self._call("GET", f"/slurm/{api}/ping")
            self._caps = Capabilities(_release(ping), api)
        return self._caps

    # --- what the backend uses -------------------------------------------------------------

    def jobs(self) -> list[dict[str, Any]]:
        """Every job slurmctld still knows (finished ones until ``MinJobAge``): one call."""
        return list(self._call("GET", f"/slurm/{self.api}/jobs").get("jobs") or [])

    def cancel(self, slurm_id: int) -> None:
        try:
            self._call("DELETE", f"/slurm/{self.api}/job/{slurm_id}")
        except SlurmRefused as exc:
            if "already completed" in str(exc) or "Invalid job id" in str(exc):
                return  # gone already: what we wanted
            raise

    def nodes(self) -> dict[str, Any]:
        """slurmrestd's node listing (``{"nodes": [...]}``), as ``sinfo --json`` prints it."""
        return self._call("GET", f"/slurm/{self.api}/nodes")


def _release(answer: dict[str, Any]) -> SlurmVersion:
    meta = (answer.get("meta") or {}).get("Slurm") or {}
    if meta.get("release"):
        return parse_release(str(meta["release"]))
    version = meta.get("version") or {}
    return SlurmVersion(
        int(version.get("major", 0)), int(version.get("minor", 0)), int(version.get("micro", 0))
    )
