"""The fleet screen: one row per host, sortable (`s`/`S`/`r`) and filterable (`/`), live.

Rows are keyed by the host's (job, instance); a refresh updates only the cells that
changed and rebuilds the rows only when the order or the set of shown hosts
changed, keeping the highlighted host. `Enter` opens the host screen.
"""

from __future__ import annotations

from datetime import date, datetime
from typing import ClassVar

from rich.text import Text
from textual import events
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.screen import Screen
from textual.widgets import DataTable, Input, Static
from textual.widgets.data_table import CellDoesNotExist

from gputui.core.fleet.model import FleetHost, FleetSnapshot
from gputui.core.safe_text import clean
from gputui.ui.fleet_status import FleetStatus, fleet_app
from gputui.ui.screens.fleet_view import COLUMNS, banner, host_cells, matches, sort_key, summary, update_cell
from gputui.ui.widgets.footer import FitFooter
from gputui.ui.widgets.host_table import HostTable


def row_key(host: FleetHost) -> str:
    return f"{host.job}\x00{host.instance}"


class FleetScreen(Screen[None]):
    DEFAULT_CSS = """
    FleetScreen { layout: vertical; }
    #fleet-banner { height: auto; background: $error 30%; padding: 0 1; display: none; }
    #fleet-banner.-shown { display: block; }
    #fleet-summary { height: 1; width: 1fr; padding: 0 1; }
    #fleet-hosts { height: 1fr; }
    #fleet-filter { display: none; height: 3; }
    #fleet-filter.-shown { display: block; }
    #fleet-warnings { height: auto; max-height: 3; color: $warning; padding: 0 1; display: none; }
    #fleet-warnings.-shown { display: block; }
    """

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("enter", "open_host", "Host", id="fleet-open"),
        Binding("slash", "filter", "Filter", id="fleet-filter"),
        Binding("s", "sort(1)", "Sort", id="fleet-sort"),
        Binding("S", "sort(-1)", "Sort back", show=False, id="fleet-sort-back"),
        Binding("r", "reverse", "Reverse", id="fleet-reverse"),
        Binding("R", "refresh", "Refresh", show=False, id="fleet-refresh"),
        Binding("escape", "clear_filter", "Clear filter", show=False, id="fleet-clear"),
        Binding("q", "app.quit", "Quit", id="fleet-quit"),
    ]

    def __init__(self) -> None:
        super().__init__()
        self.sort_column = "host"
        self.reverse = False
        self.needle = ""
        self._order: list[str] = []
        self._cells: dict[str, tuple[Text, ...]] = {}
        self._hosts: dict[str, FleetHost] = {}
        #: row key -> (the host drawn, its cells) at the last update
        self._drawn: dict[str, tuple[FleetHost, tuple[Text, ...]]] = {}
        self._drawn_day: date | None = None
        self._summary: Text | None = None
        #: `/` was pressed and the filter is being typed (keys may still reach the table first)
        self._typing = False
        self._banner: Text | None = None
        self._warnings: tuple[str, ...] = ()
        #: on_mount has run (the table has its columns)
        self._ready = False
        #: (the hosts of the snapshot last shown, the filter then)
        self._shown: tuple[tuple[FleetHost, ...] | None, str] = (None, "")

    def compose(self) -> ComposeResult:
        yield Static(id="fleet-banner")
        yield Static(summary(None, 0, ""), id="fleet-summary")
        table: DataTable[Text] = HostTable(id="fleet-hosts", cursor_type="row", zebra_stripes=True)
        yield table
        yield Input(placeholder="filter: host, user, container, alert… (Enter keeps it, Esc clears)", id="fleet-filter")
        yield Static(id="fleet-warnings")
        yield FitFooter()

    def on_mount(self) -> None:
        table = self.query_one("#fleet-hosts", DataTable)
        for key, heading in COLUMNS:
            # every heading keeps room for the sort mark: a column's width is set when it is added
            table.add_column(heading + (" ▲" if key == self.sort_column else "  "), key=key)
        table.focus()
        self._ready = True
        app = fleet_app(self)
        if app.snapshot is not None:
            self.update_fleet(app.snapshot)
        self.update_fleet_status(app.status)

    # -- data ------------------------------------------------------------------------
    def update_fleet(self, snap: FleetSnapshot, *, resort: bool = False) -> None:
        if not self._ready:  # a refresh that lands before on_mount: on_mount shows app.snapshot
            return
        now = fleet_app(self).now()
        if not resort and self._update_some(snap, now):
            return
        self._shown = (snap.hosts, self.needle)
        hosts = [h for h in snap.hosts if matches(h, self.needle)]
        hosts.sort(key=sort_key(self.sort_column), reverse=self.reverse)
        self._hosts = {row_key(h): h for h in snap.hosts}
        order = [row_key(h) for h in hosts]
        # a host that is the same object as at the last refresh (the reader keeps unchanged hosts)
        # draws the same cells: no need to look them up again
        day = datetime.fromtimestamp(now).date()  # a down host's "since" reads another way the next day
        drawn = self._drawn if day == self._drawn_day else {}
        cells: dict[str, tuple[Text, ...]] = {}
        kept: dict[str, tuple[FleetHost, tuple[Text, ...]]] = {}
        for k, h in zip(order, hosts, strict=True):
            last = drawn.get(k)
            row = cells[k] = last[1] if last is not None and last[0] is h else host_cells(h, now)
            kept[k] = (h, row)
        self._drawn, self._drawn_day = kept, day
        table = self.query_one("#fleet-hosts", DataTable)
        with self.app.batch_update():
            if resort or order != self._order:  # resort: new headings must be drawn even in the same order
                self._reorder(table, order, cells)
            else:
                self._update_cells(table, order, cells)
            self._order, self._cells = order, cells
            self._show_summary(snap)

    def _show_summary(self, snap: FleetSnapshot) -> None:
        # only when the text changed; one line whatever it says, so the screen is not laid out again
        # (a layout redraws every widget on it)
        line = summary(snap, len(self._order), self.needle)
        if line != self._summary:
            self._summary = line
            self.query_one("#fleet-summary", Static).update(line, layout=False)
        if snap.warnings != self._warnings:
            self._warnings = snap.warnings
            warnings = self.query_one("#fleet-warnings", Static)
            warnings.set_class(bool(snap.warnings), "-shown")
            warnings.update(Text(" ".join(clean(w) for w in snap.warnings)))

    def _update_some(self, snap: FleetSnapshot, now: float) -> bool:
        """A refresh that changed a few hosts and moved none: their rows updated, nothing else looked at
        (the reader keeps every unchanged host the same object, and most are unchanged). False when a
        host came or went, moved in the order or in or out of the filter, or the day changed."""
        last, needle = self._shown
        hosts = snap.hosts
        if last is None or needle != self.needle or len(last) != len(hosts):
            return False
        if datetime.fromtimestamp(now).date() != self._drawn_day:
            return False
        changed = [(old, h) for old, h in zip(last, hosts, strict=True) if old is not h]
        order = sort_key(self.sort_column)
        for old, h in changed:
            if old.key != h.key or order(old) != order(h) or matches(old, needle) != matches(h, needle):
                return False
        self._shown = (hosts, needle)
        if not changed:
            return True
        table = self.query_one("#fleet-hosts", DataTable)
        cells = dict(self._cells)
        shown = []
        with self.app.batch_update():
            for _, h in changed:
                k = row_key(h)
                self._hosts[k] = h
                if k in self._drawn:  # shown (not filtered out)
                    row = host_cells(h, now)
                    self._drawn[k] = (h, row)
                    cells[k] = row
                    shown.append(k)
            self._update_cells(table, shown, cells)
            self._cells = cells
            self._show_summary(snap)
        return True

    def _update_cells(self, table: DataTable, order: list[str], cells: dict[str, tuple[Text, ...]]) -> None:
        for k in order:
            old = self._cells.get(k)
            if old is cells[k]:
                continue  # the same cached row: nothing it shows changed
            for (col, _), value, before in zip(COLUMNS, cells[k], old or (), strict=False):
                if value is not before and value != before:
                    update_cell(table, k, col, value)

    def _reorder(self, table: DataTable, order: list[str], cells: dict[str, tuple[Text, ...]]) -> None:
        """New order or new set of rows: remove, add and update only what differs, then sort in place
        (a clear() and 200 add_row() per keypress cost a visible fraction of a second)."""
        selected = self.selected_key()
        wanted = set(order)
        for k in [k for k in self._order if k not in wanted]:
            table.remove_row(k)
        shown = set(self._order)
        self._update_cells(table, [k for k in order if k in shown], cells)
        for k in order:
            if k not in shown:
                table.add_row(*cells[k], key=k)
        position = {k: i for i, k in enumerate(order)}
        by_text = {cells[k][0].plain + "\x00" + k: k for k in order}
        # DataTable.sort hands the key function cell values, not row keys: the host cell is unique
        # (hostnames shared by two targets carry their instance), so it finds the row's position.
        host_position = {text.split("\x00", 1)[0]: position[k] for text, k in by_text.items()}
        table.sort("host", key=lambda cell: host_position.get(cell.plain, len(order)))
        if selected in position:
            table.move_cursor(row=position[selected], animate=False)
        elif order:
            table.move_cursor(row=0, animate=False)

    def update_fleet_status(self, status: FleetStatus) -> None:
        if not self._ready:
            return
        text = banner(status, fleet_app(self).now())
        if text == self._banner:
            return  # every refresh changes the status; the banner only when there is something to say
        self._banner = text
        widget = self.query_one("#fleet-banner", Static)
        widget.set_class(text is not None, "-shown")
        if text is not None:
            widget.update(text)

    def selected_key(self) -> str | None:
        table = self.query_one("#fleet-hosts", DataTable)
        if table.row_count == 0:
            return None
        try:
            return str(table.coordinate_to_cell_key(table.cursor_coordinate).row_key.value)
        except CellDoesNotExist:  # the cursor is past the rows a refresh just removed
            return None

    def selected_host(self) -> FleetHost | None:
        key = self.selected_key()
        return self._hosts.get(key) if key is not None else None

    def _redraw(self, resort: bool = False) -> None:
        snap = fleet_app(self).snapshot
        if snap is not None:
            self.update_fleet(snap, resort=resort)

    # -- keys ------------------------------------------------------------------------
    def on_data_table_row_selected(self, event: DataTable.RowSelected) -> None:
        event.stop()
        if self._typing:  # `/`, a filter and Enter arrived in one burst: Enter ends the filter
            self._end_typing()
            return
        self.action_open_host()

    def on_key(self, event: events.Key) -> None:
        """`/` and the keys typed right after it.

        A binding's action runs only after every key already read has gone to the focused widget,
        so with `/` as a plain binding a filter typed in one burst (a fast typist, a paste, tmux
        send-keys) would reach the table. `/` starts the filter here, at once, and the keys that
        still arrive at the table before the box takes focus are handed to the box."""
        if event.key == "slash" and not self._typing and not isinstance(self.focused, Input):
            event.stop()
            event.prevent_default()
            self.action_filter()
            return
        if not self._typing:
            return
        box = self.query_one("#fleet-filter", Input)
        if box.has_focus:
            return
        if event.key == "backspace":
            box.value = box.value[:-1]
        elif event.is_printable and event.character:
            box.value += event.character
        else:
            return
        box.cursor_position = len(box.value)
        event.stop()
        event.prevent_default()

    def _end_typing(self) -> None:
        self._typing = False
        if not self.needle:
            self.query_one("#fleet-filter", Input).remove_class("-shown")
            fleet_app(self).want_words(False)
        self.query_one("#fleet-hosts", DataTable).focus()

    def action_open_host(self) -> None:
        host = self.selected_host()
        if host is None:
            return
        from gputui.ui.screens.fleet_host import HostScreen

        self.app.push_screen(HostScreen(host.key))

    def action_filter(self) -> None:
        if self._typing:
            return
        box = self.query_one("#fleet-filter", Input)
        box.add_class("-shown")
        box.value = self.needle
        self._typing = True
        fleet_app(self).want_words(True)
        # Widget.focus takes effect later: keys typed right after `/` (a fast typist, a paste, tmux
        # send-keys) still reach the table, and on_key hands them to the box.
        box.focus()

    def on_input_changed(self, event: Input.Changed) -> None:
        if event.input.id == "fleet-filter":
            self.needle = event.value.strip()
            self._redraw()

    def on_input_submitted(self, event: Input.Submitted) -> None:
        if event.input.id == "fleet-filter":
            self._end_typing()

    def action_clear_filter(self) -> None:
        self._typing = False
        box = self.query_one("#fleet-filter", Input)
        box.remove_class("-shown")
        fleet_app(self).want_words(False)
        if self.needle:
            self.needle = ""
            box.value = ""
            self._redraw()
        self.query_one("#fleet-hosts", DataTable).focus()

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        # typing in the filter box: letters are text, not keys
        return not (isinstance(self.focused, Input) and action in ("sort", "reverse", "open_host", "filter", "refresh"))

    def action_sort(self, step: int) -> None:
        keys = [k for k, _ in COLUMNS]
        self.sort_column = keys[(keys.index(self.sort_column) + step) % len(keys)]
        self._headings()
        self._redraw(resort=True)

    def action_reverse(self) -> None:
        self.reverse = not self.reverse
        self._headings()
        self._redraw(resort=True)

    def action_refresh(self) -> None:
        fleet_app(self).refresh_now()

    def _headings(self) -> None:
        table = self.query_one("#fleet-hosts", DataTable)
        for key, heading in COLUMNS:
            mark = (" ▼" if self.reverse else " ▲") if key == self.sort_column else "  "
            table.columns[key].label = Text(heading + mark)  # type: ignore[index]  # ColumnKey hashes as its str
        table.refresh()
