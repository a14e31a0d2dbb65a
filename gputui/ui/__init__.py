"""The Textual dashboard. Everything here may import textual; gputui.core never does.

Start it with :func:`gputui.ui.app.run_app` (the CLI) or build it with
:func:`gputui.ui.app.make_app` (tests, screenshots, benchmarks).
"""
