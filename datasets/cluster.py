"""Cluster descriptions for snapshots: accelerator types with counts, optional nodes."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from apportion.datasets.errors import ReadReport


@dataclass(frozen=True)
class NodeSpec:
    name: str
    accelerator_type: str
    devices: int
    cpus: float = 0.0
    memory_gib: float = 0.0


@dataclass(frozen=True)
class ClusterSpec:
    """Accelerator types in order, their device counts and (optionally) the nodes."""

    types: tuple[str, ...]
    counts: tuple[int, ...]
    nodes: tuple[NodeSpec, ...] = ()
    cost_per_hour: Mapping[str, float] = field(default_factory=dict)
    report: ReadReport | None = None

    def __post_init__(self) -> None:
        if len(self.types) != len(self.counts):
            raise ValueError("types and counts differ in length")
        if len(set(self.types)) != len(self.types):
            raise ValueError(f"duplicate accelerator type in {self.types}")

    @property
    def count(self) -> dict[str, int]:
        return dict(zip(self.types, self.counts, strict=True))

    @property
    def total(self) -> int:
        return sum(self.counts)

    @classmethod
    def from_counts(cls, counts: Mapping[str, int]) -> ClusterSpec:
        return cls(tuple(counts), tuple(int(c) for c in counts.values()))

    @classmethod
    def parse(cls, text: str) -> ClusterSpec:
        """ "v100:36,p100:36,k80:36" -> counts per type (order kept)."""
        counts: dict[str, int] = {}
        for part in text.split(","):
            name, sep, num = part.strip().partition(":")
            if not sep or not name or not num.strip().isdigit():
                raise ValueError(f"bad cluster spec {part!r}: expected TYPE:COUNT[,TYPE:COUNT...]")
            if name in counts:
                raise ValueError(f"bad cluster spec: type {name!r} given twice")
            counts[name] = int(num)
        return cls.from_counts(counts)

    @classmethod
    def parse_nodes(cls, text: str) -> ClusterSpec:
        """ "a100:4:8,t4:2:4" -> 4 nodes of 8 a100 and 2 nodes of 4 t4 (named a100-0, ...)."""
        nodes: list[NodeSpec] = []
        seen: set[str] = set()
        for part in text.split(","):
            fields = part.strip().split(":")
            if len(fields) != 3 or not fields[0] or not all(f.isdigit() for f in fields[1:]):
                raise ValueError(f"bad node spec {part!r}: expected TYPE:NODES:GPUS[,...]")
            name, count, devices = fields[0], int(fields[1]), int(fields[2])
            if name in seen:
                raise ValueError(f"bad node spec: type {name!r} given twice")
            if count < 1 or devices < 1:
                raise ValueError(f"bad node spec {part!r}: nodes and GPUs must be >= 1")
            seen.add(name)
            nodes += [NodeSpec(f"{name}-{n}", name, devices) for n in range(count)]
        return cls.from_nodes(nodes)

    @classmethod
    def from_nodes(cls, nodes: Sequence[NodeSpec], report: ReadReport | None = None) -> ClusterSpec:
        """Types in order of first appearance; counts = sum of node devices per type."""
        counts: dict[str, int] = {}
        for node in nodes:
            counts[node.accelerator_type] = counts.get(node.accelerator_type, 0) + node.devices
        return cls(tuple(counts), tuple(counts.values()), tuple(nodes), report=report)
