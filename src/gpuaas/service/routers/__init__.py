"""Every router of the API. Jobs come first: requests are matched against routes in order, and
job submission is the hot path."""

from gpuaas.service.routers import datasets, fleet, governance, health, identity, jobs, metrics

ROUTERS = [
    jobs.router,
    health.router,
    identity.router,
    fleet.router,
    governance.router,
    datasets.router,
    metrics.router,
]
