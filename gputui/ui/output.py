"""Send the terminal only what changed: a cell model between Textual's output and the tty.

Textual repaints a widget's whole region when anything in it changes, and it
writes every style run as ``ESC[0m ESC[<full style>m text ESC[0m``. Over ssh
that was ~33 KB a second for the dashboard, most of it cells the terminal
already showed and resets between runs of the same background.

:class:`ScreenDiff` reads the byte stream Textual writes (cursor moves, SGR,
text, line feeds: the whole vocabulary of its renderer) into ``want``, a grid
of (character, style) cells, and keeps ``have``, the grid the terminal shows.
After each write it compares the two over the rows that were written and sends,
per row, only the runs of cells that differ (runs a few cells apart are joined:
rewriting them is cheaper than another cursor move), with each style change
sent as the shortest delta from the terminal's current style. The clock in the
header therefore costs the digits that moved, not the header line.

Anything it does not model is passed through in order: terminal modes, cursor
shape and visibility, queries and clipboard are harmless; a sequence that could
change cells it does not track (erase, scroll, insert, hyperlinks, alternate
screen, anything unknown) is passed through as written and the model forgets
what the terminal shows, so the next frame is sent in full where it is drawn. A
change of the terminal's size forgets it too (a terminal may truncate or reflow
its cells), and so does the start of application mode.

The result on the terminal is cell for cell what Textual's own stream would
give (tests/test_output.py replays both into tmux and compares
``capture-pane -e``).
"""

from __future__ import annotations

import re
from bisect import bisect_left
from itertools import groupby

from rich.cells import get_character_cell_size

#: A style: (attribute bits, foreground, background, other SGR parameters).
Pen = tuple[int, str, str, tuple[str, ...]]
DEFAULT_PEN: Pen = (0, "", "", ())

#: Unchanged cells between two changed runs that are rewritten rather than skipped with a cursor move.
JOIN_GAP = 4

_TOKEN = re.compile(
    r"\x1b\[(?P<params>[0-?]*)(?P<inter>[ -/]*)(?P<final>[@-~])"  # CSI
    r"|\x1b\](?P<osc>[^\x07\x1b]*)(?:\x07|\x1b\\)"  # OSC, ended by BEL or ST
    r"|(?P<ctl>[\x00-\x1f\x7f])"  # C0 controls (and a lone or unknown ESC)
    r"|(?P<text>[^\x00-\x1f\x7f]+)",
    re.DOTALL,
)
#: An escape sequence cut at the end of a write (kept until the next one).
_PARTIAL = re.compile(r"\x1b(?:\[[0-?]*[ -/]*|\][^\x07\x1b]*(?:\x1b)?)?\Z")

_ESC = re.compile(r"\x1b.?", re.DOTALL)
#: A cursor position (row;column), where Textual starts each strip.
_CUP_SPLIT = re.compile(r"\x1b\[(\d+);(\d+)H")
#: A strip: only styles and text on one row, perhaps a line feed at the end.
_SIMPLE_BODY = re.compile(r"(?:\x1b\[[0-9;]*m|[^\x00-\x1f\x7f])*\r?\n?")
#: A strip exactly as Textual renders one: runs of ``ESC[<style>m text ESC[0m`` or unstyled text.
_STRIP_BODY = re.compile(r"(?:\x1b\[[0-9;]*m[^\x00-\x1f\x7f]*\x1b\[0m|[^\x00-\x1f\x7f])*(\r?\n?)")
_STRIP_RUNS = re.compile(r"\x1b\[([0-9;]*)m([^\x00-\x1f\x7f]*)\x1b\[0m|([^\x00-\x1f\x7f]+)")
#: Characters one cell wide each (ASCII, Latin, punctuation, arrows, maths, box drawing, blocks,
#: shapes): a run of only these needs no width lookup per character.
_NARROW = re.compile(r"[\x20-\x7e\xa0-\u02ff\u2010-\u2027\u2030-\u205e\u2190-\u22ff\u2500-\u25fc]*")

SYNC_START, SYNC_END = "\x1b[?2026h", "\x1b[?2026l"

# SGR attribute codes -> bit, and the code that clears each group of bits.
_ATTR_BITS = {"1": 1, "2": 2, "3": 4, "4": 8, "5": 16, "6": 32, "7": 64, "8": 128, "9": 256, "21": 512,
              "51": 1024, "52": 2048, "53": 4096}
