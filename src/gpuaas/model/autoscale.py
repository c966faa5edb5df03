"""What a tenant-admin or the provider asks the autoscalers for.

- :class:`AutoscaleSpec`: a cluster scales its node pools between each pool's ``min_count``
  and ``max_count`` (the hard limit) on pending demand and on measured GPU utilisation against
  ``target_percent``; a node unneeded (both unallocated and measured below
  ``scale_in_below_percent``) for ``unneeded_seconds`` is released, at most
  ``disruption_budget`` nodes at a time, and never within ``cooldown_seconds`` of the last
  scale-out (hysteresis: scale-out above target, scale-in below a lower threshold); with
  ``stabilization_seconds`` a pool is never scaled in below the most nodes it needed within
  that window (HPA's scale-down stabilization, for nodes; 0: off).
- :class:`IdlePoolSpec`: the provider's idle-capacity pool: a cluster registered with an
  external marketplace that takes whole nodes idle for ``settle_seconds`` and gives them back
  when tenants need them, after a checkpoint signal and ``grace_seconds`` (at least 30).
- :class:`ReplicaScaling`: an inference job's replicas between ``min_replicas`` and
  ``max_replicas`` on GPU utilisation against ``target_percent``, within its cluster and then
  across the ``clusters`` listed when that one is full.

Bounds are checked where the values enter (the API models) and again here, so a spec built
in the simulator is held to the same rules.
"""

from __future__ import annotations

from dataclasses import dataclass

from gpuaas.model.errors import InvalidValue

#: The shortest grace period the pool gives a job before it is evicted, seconds.
MIN_POOL_GRACE = 30.0


def _percent(value: float, field: str) -> None:
    if not 0 < value <= 100:
        raise InvalidValue(field, f"must be above 0 and at most 100 (a percentage), got {value:g}")


@dataclass(frozen=True, slots=True)
class AutoscaleSpec:
    target_percent: float = 70.0
    scale_in_below_percent: float = 20.0
    unneeded_seconds: float = 600.0
    cooldown_seconds: float = 300.0
    disruption_budget: int = 1
    stabilization_seconds: float = 0.0

    def check(self, where: str = "autoscale") -> None:
        _percent(self.target_percent, f"{where}.targetUtilization")
        if not 0 <= self.scale_in_below_percent < self.target_percent:
            raise InvalidValue(
                f"{where}.scaleInBelow",
                f"must be at least 0 and below targetUtilization ({self.target_percent:g}), "
                f"got {self.scale_in_below_percent:g}",
            )
        if self.unneeded_seconds < 0:
            raise InvalidValue(f"{where}.unneededSeconds", "must not be negative")
        if self.cooldown_seconds < 0:
            raise InvalidValue(f"{where}.cooldownSeconds", "must not be negative")
        if self.disruption_budget < 1:
            raise InvalidValue(f"{where}.disruptionBudget", "must be at least 1")
        if not 0 <= self.stabilization_seconds <= 86400:
            raise InvalidValue(
                f"{where}.stabilizationSeconds",
                f"must be between 0 and 86400 s, got {self.stabilization_seconds:g}",
            )


@dataclass(frozen=True, slots=True)
class IdlePoolSpec:
    marketplace: str = ""
    settle_seconds: float = 300.0
    grace_seconds: float = MIN_POOL_GRACE
    max_nodes: int = 0  # 0 = no limit but the fleet

    def check(self, where: str = "idlePool") -> None:
        if self.grace_seconds < MIN_POOL_GRACE:
            raise InvalidValue(
                f"{where}.graceSeconds",
                f"must be at least {MIN_POOL_GRACE:g} s, got {self.grace_seconds:g}",
            )
        if self.settle_seconds < 0:
            raise InvalidValue(f"{where}.settleSeconds", "must not be negative")
        if self.max_nodes < 0:
            raise InvalidValue(f"{where}.maxNodes", "must not be negative")


@dataclass(frozen=True, slots=True)
class ReplicaScaling:
    min_replicas: int
    max_replicas: int
    target_percent: float = 70.0
    clusters: tuple[str, ...] = ()
    cooldown_seconds: float = 60.0

    def check(self, where: str = "autoscale") -> None:
        if self.min_replicas < 1:  # the job itself is its first replica
            raise InvalidValue(f"{where}.minReplicas", "must be at least 1 (the job itself)")
        if self.max_replicas < max(self.min_replicas, 1):
            raise InvalidValue(
                f"{where}.maxReplicas",
                f"must be at least minReplicas ({self.min_replicas}) and 1, "
                f"got {self.max_replicas}",
            )
        _percent(self.target_percent, f"{where}.targetUtilization")
        if self.cooldown_seconds < 0:
            raise InvalidValue(f"{where}.cooldownSeconds", "must not be negative")
