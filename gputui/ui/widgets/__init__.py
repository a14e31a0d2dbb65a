"""Widgets of the dashboard; the always-updating ones use Textual's Line API."""
