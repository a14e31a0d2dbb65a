"""The fleet's host list: a DataTable whose lines are drawn from cached strips keyed on what they draw.

``DataTable`` keys its line caches on the cursor's place and on a count of every change to any
cell, so a cursor move, a scroll or a refresh that changed a few hosts of 2,000 drew every visible
row again through Rich (a ``Padding`` and ``Console.render_lines`` per cell), and every line then
went through Textual's per-widget line pass (a new :class:`Strip` with seven caches per line).
Here each row's line is built once from its cells and kept, keyed on the cells themselves (the
objects the screen hands in: a host that did not change keeps the same cells), the row's place
(zebra stripe, the cursor, the mouse), the column widths, the horizontal scroll and the styles;
a key that moves the cursor builds the two lines it leaves and enters, a scroll builds only the
rows it brings into view, and the lines go to the compositor as they are (see
:class:`~gputui.ui.widgets.lines.DirectLines`; the app's line filters are applied once per line
built, not once per frame). The table's data, cursor, sort, messages and mouse handling stay
DataTable's: the segments carry the same ``row``/``column`` meta its click and hover read.

Every row is one line high; anything else (row labels, fixed rows or columns, another cursor
type, a taller header) is drawn by DataTable's own code.
"""

from __future__ import annotations

from typing import Any, ClassVar

from rich.segment import Segment
from rich.style import Style
from rich.text import Text
from textual.binding import Binding, BindingType
from textual.geometry import Region
from textual.strip import Strip
from textual.widgets import DataTable
from textual.widgets.data_table import ColumnKey, RowKey

from gputui.ui.widgets.lines import release

#: A cell's text as it is drawn at a width: (text, style) pieces, cut or padded to that width.
_Pieces = tuple[tuple[str, Style | None], ...]
#: Cells' pieces kept (by cell and width) before the cache starts over.
CELL_CACHE_SIZE = 8192
#: Row lines kept before those out of view are dropped.
LINES_KEPT = 400


class _Frame:
    """What every line of one frame shares, looked up once per frame."""

    __slots__ = ("width", "scroll_x", "top", "widths", "cut", "hover", "cursor", "styles", "keys", "in_order",
                 "first_row", "blank", "looks")

    def __init__(self, table: HostTable) -> None:
        self.width = table.size.width
        self.scroll_x, scroll_y = table.scroll_offset
        self.top = round(scroll_y)
        columns = table.ordered_columns
        self.widths = tuple(column.get_render_width(table) for column in columns)
        self.cut = self.scroll_x < table.max_scroll_x
        self.hover = table.hover_coordinate.row if table._show_hover_cursor and table.show_cursor else None
        self.cursor = table.cursor_coordinate.row if table.show_cursor else None
        base = table.rich_style
        self.styles = (table._style_epoch, base, table._pseudo_class_state)
        self.keys = tuple(column.key for column in columns)
        #: a row's cells are its data's values in order (the columns were added in this order)
        self.in_order = self.keys == tuple(table.columns)
        #: the screen line of the first row
        self.first_row = 1 if table.show_header else 0
        self.blank = Strip.blank(self.width, base)
        #: (heading, cursor, hover) -> the styles a line of that kind is drawn in
        self.looks: dict[tuple[bool, bool, bool, int], tuple[Style, Style, Style]] = {}


