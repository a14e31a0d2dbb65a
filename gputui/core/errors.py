"""The one way gputui turns a failure into words: :func:`clause` and :func:`sentence`.

Every face (status line, toasts, CLI stderr, plans, reports) says what went wrong in one short
sentence, never Python's exception text for a Docker connection failure and never a traceback.
"""

from __future__ import annotations

_DOCKER_MODULES = ("docker", "requests", "urllib3")


def clause(problem: BaseException | str) -> str:
    """A failure as a clause without a trailing period, for "Could not X: <clause>.".

    Docker's own explanation when the error carries one; a failure of the Docker connection
    (docker-py, requests, urllib3) as :func:`gputui.core.sources.docker_source.describe_error` says it;
    otherwise the exception's text, or its type's name when it has none. Whitespace collapses.
    """
    if isinstance(problem, str):
        text: object = problem
    else:
        text = getattr(problem, "explanation", None)
        if not text and type(problem).__module__.split(".")[0] in _DOCKER_MODULES:
            from gputui.core.sources.docker_source import describe_error

            text = describe_error(problem)
        text = text or str(problem) or type(problem).__name__
    if isinstance(text, bytes):
        text = text.decode(errors="replace")
    return " ".join(str(text).split()).rstrip(".")


def sentence(problem: BaseException | str) -> str:
    """:func:`clause` as a sentence: capitalised, ending with a full stop (or the ! or ? it has)."""
    text = clause(problem) if isinstance(problem, BaseException) else " ".join(problem.split())
    text = text[:1].upper() + text[1:]
    return text if text.endswith((".", "!", "?")) else text + "."