_BIT_CODES = {bit: code for code, bit in _ATTR_BITS.items()}
_ATTR_OFF = {"22": 1 | 2, "23": 4, "24": 8 | 512, "25": 16 | 32, "27": 64, "28": 128, "29": 256,
             "54": 1024 | 2048, "55": 4096}
_OFF_GROUPS = [(bits, code) for code, bits in _ATTR_OFF.items()]

# Private modes whose switch changes what the screen shows (alternate screens).
_SCREEN_MODES = {"?47", "?1047", "?1049"}
# CSI finals that never touch cells or the cursor: modes, queries, window and keyboard protocols.
_HARMLESS_FINALS = {"h", "l", "n", "c", "t", "u", "p", "q"}


def _parse_sgr(pen: Pen, params: str) -> Pen:
    """``pen`` after ``ESC[<params>m``."""
    attrs, fg, bg, extra = pen
    parts = params.split(";") if params else ["0"]
    i, n = 0, len(parts)
    while i < n:
        p = parts[i]
        if p in ("0", ""):
            attrs, fg, bg, extra = DEFAULT_PEN
        elif p in _ATTR_BITS:
            attrs |= _ATTR_BITS[p]
        elif p in _ATTR_OFF:
            attrs &= ~_ATTR_OFF[p]
        elif p in ("38", "48") and i + 1 < n and parts[i + 1] in ("5", "2"):
            width = 3 if parts[i + 1] == "5" else 5
            color = ";".join(parts[i:i + width])
            if p == "38":
                fg = color
            else:
                bg = color
            i += width - 1
        elif p == "39":
            fg = ""
        elif p == "49":
            bg = ""
        elif len(p) == 2 and p[0] in "34" and p[1] in "01234567":
            if p[0] == "3":
                fg = p
            else:
                bg = p
        elif len(p) in (2, 3) and p.isdigit() and (90 <= int(p) <= 97 or 100 <= int(p) <= 107):
            if int(p) < 100:
                fg = p
            else:
                bg = p
        else:  # an underline colour, a colon sub-parameter, ...: kept and sent as written
            extra = (*extra, p)
        i += 1
    return attrs, fg, bg, extra


def _pen_codes(pen: Pen) -> list[str]:
    attrs, fg, bg, extra = pen
    codes = [code for bit, code in _BIT_CODES.items() if attrs & bit]
    if fg:
        codes.append(fg)
    if bg:
        codes.append(bg)
    codes.extend(extra)
    return codes


#: sgr_delta's answers: a screen has few distinct styles, and every changed run asks again.
_DELTAS: dict[tuple[Pen | None, Pen], str] = {}


def sgr_delta(old: Pen | None, new: Pen) -> str:
    """The shortest SGR sequence that turns the terminal's style ``old`` (None: unknown) into ``new``."""
    key = (old, new)
    known = _DELTAS.get(key)
    if known is None:
        if len(_DELTAS) > 4096:
            _DELTAS.clear()
        known = _DELTAS[key] = _sgr_delta(old, new)
    return known


def _sgr_delta(old: Pen | None, new: Pen) -> str:
    full = "\x1b[" + ";".join(["0", *_pen_codes(new)]) + "m" if new != DEFAULT_PEN else "\x1b[0m"
    if old is None or old[3] != new[3]:
        return full
    o_attrs, o_fg, o_bg, _ = old
    n_attrs, n_fg, n_bg, _ = new
    codes: list[str] = []
    removed = o_attrs & ~n_attrs
    readd = 0
    for bits, code in _OFF_GROUPS:
        if removed & bits:
            codes.append(code)
            readd |= n_attrs & bits  # the off code clears the whole group
    for bit, code in _BIT_CODES.items():
        if bit & ((n_attrs & ~o_attrs) | readd):
            codes.append(code)
    if n_fg != o_fg:
        codes.append(n_fg or "39")
    if n_bg != o_bg:
        codes.append(n_bg or "49")
    delta = "\x1b[" + ";".join(codes) + "m"
    return delta if len(delta) < len(full) else full


#: What was drawn at a place (see ``ScreenDiff._line_cache``).
_Drawn = tuple[str, int, list[str | None], list[int], tuple[int, int, int], tuple[list[int], list[int]] | None]


