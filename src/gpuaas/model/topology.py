"""Topology: where a node sits (zone > block > rack > NVLink domain > node)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum


class Level(StrEnum):
    """A topology level, outermost first; the value is the node label that carries it."""

    ZONE = "topology.kubernetes.io/zone"
    BLOCK = "topology.gpuaas.io/block"
    RACK = "topology.gpuaas.io/rack"
    NVLINK = "nvidia.com/gpu.clique"
    HOSTNAME = "kubernetes.io/hostname"

    @property
    def short(self) -> str:
        return _SHORT[self]

    @classmethod
    def from_name(cls, name: str) -> Level:
        """Accept a short name (``rack``), an alias (``nvlink-domain``) or the label itself."""
        key = name.strip().lower().replace("_", "-")
        for level in cls:
            if key in (level.value.lower(), level.short) or key in _ALIASES.get(level, ()):
                return level
        raise ValueError(
            f"unknown topology level {name!r}; use one of {', '.join(lv.short for lv in cls)}"
        )


_SHORT = {
    Level.ZONE: "zone",
    Level.BLOCK: "block",
    Level.RACK: "rack",
    Level.NVLINK: "nvlink",
    Level.HOSTNAME: "hostname",
}
_ALIASES = {
    Level.NVLINK: ("nvlink-domain", "nvlinkdomain", "clique"),
    Level.HOSTNAME: ("node", "host"),
    Level.BLOCK: ("spine",),
}

#: Levels in order from the outermost to the innermost.
LEVELS: tuple[Level, ...] = (Level.ZONE, Level.BLOCK, Level.RACK, Level.NVLINK, Level.HOSTNAME)


@dataclass(frozen=True, slots=True)
class Topology:
    """A node's place in the network; an empty string means the level is not known."""

    zone: str = ""
    block: str = ""
    rack: str = ""
    nvlink_domain: str = ""

    def domain(self, level: Level, hostname: str) -> str:
        """Identifier of this node's domain at ``level``; empty when unknown."""
        if level is Level.ZONE:
            return self.zone
        if level is Level.BLOCK:
            return self.block
        if level is Level.RACK:
            return self.rack
        if level is Level.NVLINK:
            return self.nvlink_domain
        return hostname

    @classmethod
    def from_labels(cls, labels: Mapping[str, str]) -> Topology:
        """A node's place read from the levels' own labels (``topology.gpuaas.io/rack`` ...)."""
        return cls(
            zone=labels.get(Level.ZONE.value, ""),
            block=labels.get(Level.BLOCK.value, ""),
            rack=labels.get(Level.RACK.value, ""),
            nvlink_domain=labels.get(Level.NVLINK.value, ""),
        )

    def known(self) -> dict[str, str]:
        """The levels known, by the API's names (``zone``, ``block``, ``rack``,
        ``nvlinkDomain``): what a node's view and a bare-metal allocation show."""
        values = (
            ("zone", self.zone),
            ("block", self.block),
            ("rack", self.rack),
            ("nvlinkDomain", self.nvlink_domain),
        )
        return {key: value for key, value in values if value}

    def labels(self) -> dict[str, str]:
        values = {
            Level.ZONE: self.zone,
            Level.BLOCK: self.block,
            Level.RACK: self.rack,
            Level.NVLINK: self.nvlink_domain,
        }
        return {level.value: value for level, value in values.items() if value}
