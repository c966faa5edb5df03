"""Generated usage records for the billing tests (no database: the pure functions)."""

from __future__ import annotations

import random
from decimal import Decimal

from gpuaas.model.billing import UsageRecord

SKUS = {
    "H100-80GB/whole@on-demand": (1, Decimal("4.00"), Decimal("3.20")),
    "A100-40GB/mig/1g.5gb@on-demand": (2, Decimal("0.70"), Decimal("0.63")),
    "L40S/timeslice/4@on-demand": (3, Decimal("0.50"), Decimal("0.50")),
    "H100-80GB/whole@idle-pool": (4, Decimal("1.50"), Decimal("1.50")),
}


def records(
    n: int, start: float, tenants: int = 3, seed: int = 1, span: float = 30 * 86400
) -> list[UsageRecord]:
    """``n`` records of hour-aligned pieces within ``span`` seconds from ``start``."""
    rnd = random.Random(seed)
    out = []
    names = list(SKUS)
    for i in range(n):
        sku = rnd.choice(names)
        price, list_per_hour, per_hour = SKUS[sku]
        hour = start + rnd.randrange(int(span // 3600)) * 3600
        begin = hour + rnd.randrange(0, 3000)
        end = begin + rnd.randrange(1, 600)
        fraction = Decimal(1) if "timeslice" not in sku else Decimal("0.25")
        seconds = Decimal(int(end - begin)) * fraction
        out.append(
            UsageRecord(
                key=f"k{i}",
                tenant=f"t{rnd.randrange(tenants)}",
                user=f"u{rnd.randrange(4)}",
                queue=f"q{rnd.randrange(2)}",
                cluster="",
                job=rnd.randrange(50),
                attempt=0,
                pod="main-0",
                device=f"gpu-{rnd.randrange(8)}",
                node=f"n{rnd.randrange(4)}",
                sku=sku,
                start=begin,
                end=end,
                quantity=seconds,
                price=price,
                list_cost=seconds * list_per_hour / 3600,
                effective_cost=seconds * per_hour / 3600,
            )
        )
    return out
