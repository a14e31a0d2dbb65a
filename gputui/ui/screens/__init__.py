"""Screens of the dashboard. See gputui.ui.app for the protocol they follow."""
