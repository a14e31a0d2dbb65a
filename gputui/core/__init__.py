"""The headless core: sources, the snapshot model, history, judges and the poller.

Nothing under ``gputui.core`` or ``gputui.actions`` imports textual; a test
checks it in a fresh interpreter.
"""
