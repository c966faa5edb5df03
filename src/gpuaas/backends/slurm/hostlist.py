"""Slurm host lists: ``n[1-3,5]`` is n1, n2, n3, n5; ``gpu-[01-02]x`` keeps the padding.

Slurm writes node sets this way in every listing (a job's nodes, a partition's nodes, the
``Nodes=`` of ``scontrol show job -d``); gpuaas names nodes one by one.
"""

from __future__ import annotations

import re

_BRACKET = re.compile(r"\[([^\]]*)\]")


def expand(hostlist: str) -> list[str]:
    """Every host in ``hostlist``, in Slurm's order; ValueError on a malformed range."""
    hosts: list[str] = []
    for part in _split_top(hostlist):
        hosts.extend(_expand_one(part))
    return hosts


def _split_top(text: str) -> list[str]:
    """Split on commas outside brackets."""
    parts, depth, current = [], 0, ""
    for char in text.strip():
        if char == "[":
            depth += 1
        elif char == "]":
            depth -= 1
        if char == "," and depth == 0:
            parts.append(current)
            current = ""
        else:
            current += char
    if current:
        parts.append(current)
    return [p for p in parts if p]


def _expand_one(pattern: str) -> list[str]:
    found = _BRACKET.search(pattern)
    if found is None:
        return [pattern]
    head, tail = pattern[: found.start()], pattern[found.end() :]
    hosts: list[str] = []
    for item in found.group(1).split(","):
        low, _, high = item.partition("-")
        if not low.isdigit() or (high and not high.isdigit()):
            raise ValueError(f"not a Slurm host range: {item!r} in {pattern!r}")
        width = len(low)
        for number in range(int(low), int(high or low) + 1):
            for rest in _expand_one(tail):
                hosts.append(f"{head}{number:0{width}d}{rest}")
    return hosts
