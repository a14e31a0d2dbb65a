"""The live fleet screen's refresh asks Prometheus only for what changed since the last one
(:mod:`gputui.core.fleet.scrapes`). Against a real Prometheus: whatever changes — a host's figures,
a host going down and coming back, a target added to or dropped from the scrape configuration, a
scrape so slow its samples arrive after the next refresh has looked past them — shows in the first
refresh after Prometheus has it, exactly as a refresh that reads everything afresh shows it."""

from __future__ import annotations

import threading
import time

from gputui.core.fleet.prom import PromClient
from gputui.core.fleet.queries import STATIC_TTL, FleetReader
from gputui.core.fleet.scrapes import MARGIN
from gputui.core.fleet.summary import read_summary
from tests.fleet_exposition import GIB, Card, Host, StaticTarget, gputui_text


class HeldTarget(StaticTarget):
    """A StaticTarget whose answers can be held: while ``held`` is an unset Event, a scrape waits
    for it (``asked`` is set, ``asked_at`` says when the scrape came)."""

    def __init__(self, text: str) -> None:
        self.held: threading.Event | None = None
        self.asked = threading.Event()
        self.asked_at = 0.0
        super().__init__(text)

    @property  # type: ignore[override]
    def text(self) -> str:  # read by the handler for every scrape
        held = self.held
        if held is not None:
            self.asked_at = time.time()
            self.asked.set()
            held.wait(30)
        return self._text

    @text.setter
    def text(self, value: str) -> None:
        self._text = value


def page(name: str, used_gib: int, busy: bool = False, cards: int = 2) -> str:
    return gputui_text(Host(name, [Card(0, f"GPU-{name}-0", 0.9 if busy else 0.0, used_gib * GIB)] +
                            [Card(i, f"GPU-{name}-{i}", 0.0, GIB if i == 1 else 0) for i in range(1, cards)]))


def live_reader(url: str, clock: list[float]) -> FleetReader:
    reader = FleetReader(PromClient(url), clock=lambda: clock[0], parallel=False)
    reader.summary = read_summary
    return reader


def view(snap) -> dict:
    """What the host list shows of every host (an up host's newest sample time is not shown)."""
    return {h.key: (h.shown, h.up, None if h.up else h.last_seen, h.source, h.gpu_count, h.busy_gpus, h.lost_gpus,
                    h.memory_used, h.memory_total, h.hottest, h.note, h.problems, h.alerts, h.imbalance_flagged,
                    h.stale_gpu_memory) for h in snap.hosts}


def fresh(url: str, now: float):
    """A refresh that reads everything: a reader's first."""
    reader = live_reader(url, [now])
    try:
        return reader.read()
    finally:
        reader.close()


def host(snap, target: StaticTarget):
    return next(h for h in snap.hosts if h.instance == target.address)


def test_every_change_shows_in_the_next_refresh_as_a_fresh_read_shows_it(prometheus_factory):
    """Three hosts scraped every second among sixteen scraped every ten: a refresh reads again only
    the few scraped since the last (as over a large fleet), and builds again only those that changed."""
    a, b, c = (HeldTarget(page(f"node-{x}", 1)) for x in "abc")
    fillers = [StaticTarget(page(f"filler-{i:02d}", 1)) for i in range(16)]
    slow_job = ('  - job_name: "fillers"\n    scrape_interval: 10s\n    scrape_timeout: 10s\n    static_configs:\n'
                f'      - targets: [{", ".join(repr(f.address) for f in fillers)}]\n')
    try:
        prom = prometheus_factory([a.address, b.address], scrape_interval="1s", extra_config=slow_job)
        prom.wait_for("gputui_host_info", lambda r: len(r) == 18)
        clock = [time.time()]
        reader = live_reader(prom.url, clock)
        reader.read()

        def refresh():
            """The long-lived reader's next refresh, and a fresh read at the same time."""
            time.sleep(1.2)  # a refresh or two that see nothing new: what follows is the delta's to find
            clock[0] = time.time()
            reader.read()
            clock[0] = time.time()
            snap = reader.read()
            assert view(snap) == view(fresh(prom.url, clock[0]))
            return snap

        # figures change
        b.text = page("node-b", 5, busy=True)
        prom.wait_for(f'gputui_gpu_memory_used_bytes{{instance="{b.address}",gpu="0"}} == {5 * GIB}')
        snap = refresh()
        assert (host(snap, b).memory_used, host(snap, b).busy_gpus) == (6 * GIB, 1)
        # down (its page cannot be read: up is 0), then back
        b.text = "not { a metrics page\n"
        prom.wait_for(f'up{{instance="{b.address}"}} == 0')
        assert not host(refresh(), b).up
        b.text = page("node-b", 2)
        prom.wait_for(f'gputui_host_info{{instance="{b.address}"}}')
        snap = refresh()
        assert host(snap, b).up and host(snap, b).memory_used == 3 * GIB
        # a target added to the scrape configuration
        prom.targets_spec.append((c.address, {}))
        prom.reload()
        prom.wait_for(f'gputui_host_info{{instance="{c.address}"}}')
        snap = refresh()
        assert host(snap, c).up and host(snap, c).memory_used == 2 * GIB
        # an idle GPU more on it (the figures read every refresh stay the same): GPU models and sizes are
        # read again every STATIC_TTL seconds (not waited for here)
        c.text = page("node-c", 1, cards=3)
        prom.wait_for(f'gputui_gpu_info{{instance="{c.address}"}}', lambda r: len(r) == 3)
        reader._static_at -= STATIC_TTL
        snap = refresh()
        assert (host(snap, c).gpu_count, host(snap, c).memory_total) == (3, 240 * GIB)
        # a target dropped from it: its series end at once, and it is listed as gone
        prom.targets_spec = [t for t in prom.targets_spec if t[0] != a.address]
        prom.reload()
        prom.wait_for(f'up{{instance="{a.address}"}}', lambda r: not r)
        snap = refresh()
        assert not host(snap, a).up and host(snap, c).up
        reader.close()
    finally:
        for t in (a, b, c, *fillers):
            t.stop()


def test_a_scrape_slower_than_the_margin_still_shows_in_the_next_refresh(prometheus_factory):
    """A sample carries the time its scrape started, and becomes visible when the scrape ends: a
    refresh during a slow scrape looks past it. The counts and sums the refresh checks find it."""
    slow, other = HeldTarget(page("node-slow", 1)), HeldTarget(page("node-other", 1))
    release = threading.Event()
    try:
        prom = prometheus_factory([slow.address, other.address], scrape_interval="5s")
        prom.wait_for("gputui_host_info", lambda r: len(r) == 2)
        clock = [time.time()]
        reader = live_reader(prom.url, clock)
        reader.read()
        # its next scrape sends 7 GiB used, but is held until the refresh below has been
        slow.text = page("node-slow", 7)
        slow.asked.clear()
        slow.held = release
        assert slow.asked.wait(20)
        clock[0] = slow.asked_at + MARGIN + 0.5
        assert host(reader.read(), slow).memory_used == 2 * GIB  # not there yet
        slow.held = None
        release.set()
        prom.wait_for(f'gputui_gpu_memory_used_bytes{{instance="{slow.address}",gpu="0"}} == {7 * GIB}')
        clock[0] = max(time.time(), clock[0] + 0.1)
        snap = reader.read()
        assert host(snap, slow).memory_used == 8 * GIB
        assert view(snap) == view(fresh(prom.url, clock[0]))
        reader.close()
    finally:
        release.set()
        for t in (slow, other):
            t.stop()