class ScreenDiff:
    """Turns Textual's output into the smallest output that leaves the terminal showing the same cells."""

    def __init__(self, size: tuple[int, int] = (80, 24)) -> None:
        self.width, self.height = size
        self._pens: dict[Pen, int] = {DEFAULT_PEN: 0}
        self._pen_list: list[Pen] = [DEFAULT_PEN]
        self._pending = ""
        self._sgr_cache: dict[tuple[int, str], int] = {}
        #: A strip's style run (SGR parameters, styled text, plain text) -> its cells (see ``_strip``).
        self._run_cells: dict[tuple[str, str, str], tuple[list[str], list[int], str]] = {}
        #: (row, column, style) -> (body, end column, its cells' characters and styles, state after it,
        #: where its style runs start if it was read as a strip: see ``_strip``)
        self._line_cache: dict[tuple[int, int, int], _Drawn] = {}
        # The stream's state (what Textual believes).
        self._x = self._y = 0
        self._pen = 0
        self._cursor_visible = False
        # Output state: what the terminal shows and where its cursor and style are (None: unknown).
        self._out_x: int | None = None
        self._out_y: int | None = None
        self._out_pen: Pen | None = None
        self._sync_pending = self._sync_open = False
        self.forget()

    # -- what the terminal shows ------------------------------------------------------
    def forget(self) -> None:
        """The terminal's cells, cursor and style are no longer known: the next frame is sent in full."""
        w, h = self.width, self.height
        self.want_chars: list[list[str | None]] = [[None] * w for _ in range(h)]
        self.want_pens: list[list[int]] = [[-1] * w for _ in range(h)]
        self.have_chars: list[list[str | None]] = [[None] * w for _ in range(h)]
        self.have_pens: list[list[int]] = [[-1] * w for _ in range(h)]
        self._dirty: dict[int, list[int]] = {}
        self._line_cache = {}
        self._out_x = self._out_y = None
        self._out_pen = None

    def resize(self, size: tuple[int, int]) -> None:
        if size != (self.width, self.height):
            self.width, self.height = size
            self.forget()

    # -- input --------------------------------------------------------------------------
    def feed(self, data: str) -> str:
        """What to send the terminal for ``data`` (one of Textual's writes)."""
        data = self._pending + data
        self._pending = ""
        out: list[str] = []
        pieces = _CUP_SPLIT.split(data)
        self._tokens(out, pieces[0])
        for i in range(1, len(pieces), 3):
            self._positioned(out, int(pieces[i]) - 1, int(pieces[i + 1]) - 1, pieces[i + 2])
        self._flush(out)
        if out and self._cursor_visible:
            self._move(out, self._x, self._y)
        return "".join(out)

    def _positioned(self, out: list[str], y: int, x: int, body: str) -> None:
        """What follows a cursor position: Textual rewrites the same strip at the same place most frames.

        A body seen before at this place, whose cells still hold what it drew then, would draw
        nothing new: it is skipped without being parsed (most of a frame's lines, and the reason
        the model costs less CPU than the bytes it saves). A body that starts as the one drawn
        there before (a table row whose SM % moved) is read from the first style run that differs.
        """
        self._x, self._y = x, y
        key = (y, x, self._pen)
        cache = self._line_cache
        hit = cache.get(key)
        marks = None
        if hit is not None:
            if hit[0] == body:
                _, end, chars, pens, state, _ = hit
                if self.want_chars[y][x:end] == chars and self.want_pens[y][x:end] == pens:
                    self._x, self._y, self._pen = state
                    return
            elif self._pen == 0:
                marks = self._resume(body, y, x, hit)
        if marks is None and self._pen == 0:
            self._x = x
            marks = self._strip(body)
        if marks is None:
            self._tokens(out, body)
        if (0 <= y < self.height and 0 <= x < self.width and not self._pending
                and (marks is not None or _SIMPLE_BODY.fullmatch(body) is not None)):
            end = min(self._x, self.width)
            cache[key] = (body, end, self.want_chars[y][x:end], self.want_pens[y][x:end],
                          (self._x, self._y, self._pen), marks)

    def _resume(self, body: str, y: int, x: int, hit: _Drawn) -> tuple[list[int], list[int]] | None:
        """Draw ``body`` from the last style run it shares with the strip drawn at (``x``, ``y``) before;
        None when that cannot be done (nothing shared, or the cells there were drawn over since)."""
        old, end, chars, pens, _, marks = hit
        if marks is None:
            return None
        offsets, cells = marks
        shared = _common_prefix(old, body)
        # From the run before the last one that starts before the first difference: that one is the
        # same, but its last cell may hold a zero-width mark the next run opened with (see _cells_of).
        i = bisect_left(offsets, shared) - 2
        if i <= 0 or not 0 <= y < self.height:
            return None
        c = cells[i]
        if x + c > end or self.want_chars[y][x:x + c] != chars[:c] or self.want_pens[y][x:x + c] != pens[:c]:
            return None
        self._x = x + c
        return self._strip(body, offsets[i], offsets[:i], cells[:i], c)

    def _strip(self, body: str, pos: int = 0, offsets: list[int] | None = None, cells: list[int] | None = None,
               cell: int = 0) -> tuple[list[int], list[int]] | None:
        """Draw a body rendered the way Textual renders a strip, without tokenising it; None if it is not one.

        A changed line mostly repeats the style runs it had (borders, labels, units): each run's
        cells are remembered, so only the runs that really changed are looked at character by character.
        Read from ``pos`` (a run's start, ``cell`` cells into the body) when the cells before it are drawn
        already. Returns where each run starts: (offsets in the body, cells from the body's first cell).
        """
        m = _STRIP_BODY.fullmatch(body, pos)
        if m is None:
            return None
        offsets = [] if offsets is None else offsets
        cells = [] if cells is None else cells
        chars: list[str] = []
        pens: list[int] = []
        known = self._run_cells
        at = pos
        for run in _STRIP_RUNS.findall(body, pos):
            found = known.get(run)
            if found is None:
                if len(known) > 4096:
                    known.clear()
                found = known[run] = self._cells_of(*run)
            run_chars, run_pens, lead = found
            if lead:
                if not chars:  # belongs to a cell drawn before this read: read the whole body instead
                    if pos:
                        return None
                else:
                    chars[-1] += lead
            offsets.append(at)
            cells.append(cell + len(chars))
            at += len(run[2]) if run[2] else len(run[0]) + len(run[1]) + 7
            chars.extend(run_chars)
            pens.extend(run_pens)
        self._put(chars, pens)
        ending = m.group(1)
        if ending.startswith("\r"):
            self._x = 0
        if ending.endswith("\n"):
            self._y += 1
        return offsets, cells

    def _cells_of(self, params: str, styled: str, plain: str) -> tuple[list[str], list[int], str]:
        """One style run of a strip as cells: (characters, styles, zero-width characters that open the run
        and so belong to the previous run's last cell)."""
        text = plain or styled
        pen = self._pen_for(params) if not plain else 0
        if _NARROW.fullmatch(text) is not None:
            return list(text), [pen] * len(text), ""
        chars: list[str] = []
        lead = ""
        for ch in text:
            size = get_character_cell_size(ch)
            if size == 0:
                if chars:
                    chars[-1] += ch
                else:
                    lead += ch
                continue
            chars.append(ch)
            if size == 2:
                chars.append("")
        return chars, [pen] * len(chars), lead

    def _pen_for(self, params: str) -> int:
        """The style ``ESC[<params>m`` sets after a reset."""
        key = (0, params)
        known = self._sgr_cache.get(key)
        if known is None:
            pen = _parse_sgr(DEFAULT_PEN, params)
            known = self._pens.get(pen, -1)
            if known < 0:
                known = self._pens[pen] = len(self._pen_list)
                self._pen_list.append(pen)
            self._sgr_cache[key] = known
        return known

    def _put(self, chars: list[str], pens: list[int]) -> None:
        """Cells at the stream's cursor, which moves past them."""
        y, x, n = self._y, self._x, len(chars)
        self._x = x + n
        if not 0 <= y < self.height:
            return
        x0, x1 = max(x, 0), min(x + n, self.width)
        if x0 >= x1:
            return
        self.want_chars[y][x0:x1] = chars[x0 - x:x1 - x]
        self.want_pens[y][x0:x1] = pens[x0 - x:x1 - x]
        span = self._dirty.get(y)
        if span is None:
            self._dirty[y] = [x0, x1]
        else:
            span[0] = min(span[0], x0)
            span[1] = max(span[1], x1)

    def _tokens(self, out: list[str], data: str) -> None:
        pos, end = 0, len(data)
        match = _TOKEN.match
        while pos < end:
            m = match(data, pos)
            if m is None or (m.lastgroup == "ctl" and data[pos] == "\x1b"):
                if _PARTIAL.match(data, pos):
                    self._pending = data[pos:]
                    break
                # A lone ESC or a sequence this model does not know: pass it, forget the cells.
                m2 = _ESC.match(data, pos)
                assert m2 is not None
                self._passthrough(out, m2.group(), forget=True)
                pos = m2.end()
                continue
            pos = m.end()
            kind = m.lastgroup
            if kind == "text":
                self._text(m.group())
            elif kind == "params" or kind == "inter" or kind == "final":
                self._csi(out, m.group(), m.group("params"), m.group("inter"), m.group("final"))
            elif kind == "osc":
                osc = m.group("osc")
                self._passthrough(out, m.group(), forget=osc.startswith("8;"))
            else:  # a control character
                c = m.group()
                if c == "\n":
                    self._y += 1
                elif c == "\r":
                    self._x = 0
                elif c == "\x08":
                    self._x = max(0, self._x - 1)
                elif c == "\x07":
                    self._passthrough(out, c, forget=False)
                else:
                    self._passthrough(out, c, forget=True)

    def _csi(self, out: list[str], seq: str, params: str, inter: str, final: str) -> None:
        if final == "m" and not inter:
            key = (self._pen, params)
            known = self._sgr_cache.get(key)
            if known is not None:
                self._pen = known
                return
            pen = _parse_sgr(self._pen_list[self._pen], params)
            self._pen = self._pens.get(pen, -1)
            if self._pen < 0:
                self._pen = self._pens[pen] = len(self._pen_list)
                self._pen_list.append(pen)
            self._sgr_cache[key] = self._pen
        elif final == "H" and not inter:
            row, _, col = params.partition(";")
            self._y = int(row or 1) - 1
            self._x = int(col or 1) - 1
        elif seq == SYNC_START:
            self._flush(out)
            self._sync_pending = True
        elif seq == SYNC_END:
            self._flush(out)
            if self._sync_open:
                out.append(seq)
            self._sync_pending = self._sync_open = False
        elif final in "hl" and params in ("?25",):
            self._cursor_visible = final == "h"
            self._passthrough(out, seq, forget=False)
        elif final in _HARMLESS_FINALS and not (final in "hl" and params in _SCREEN_MODES):
            self._passthrough(out, seq, forget=False)
        else:
            self._passthrough(out, seq, forget=True)

    def _passthrough(self, out: list[str], seq: str, forget: bool) -> None:
        self._flush(out)
        self._open_sync(out)
        if forget:
            if self._out_pen != DEFAULT_PEN:
                out.append("\x1b[0m")  # Textual's stream assumes a reset style between its runs
            out.append(seq)
            self.forget()
            self._out_pen = DEFAULT_PEN if seq == "\x1b[0m" else None
        else:
            out.append(seq)

    def _open_sync(self, out: list[str]) -> None:
        if self._sync_pending and not self._sync_open:
            out.append(SYNC_START)
            self._sync_open = True

    def _text(self, text: str) -> None:
        y = self._y
        x = self._x
        pen = self._pen
        cells: str | list[str]
        if text.isascii():
            cells = text  # one cell per character; a str slices into cells like the list does
        else:
            chars: list[str] = []
            for ch in text:
                size = get_character_cell_size(ch)
                if size == 0:
                    if chars:
                        chars[-1] += ch
                    continue
                chars.append(ch)
                if size == 2:
                    chars.append("")
            cells = chars
        n = len(cells)
        self._x = x + n
        if not 0 <= y < self.height:
            return
        x0, x1 = max(x, 0), min(x + n, self.width)
        if x0 >= x1:
            return
        self.want_chars[y][x0:x1] = cells[x0 - x:x1 - x]
        self.want_pens[y][x0:x1] = [pen] * (x1 - x0)
        span = self._dirty.get(y)
        if span is None:
            self._dirty[y] = [x0, x1]
        else:
            span[0] = min(span[0], x0)
            span[1] = max(span[1], x1)

    # -- output -------------------------------------------------------------------------
    def _flush(self, out: list[str]) -> None:
        if not self._dirty:
            return
        dirty, self._dirty = self._dirty, {}
        for y in sorted(dirty):
            x0, x1 = dirty[y]
            wc, wp, hc, hp = self.want_chars[y], self.want_pens[y], self.have_chars[y], self.have_pens[y]
            if wc[x0:x1] == hc[x0:x1] and wp[x0:x1] == hp[x0:x1]:
                continue
            changed = _changed_cells(wc, wp, hc, hp, x0, x1)
            if not changed:
                continue
            start = prev = changed[0]
            for x in changed[1:]:
                # Rewriting a short gap of known cells is cheaper than moving the cursor over it.
                if x - prev > JOIN_GAP or None in wc[prev + 1:x]:
                    self._send_run(out, y, start, prev + 1)
                    start = x
                prev = x
            self._send_run(out, y, start, prev + 1)

    def _send_run(self, out: list[str], y: int, a: int, b: int) -> None:
        wc, wp = self.want_chars[y], self.want_pens[y]
        while a > 0 and wc[a] == "":  # the right half of a wide character: start at its left half
            a -= 1
        while b < self.width and wc[b] == "":
            b += 1
        self._open_sync(out)
        self._move(out, a, y)
        pen_list = self._pen_list
        x = a
        for pen, group in groupby(zip(wc[a:b], wp[a:b], strict=True), key=lambda cell: cell[1]):
            text = "".join([c for c, _ in group])  # type: ignore[misc]  # no None: checked above
            style = pen_list[pen]
            if style != self._out_pen:
                out.append(sgr_delta(self._out_pen, style))
                self._out_pen = style
            out.append(text)
        x = b
        self.have_chars[y][a:b] = wc[a:b]
        self.have_pens[y][a:b] = wp[a:b]
        # Past the last column the terminal waits to wrap: its cursor column is not ``b``.
        self._out_x, self._out_y = (x, y) if x < self.width else (None, None)

    def _move(self, out: list[str], x: int, y: int) -> None:
        ox, oy = self._out_x, self._out_y
        if ox == x and oy == y:
            return
        out.append(cursor_move(ox, oy, x, y))
        self._out_x, self._out_y = x, y


