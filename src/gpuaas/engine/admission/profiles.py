"""Hardware profiles in use: a user's choice (profile + overrides) becomes a queued workload.

A user picks a :class:`~gpuaas.model.governance.HardwareProfile` ("1x H100, up to 32 cores")
and may override some amounts; :func:`profile_requests` fills in the defaults and enforces the
profile's bounds with an error that says which resource and which limit, and
:func:`profile_workload` builds the :class:`~gpuaas.model.governance.AdmissionWorkload` that goes
to the profile's LocalQueue in the tenant's namespace (refusing a tenant the profile does not
allow). Nothing here changes quota: the workload then queues like any other.
"""

from __future__ import annotations

from collections.abc import Mapping

from gpuaas.model.errors import InvalidValue
from gpuaas.model.governance import (
    AdmissionPodSet,
    AdmissionWorkload,
    Governance,
    HardwareProfile,
)
from gpuaas.model.quantity import Quantity
from gpuaas.model.resources import ResourceList, canonical_amount, describe_amount


def profile_requests(
    profile: HardwareProfile,
    overrides: Mapping[str, str | int | float | Quantity] | None = None,
) -> ResourceList:
    """Per-pod requests: every resource of the profile at its default unless overridden.

    Overrides are Kubernetes quantities (``"8"``, ``"64Gi"``, ``"500m"``) or canonical integers.
    Raises InvalidValue naming the profile and resource for a resource the profile does not offer
    or an amount outside ``[min, max]``.
    """
    offered = {r.name: r for r in profile.resources}
    out: ResourceList = {r.name: r.default for r in profile.resources}
    for resource, value in (overrides or {}).items():
        where = f"hardware profile {profile.name}: {resource}"
        bounds = offered.get(resource)
        if bounds is None:
            raise InvalidValue(
                where,
                f"not offered by this profile (it offers: {', '.join(sorted(offered))})",
            )
        amount = canonical_amount(resource, value, where)
        shown = describe_amount(resource, amount)
        if amount < bounds.minimum:
            raise InvalidValue(
                where, f"{shown} is below the minimum {describe_amount(resource, bounds.minimum)}"
            )
        if bounds.maximum is not None and amount > bounds.maximum:
            raise InvalidValue(
                where, f"{shown} is above the maximum {describe_amount(resource, bounds.maximum)}"
            )
        out[resource] = amount
    return {name: amount for name, amount in out.items() if amount > 0}


def usable_profile(gov: Governance, profile_name: str, tenant: str, where: str) -> HardwareProfile:
    """The profile ``profile_name`` if ``tenant`` may use it and has its LocalQueue; otherwise
    InvalidValue naming ``where`` and what is missing."""
    profile = gov.hardware_profiles.get(profile_name)
    if profile is None:
        known = ", ".join(sorted(gov.hardware_profiles)) or "none"
        raise InvalidValue(
            f"{where}: hardwareProfile",
            f"HardwareProfile {profile_name!r} does not exist (known: {known})",
        )
    if profile.allowed_tenants and tenant not in profile.allowed_tenants:
        raise InvalidValue(
            f"{where}: namespace",
            f"tenant {tenant} may not use hardware profile {profile.name} "
            f"(allowed: {', '.join(profile.allowed_tenants)})",
        )
    queue = profile.queue_for(tenant)
    if queue not in gov.local_queues:
        raise InvalidValue(
            f"{where}: hardwareProfile {profile.name}",
            f"tenant {tenant} has no LocalQueue {profile.local_queue} (looked for {queue})",
        )
    return profile


def profile_workload(
    gov: Governance,
    profile_name: str,
    tenant: str,
    name: str,
    *,
    count: int = 1,
    overrides: Mapping[str, str | int | float | Quantity] | None = None,
    priority: int = 0,
    created: float = 0.0,
    user: str | None = None,
) -> AdmissionWorkload:
    """The workload ``tenant`` submits with ``count`` pods of ``profile_name`` (see the module
    docstring); raises InvalidValue for an unknown profile, a tenant it does not allow, a
    missing LocalQueue or bad overrides."""
    profile = usable_profile(gov, profile_name, tenant, f"workload {name}")
    queue = profile.queue_for(tenant)
    if count < 1:
        raise InvalidValue(f"workload {name}: count", f"must be at least 1, got {count}")
    requests = profile_requests(profile, overrides)
    return AdmissionWorkload(
        name=name,
        queue=queue,
        pod_sets=(AdmissionPodSet("main", count, requests),),
        priority=priority,
        created=created,
        user=user,
    )
