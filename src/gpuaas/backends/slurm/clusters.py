"""How a tenant cluster is named in Slurm: its partition, and its tenant's account (see
:mod:`gpuaas.backends.provisioners.slurm`, which makes them, and the backend, which submits
a cluster's jobs to them)."""

from __future__ import annotations

from typing import Protocol

_NO_ACCOUNTING = "accounting_storage/none"


class _Runs(Protocol):
    def run(self, *argv: str) -> str: ...


def partition_name(tenant: str, cluster: str) -> str:
    """The Slurm partition of tenant ``tenant``'s cluster ``cluster`` (names hold no dot)."""
    return f"gpuaas.{tenant}.{cluster}"


def account_name(tenant: str) -> str:
    """The Slurm account of a tenant's clusters where accounting is on."""
    return f"gpuaas-{tenant}"


def accounting_on(cli: _Runs) -> bool:
    """Whether slurmctld keeps accounting (``scontrol show config``)."""
    for line in cli.run("scontrol", "show", "config").splitlines():
        key, _, value = line.partition("=")
        if key.strip() == "AccountingStorageType":
            return value.strip() not in ("", _NO_ACCOUNTING)
    return False