class HostTable(DataTable[Text]):
    """The host list: Home and End go to the first and last host (a row table's own Home and End
    scroll sideways only), rows cut at the right edge say so, the list scrolls half a page when the
    cursor leaves it, and lines are drawn from cached strips (see the module's docstring)."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("home", "scroll_top", "First host", show=False),
        Binding("end", "scroll_bottom", "Last host", show=False),
    ]

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        #: row key -> (what its line draws, the line, the line as the app's filters leave it)
        self._lines: dict[RowKey, tuple[tuple[object, ...], Strip, Strip]] = {}
        self._heading: tuple[tuple[object, ...], Strip, Strip] | None = None
        #: (id of a cell, width) -> (the cell, its text cut or padded to the width in its own styles)
        self._pieces: dict[tuple[int, int], tuple[object, _Pieces]] = {}
        #: bumped when the styles change (theme, focus): every line drawn before is stale
        self._style_epoch = 0
        #: what every line of one frame shares, looked up once per frame (None outside a frame)
        self._frame: _Frame | None = None
        #: a row taller than one line was added: DataTable draws and places every row
        self._tall = False
        #: the last frame: (what it depends on, its lines by screen row, its cursor row, its mouse row)
        self._shown: tuple[tuple[object, ...], dict[int, Strip], int | None, int | None] | None = None

    # -- the data: a changed cell redraws its row only --------------------------------------
    def update_cell(self, row_key: RowKey | str, column_key: ColumnKey | str, value: Text, *,
                    update_width: bool = False) -> None:
        """DataTable's ``update_cell``, refreshing the row it is on instead of the whole table (the
        row's line is keyed on its cells, so only that line is built again)."""
        if update_width:  # a column widens: every row moves
            super().update_cell(row_key, column_key, value, update_width=True)
            return
        rk = RowKey(row_key) if isinstance(row_key, str) else row_key
        ck = ColumnKey(column_key) if isinstance(column_key, str) else column_key
        row = self._row_locations.get(rk)
        if row is None or ck not in self._column_locations:
            super().update_cell(rk, ck, value)  # raises CellDoesNotExist as DataTable does
            return
        self._data[rk][ck] = value
        self._update_count += 1
        self.refresh_row(row)

    def add_row(self, *cells: Any, height: int | None = 1, key: str | None = None, label: Any = None) -> RowKey:
        if height != 1:
            self._tall = True  # drawn by DataTable from now on
        return super().add_row(*cells, height=height, key=key, label=label)

    def _get_row_region(self, row_index: int) -> Region:
        """Where a row is: every row one line high, so no sum over the rows above (DataTable's own
        sums their heights, and rebuilds its ordered list of rows after every cell update)."""
        if self._tall or not 0 <= row_index < len(self._data):
            return super()._get_row_region(row_index)
        width = sum(column.get_render_width(self) for column in self.columns.values()) + self._row_label_column_width
        return Region(0, row_index + (self.header_height if self.show_header else 0), max(self.size.width, width), 1)

    def remove_row(self, row_key: RowKey | str) -> None:
        key = RowKey(row_key) if isinstance(row_key, str) else row_key
        gone = self._lines.pop(key, None)
        if gone is not None:
            release(gone[1:])
        super().remove_row(key)

    def clear(self, columns: bool = False) -> Any:
        self._drop_lines()
        return super().clear(columns)

    def notify_style_update(self) -> None:
        super().notify_style_update()
        self._style_epoch += 1
        self._drop_lines()

    def _drop_lines(self) -> None:
        self._shown = None
        for _, strip, filtered in self._lines.values():
            release((strip, filtered))
        self._lines.clear()
        if self._heading is not None:
            release(self._heading[1:])
            self._heading = None
        self._pieces.clear()

    # -- drawing ----------------------------------------------------------------------------
    def _simple(self) -> bool:
        """Whether every line is drawn here: one-line rows and header, a row cursor, nothing fixed."""
        return (self.cursor_type == "row" and not self._tall and self.fixed_rows == 0 and self.fixed_columns == 0
                and self.header_height == 1 and not (self._labelled_row_exists and self.show_row_labels)
                and not self._require_update_dimensions)

    def _direct(self) -> bool:
        """Whether the lines can go to the compositor as they are: nothing Textual's line pass would
        add (border, padding, outline, tint, opacity, hatch). Line filters are applied here."""
        styles = self.styles
        return (self._simple() and not self.BLANK and not any(styles.gutter)
                and not any(edge for edge, _ in styles.outline) and not styles.tint.a
                and styles.text_opacity == 1.0 and not (styles.has_rule("hatch") and styles.hatch != "none")
                and self.opacity == 1.0)

    def render_lines(self, crop: Region) -> list[Strip]:
        self._pseudo_class_state = self.get_pseudo_class_state()
        if not self._direct():
            return super().render_lines(crop)
        self._frame = frame = self._frame_state()
        try:
            filters = tuple(self.get_line_filters())
            background = self.background_colors[1]
            lines = self._frame_lines(frame, crop, filters, background)
        finally:
            self._frame = None
        if len(self._lines) > LINES_KEPT:
            self._forget_hidden(frame.top, self.size.height)
        need = self.scrollable_content_region.width  # a line may stop where a scrollbar starts, never sooner
        for i, line in enumerate(lines):
            if line.cell_length < need:
                lines[i] = line.adjust_cell_length(need, self.rich_style)
        x1, x2 = crop.column_span
        if x1 or x2 < self.size.width:
            lines = [line.crop(x1, x2) for line in lines]
        return lines

    def render_line(self, y: int) -> Strip:
        if not self._simple():
            return super().render_line(y)
        frame = self._frame or self._frame_state()
        return self._line(y, frame)[0]

    def _frame_lines(self, frame: _Frame, crop: Region, filters: tuple[Any, ...], background: Any) -> list[Strip]:
        """The lines of ``crop``. Textual asks for every line of the widget at each frame, also when a
        key changed two of them: a frame with the same data (DataTable counts every change to its rows,
        columns and order), geometry, styles and filters as the last takes the last frame's lines but
        for the heading and the rows the cursor and the mouse are on or were on."""
        key = (self._update_count, len(self._data), frame.width, frame.scroll_x, frame.top, frame.widths,
               frame.cut, frame.styles, filters, background)
        last = self._shown
        again: dict[int, Strip] = {}
        if last is not None and last[0] == key:
            again = last[1]
            for row in {last[2], last[3], frame.cursor, frame.hover}:
                if row is not None:
                    again.pop(row - frame.top + frame.first_row, None)
        shown: dict[int, Strip] = {}
        lines = []
        for y in crop.line_range:
            line = again.get(y) if y >= frame.first_row else None
            if line is None:
                line = self._filtered(y, filters, background)
            shown[y] = line
            lines.append(line)
        self._shown = (key, shown, frame.cursor, frame.hover)
        return lines

    def _forget_hidden(self, top: int, height: int) -> None:
        """Drop the lines of rows out of view (scrolling through 2,000 hosts would keep them all)."""
        shown = range(top, top + height)
        hidden = [key for key, (sig, _, _) in self._lines.items() if sig[1] not in shown]
        for key in hidden:
            release(self._lines.pop(key)[1:])

    def _frame_state(self) -> _Frame:
        return _Frame(self)

    def _filtered(self, y: int, filters: tuple[Any, ...], background: Any) -> Strip:
        frame = self._frame
        assert frame is not None
        strip, entry_key, entry = self._line(y, frame)
        if not filters:
            return strip
        if entry is None:  # a blank line past the last row
            for f in filters:
                strip = strip.apply_filter(f, background)
            return strip
        sig, line, filtered = entry
        if filtered is line or sig[-1] != (filters, background):
            filtered = line
            for f in filters:
                filtered = filtered.apply_filter(f, background)
            sig = (*sig[:-1], (filters, background))
            entry = (sig, line, filtered)
            if entry_key is None:
                self._heading = entry
            else:
                self._lines[entry_key] = entry
        return filtered

    def _line(self, y: int, frame: _Frame
              ) -> tuple[Strip, RowKey | None, tuple[tuple[object, ...], Strip, Strip] | None]:
        """The line at screen row ``y``: (line, its row key (None: the heading), its cache entry)."""
        if y < frame.first_row:
            row, key = -1, None
            cells: tuple[object, ...] = tuple(column.label for column in self.ordered_columns)
            entry = self._heading
        else:
            row = y + frame.top - frame.first_row
            found = self._row_locations.get_key(row) if 0 <= row < len(self._data) else None
            if found is None:
                return frame.blank, None, None
            key = found
            data = self._data[key]
            if frame.in_order and len(data) == len(frame.keys):
                cells = tuple(data.values())
            else:
                cells = tuple(data.get(k) for k in frame.keys)
            entry = self._lines.get(key)
        sig = (cells, row, row == frame.cursor, row == frame.hover, frame.widths, frame.width, frame.scroll_x,
               frame.cut, frame.styles)
        if entry is not None and entry[0][:-1] == sig:
            return entry[1], key, entry
        if entry is not None:
            release(entry[1:])
        strip = self._draw(row, cells, frame)
        entry = ((*sig, None), strip, strip)
        if key is None:
            self._heading = entry
        else:
            self._lines[key] = entry
        return strip, key, entry

    def _look(self, row: int, frame: _Frame) -> tuple[Style, Style, Style]:
        """(the cells' style, the style over their own, the style right of the last column) of a row."""
        heading, cursor, hover = row == -1, row == frame.cursor, row == frame.hover
        kind = (heading, cursor, hover, -1 if heading or not self.zebra_stripes else row % 2)
        look = frame.looks.get(kind)
        if look is None:
            row_style = self._get_row_style(row, frame.styles[1])
            component, post = self._get_styles_to_render_cell(
                heading, False, False, hover, cursor, self.show_cursor, self._show_hover_cursor,
                self.cursor_foreground_priority == "css", self.cursor_background_priority == "css")
            extend, _ = self._get_styles_to_render_cell(
                heading, False, False, hover, cursor, self.show_cursor, self._show_hover_cursor, False, False)
            look = frame.looks[kind] = (row_style + component, post, row_style + extend)
        return look

    def _draw(self, row: int, cells: tuple[object, ...], frame: _Frame) -> Strip:
        """One row's line, as DataTable draws it: each cell padded by a space each side in the row's
        style (zebra stripe or heading), the cursor's colours over the cells' own, the row's style
        to the right edge; then cropped at the horizontal scroll, "…" at the end when cut."""
        pre, post, extend = self._look(row, frame)
        width, widths = frame.width, frame.widths
        segments: list[Segment] = []
        pad = self.cell_padding
        gap = " " * pad
        for column, (cell, w) in enumerate(zip(cells, widths, strict=True)):
            style = pre + Style.from_meta({"row": row, "column": column})
            plain = style + post
            if pad:
                segments.append(Segment(gap, plain))
            for text, own in self._cell_pieces(cell, w - 2 * pad):
                segments.append(Segment(text, style + own + post if own is not None else plain))
            if pad:
                segments.append(Segment(gap, plain))
        segments.append(Segment(" " * max(0, width - sum(widths)),
                                extend + Style.from_meta({"row": row, "column": 0, "out_of_bounds": True})))
        strip = Strip(segments).crop(frame.scroll_x, frame.scroll_x + width).adjust_cell_length(
            width, frame.styles[1]).simplify()
        if frame.cut and width > 1 and strip.text.strip():
            last = list(strip.crop(width - 1, width))
            strip = Strip([*strip.crop(0, width - 1), Segment("…", last[-1].style if last else None)], width)
        return strip

    def _cell_pieces(self, cell: object, width: int) -> _Pieces:
        """A cell's text in its own styles, cut or padded to ``width`` cells (cached by cell and width:
        the entry holds the cell, so its id is not reused while the entry is kept)."""
        key = (id(cell), width)
        hit = self._pieces.get(key)
        if hit is not None and hit[0] is cell:
            return hit[1]
        if isinstance(cell, Text):
            text = cell
        elif isinstance(cell, str):
            text = Text.from_markup(cell)  # as DataTable reads a str cell
        elif isinstance(cell, float):
            text = Text(f"{cell:.2f}")
        else:
            text = Text("" if cell is None else str(cell))
        console = self.app.console
        line = list(text.render(console, end=""))
        if not text.spans and text.style:  # Text.render leaves the text's own style to its caller
            own = console.get_style(text.style)
            line = [Segment(s.text, own) for s in line]
        pieces = tuple((s.text, s.style) for s in Segment.adjust_line_length(line, max(0, width)) if s.text)
        if len(self._pieces) > CELL_CACHE_SIZE:
            self._pieces.clear()
        self._pieces[key] = (cell, pieces)
        return pieces

    # -- moving -----------------------------------------------------------------------------
    def _scroll_cursor_into_view(self, animate: bool = False) -> None:
        """When the cursor leaves the visible rows, scroll so it lands half a page in (vim's
        ``scrolljump``): a scroll redraws every row on screen and the terminal's every line, so
        holding Down at the edge of the 2,000-host list redraws the screen once every half page
        instead of at every key (in between, a key redraws the two rows the cursor leaves and
        enters). Every row is one line high."""
        if self.cursor_type != "row" or self._require_update_dimensions:
            super()._scroll_cursor_into_view(animate=animate)
            return
        view = self.scrollable_content_region.height - self._get_fixed_offset().top
        first, row = round(self.scroll_y), self.cursor_row
        if view <= 0 or first <= row < first + view:
            return
        if row >= first + view:  # below: the cursor half a page above the bottom edge
            target = row - view + 1 + view // 2
        else:
            target = row - view // 2
        self.scroll_to(y=max(0, min(target, round(self.max_scroll_y))), animate=False, force=True)
