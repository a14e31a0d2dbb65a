"""gputui: who is on which GPU, in which container, and what to do about it."""

__version__ = "0.1.0"
