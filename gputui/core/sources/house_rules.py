"""The house rules folder as a source: ``rules.toml`` and ``reservations.json`` re-read when they change.

A poll costs two ``stat`` calls; the files are parsed again only when their inode, size or mtime moved, so
an edited rule or a new reservation shows on the next poll. Reading never raises: a refused file is the
:class:`~gputui.core.rules.HouseRules` ``error`` sentence.
"""

from __future__ import annotations

import os

from gputui.core.rules import RESERVATIONS_NAME, HouseRules, load_house_rules, rules_dir, rules_file


class HouseRulesSource:
    def __init__(self, rules_path: str | None = None) -> None:
        self.rules_path = rules_path
        folder = rules_dir(rules_path)
        self._files = (rules_file(rules_path), os.path.join(folder, RESERVATIONS_NAME))
        self._stamp: tuple[object, ...] | None = None
        self._rules: HouseRules | None = None
        self._until = float("inf")

    def _stat(self) -> tuple[object, ...]:
        out: list[object] = []
        for path in self._files:
            try:
                st = os.stat(path)
                out.append((st.st_ino, st.st_size, st.st_mtime_ns, st.st_uid, st.st_mode))
            except OSError as exc:
                out.append(exc.errno)
        return tuple(out)

    def read(self, now: float) -> HouseRules:
        stamp = self._stat()
        if self._rules is None or stamp != self._stamp or now >= self._until:
            self._rules = load_house_rules(self.rules_path, now=now)
            self._stamp = stamp
            # read again when the next reservation ends, so an expired one vanishes by itself
            self._until = min((r.until for r in self._rules.reservations), default=float("inf"))
        return self._rules

    def close(self) -> None:
        pass
