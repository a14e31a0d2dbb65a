"""Every key binding of the dashboard's views, in one registry.

The dashboard's screens and widgets take their ``BINDINGS`` from here and the help screen lists
them from here, so the help cannot drift from the real keys and needs to import none of the
screens it describes. (The modal dialogs — help, kill, migrate, alerts — and the fleet's screens
declare their own few keys.) Each binding that users may remap has an id: ``[keymap]`` in the
config maps ids to other keys (:func:`check_keymap`, then Textual's ``App.set_keymap``).
"""

from __future__ import annotations

from textual.binding import Binding, BindingType

DASHBOARD: list[BindingType] = [
    Binding("question_mark", "help", "Help", key_display="?", id="help"),
    Binding("slash", "filter", "Filter", key_display="/", id="filter"),
    Binding("s", "sort(1)", "Sort", id="sort-next", tooltip="Sort by the next column"),
    Binding("S", "sort(-1)", "Sort by previous column", show=False, id="sort-previous"),
    Binding("r", "reverse_sort", "Reverse sort order", show=False, id="sort-reverse"),
    *[
        Binding(str(d), f"only_gpu({d})", f"Only GPU {d}'s processes", show=False, id=f"only-gpu-{d}")
        for d in range(10)
    ],
    Binding("a", "all_gpus", "All GPUs", show=False, id="all-gpus"),
    Binding("enter", "details", "Details", key_display="⏎", id="details", tooltip="Plots and every field of a GPU"),
    Binding("c", "containers", "Containers", id="containers"),
    Binding("exclamation_mark", "alerts", "Alerts", key_display="!", id="alerts"),
    Binding("m", "migrate", "Migrate", id="migrate",
            tooltip="Move the highlighted process's container (or the suggested one) to another GPU"),
    Binding("k", "kill", "Kill", id="kill", tooltip="Terminate the highlighted process (SIGTERM)"),
    Binding("K", "kill_stale", "Kill every stale process in view", show=False, id="kill-stale",
            tooltip="One confirmation for all stale processes the table shows (GPU and filter apply)"),
    Binding("v", "cycle_view", "GPU cards / rows", show=False, id="view"),
    Binding("p", "pause", "Pause / resume", show=False, id="pause"),
    Binding("escape", "clear_filters", "Clear filters", show=False, id="clear-filters"),
    Binding("q", "quit", "Quit", id="quit"),
]

PROCESS_TABLE: list[BindingType] = [
    Binding("up", "cursor(-1)", "Up", show=False),
    Binding("down", "cursor(1)", "Down", show=False),
    Binding("pageup", "page(-1)", "Page up", show=False),
    Binding("pagedown", "page(1)", "Page down", show=False),
    Binding("home", "cursor_to(0)", "First row", show=False),
    Binding("end", "cursor_to(-1)", "Last row", show=False),
]

BANNER: list[BindingType] = [
    Binding("m", "migrate_suggestion", "Migrate as suggested", id="banner-migrate"),
    Binding("enter", "migrate_suggestion", "Migrate as suggested", show=False, id="banner-migrate-enter"),
]

GPU_PANEL: list[BindingType] = [
    Binding("left", "move(-1, 0)", "Previous GPU", show=False),
    Binding("right", "move(1, 0)", "Next GPU", show=False),
    Binding("up", "move(0, -1)", "GPU above", show=False),
    Binding("down", "move(0, 1)", "GPU below", show=False),
]

DETAIL: list[BindingType] = [
    Binding("escape", "app.pop_screen", "Back", id="detail-back"),
    Binding("q", "app.pop_screen", "Back", show=False, id="detail-back-q"),
    Binding("left", "step(-1)", "Previous GPU", key_display="←", id="detail-previous"),
    Binding("right", "step(1)", "Next GPU", key_display="→", id="detail-next"),
    Binding("question_mark", "help", "Help", key_display="?", id="detail-help"),
    Binding("h", "history_day", "Last 24 h", id="detail-day",
            tooltip="Plots of the last 24 hours from the history database ('gputui record'); again: live"),
    Binding("w", "who", "Who was on it", id="detail-who",
            tooltip="Every process that held this GPU in the last 24 hours, from the history database"),
]

WHO: list[BindingType] = [
    Binding("escape", "dismiss", "Close", id="who-close"),
    Binding("q", "dismiss", "Close", show=False, id="who-close-q"),
    Binding("w", "dismiss", "Close", show=False, id="who-close-w"),
]

CONTAINERS: list[BindingType] = [
    Binding("escape", "app.pop_screen", "Back", id="containers-back"),
    Binding("q", "app.pop_screen", "Back", show=False, id="containers-back-q"),
    Binding("c", "app.pop_screen", "Back", show=False, id="containers-back-c"),
    # priority: Enter acts here before the table's own "select row" (a click only highlights).
    Binding("enter", "show_processes", "Its processes", key_display="⏎", id="containers-processes",
            priority=True, tooltip="Back to the dashboard, process table filtered to this container"),
    Binding("m", "migrate", "Migrate", id="containers-migrate",
            tooltip="Move the highlighted container to another GPU"),
]

#: Keys handled by widgets or Textual itself that are not in the lists above.
EXTRA = {
    "Dashboard": [("tab / shift+tab", "Move between the GPU panel, imbalance banner and process table")],
    "GPU panel": [("enter", "Details of the GPU")],
    "Mouse": [
        ("click a card", "Select that GPU; click it again for its details"),
        ("click a row", "Highlight that process; double-click opens its GPU"),
        ("wheel", "Scroll the table or the GPU panel"),
    ],
    "Anywhere": [
        ("ctrl+p", "Command palette: every action by name"),
        ("ctrl+c", "Quit"),
    ],
}

#: The help's sections, in order: (title, bindings, extra rows).
SECTIONS: list[tuple[str, list[BindingType], list[tuple[str, str]]]] = [
    ("Dashboard", DASHBOARD, EXTRA["Dashboard"]),
    ("Process table", PROCESS_TABLE, []),
    ("Imbalance banner (tab to focus)", BANNER, []),
    ("GPU panel (tab to focus)", GPU_PANEL, EXTRA["GPU panel"]),
    ("GPU details", DETAIL, []),
    ("Containers (c)", CONTAINERS, []),
    ("Mouse", [], EXTRA["Mouse"]),
    ("Anywhere", [], EXTRA["Anywhere"]),
]


def remappable() -> dict[str, Binding]:
    """Binding id -> binding, for every binding of the registry that has an id."""
    return {b.id: b for _, bindings, _ in SECTIONS for b in bindings if isinstance(b, Binding) and b.id}


def check_keymap(keymap: tuple[tuple[str, str], ...]) -> str | None:
    """One sentence when ``[keymap]`` names an id no binding has; None when every id exists."""
    known = remappable()
    unknown = [k for k, _ in keymap if k not in known]
    if not unknown:
        return None
    return (f"The config's [keymap] names no key binding {unknown[0]!r}; the ids are: "
            f"{', '.join(sorted(known))}.")
