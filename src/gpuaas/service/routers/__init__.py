"""Every router of the API. Jobs come first: requests are matched against routes in order, and
job submission is the hot path."""

from gpuaas.service.routers import (
    audit,
    clusters,
    datasets,
    fleet,
    fleet_view,
    governance,
    health,
    identity,
    invoices,
    jobs,
    metrics,
    network,
    usage,
    utilisation,
)

ROUTERS = [
    jobs.router,
    health.router,
    identity.router,
    fleet.router,
    fleet_view.router,
    governance.router,
    clusters.router,
    datasets.router,
    invoices.router,
    metrics.router,
    network.router,
    audit.router,
    utilisation.router,
    usage.router,
]
