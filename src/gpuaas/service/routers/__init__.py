"""Every router of the API, in the order they appear in the OpenAPI document."""

from gpuaas.service.routers import fleet, governance, health, identity, jobs, metrics

ROUTERS = [
    health.router,
    identity.router,
    fleet.router,
    governance.router,
    jobs.router,
    metrics.router,
]
