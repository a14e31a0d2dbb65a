"""What the fleet screen's live refresh keeps from one refresh for the next
(:func:`gputui.core.fleet.summary.read_summary`; the reader holds it as ``FleetReader.kept``)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from gputui.core.fleet.model import FleetHost, FleetSnapshot
from gputui.core.fleet.prom import Sample

if TYPE_CHECKING:
    from gputui.core.fleet.scrapes import Targets

#: Static figures by (job, instance): numbers by name, and texts (GPU names) by name.
Figures = tuple[dict[tuple[str, str], dict[str, float]], dict[tuple[str, str], list[str]]]
#: Series by the target that sent them ((job, instance); None: a series without one).
Groups = dict[tuple[str, str] | None, list[Sample]]


class Kept:
    """What one refresh of the live screen keeps for the next (held by the reader, as ``reader.kept``):
    every target's ``up`` and hosts-query row, the summary and state series by host, the parsed static
    figures, the last snapshot, its hosts by key and their places."""

    __slots__ = ("targets", "pending", "groups", "static_figures", "last", "hosts", "jobs", "places", "labelled")

    def __init__(self) -> None:
        from gputui.core.fleet.scrapes import Targets  # scrapes reads the queries module, which reads this one

        self.targets: Targets = Targets()
        #: instances whose new rows a refresh that failed half-way did not read: read at the next
        self.pending: set[str | None] = set()
        self.groups: tuple[Groups, Groups] | None = None
        self.static_figures: Figures = ({}, {})
        self.last: FleetSnapshot | None = None
        self.hosts: dict[tuple[str, str], FleetHost] = {}
        #: every job label of a key in ``groups`` or the static figures
        self.jobs: set[str] = set()
        #: each host's place in ``last.hosts`` (None: not known)
        self.places: dict[tuple[str, str], int] | None = None
        #: some host of ``last`` is labelled with its instance (two share a hostname)
        self.labelled = False
