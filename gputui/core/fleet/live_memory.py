"""What the fleet screen's live refresh keeps from one refresh for the next
(:func:`gputui.core.fleet.summary.read_summary`; the reader holds it as ``FleetReader.kept``)."""

from __future__ import annotations

from gputui.core.fleet.model import FleetHost, FleetSnapshot
from gputui.core.fleet.prom import Sample

#: Static figures by (job, instance): numbers by name, and texts (GPU names) by name.
Figures = tuple[dict[tuple[str, str], dict[str, float]], dict[tuple[str, str], list[str]]]
#: Series by the target that sent them ((job, instance); None: a series without one).
Groups = dict[tuple[str, str] | None, list[Sample]]


class Kept:
    """What one refresh of the live screen keeps for the next (held by the reader, as ``reader.kept``):
    each target's scrape stamp, the summary and state series by host, the parsed static figures, the
    last snapshot and its hosts by key."""

    __slots__ = ("stamps", "groups", "static_figures", "last", "hosts")

    def __init__(self) -> None:
        self.stamps: dict[object, object] = {}
        self.groups: tuple[Groups, Groups] | None = None
        self.static_figures: Figures = ({}, {})
        self.last: FleetSnapshot | None = None
        self.hosts: dict[tuple[str, str], FleetHost] = {}