def _horizontal(ox: int, x: int) -> str:
    """The shortest move along a row from column ``ox`` to ``x`` (not equal)."""
    if x == 0:
        return "\r"
    if x > ox:
        return f"\x1b[{x - ox}C" if x - ox > 1 else "\x1b[C"
    back = ox - x
    if back <= 3:
        return "\b" * back  # backspace: one byte a column
    return f"\x1b[{back}D"


def cursor_move(ox: int | None, oy: int | None, x: int, y: int) -> str:
    """The shortest sequence that moves the cursor from (``ox``, ``oy``) (None: unknown) to (``x``, ``y``).

    A changed row's cells usually sit under the ones changed on the row above (a column of numbers):
    "down one, back two" is ``ESC[B`` and two backspaces, five bytes where a position takes eight."""
    absolute = f"\x1b[{y + 1};{x + 1}H" if x else f"\x1b[{y + 1}H"
    if ox is None or oy is None:
        return absolute
    if oy == y:
        return _horizontal(ox, x)
    dy = y - oy
    vertical = ("\x1b[B" if dy == 1 else f"\x1b[{dy}B") if dy > 0 else ("\x1b[A" if dy == -1 else f"\x1b[{-dy}A")
    relative = vertical + _horizontal(ox, x) if ox != x else vertical
    return relative if len(relative) < len(absolute) else absolute


def _common_prefix(a: str, b: str) -> int:
    """How many characters ``a`` and ``b`` share at their start (string slices compared in C, halving)."""
    lo, hi = 0, min(len(a), len(b))
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if a[lo:mid] == b[lo:mid]:
            lo = mid
        else:
            hi = mid - 1
    return lo


#: Cells compared at once (as list slices, in C) before the cells of a block that differs are looked at one by one.
_BLOCK = 16


def _changed_cells(wc: list[str | None], wp: list[int], hc: list[str | None], hp: list[int],
                   x0: int, x1: int) -> list[int]:
    """Columns in ``x0..x1`` whose wanted cell is known and differs from the one the terminal shows.

    A changed row usually differs in a few cells (a number, a graph's newest bar): whole
    blocks that are equal are skipped by one slice comparison each."""
    changed: list[int] = []
    for a in range(x0, x1, _BLOCK):
        b = min(a + _BLOCK, x1)
        if wc[a:b] == hc[a:b] and wp[a:b] == hp[a:b]:
            continue
        changed.extend(x for x in range(a, b)
                       if (wc[x] != hc[x] or wp[x] != hp[x]) and wc[x] is not None)
    return changed
