"""Errors as the command line says them: the exit codes, the refusal of bad input (exit 2, one
line), a library message in the command line's words (flags for parameter names), and Prefect's
tracebacks of mkdist's own errors dropped."""

from __future__ import annotations

import logging
from typing import Any

import click

EXIT_OK, EXIT_FAILURE, EXIT_BAD_INPUT, EXIT_DRIFT, EXIT_INTERRUPTED = 0, 1, 2, 3, 130


class BadInput(click.ClickException):
    """An argument, a config file or an input the CLI refuses (exit 2, one line)."""

    exit_code = EXIT_BAD_INPUT


#: How the command line writes values that the library's messages write as Python (backquoted).
CLI_TERMS = {'"auto"': "auto", "(k_min, k_max)": "K_MIN:K_MAX", "(3, 20)": "3:20"}


def _typed(value: Any) -> str:
    """A value as it is typed on the command line (a range as K_MIN:K_MAX)."""
    if isinstance(value, (list, tuple)):
        return ":".join(str(v) for v in value)
    return str(value)


def _command_flags() -> dict[str, str]:
    """Parameter name -> its flag, for the running command's options (``n_clusters`` -> ``--n-clusters``)."""
    ctx = click.get_current_context(silent=True)
    if ctx is None:
        return {}
    return {p.name: max((o for o in p.opts if o.startswith("--")), key=len) for p in ctx.command.params
            if isinstance(p, click.Option) and any(o.startswith("--") for o in p.opts)}


def for_command_line(exc: Exception) -> str:
    """An error's message in the command line's words: each backquoted parameter name that is an
    option of the command becomes its flag, a ``ParameterError``'s value is shown as typed
    (``--n-clusters 5:3``), and the Python spellings of values in :data:`CLI_TERMS` become the
    command line's; names that are not options (``--config`` keys) keep their backquotes."""
    import re

    from mkdist.errors import ParameterError

    flags = _command_flags()
    text = str(exc)
    if isinstance(exc, ParameterError) and exc.parameter in flags:
        text = flags[exc.parameter] + (f" {_typed(exc.value)}" if exc.show_value else "") + exc.rest

    def word(match: re.Match) -> str:
        term = match.group(1)
        return flags.get(term) or CLI_TERMS.get(term) or match.group(0)

    return re.sub(r"`([^`]+)`", word, text)


class _OneLineForKnownErrors(logging.Filter):
    """Drop the tracebacks Prefect logs for mkdist's own errors: the CLI prints them in one line."""

    def filter(self, record: logging.LogRecord) -> bool:
        from mkdist.errors import MkdistError

        exc = record.exc_info[1] if record.exc_info else None
        if isinstance(exc, MkdistError):
            record.exc_info, record.exc_text = None, None
        return True


def _quiet_prefect_tracebacks() -> None:
    """Install the filter on every handler of the prefect loggers (after Prefect is imported)."""
    handlers = set()
    for name, logger in list(logging.root.manager.loggerDict.items()):
        if name.startswith("prefect") and isinstance(logger, logging.Logger):
            handlers.update(logger.handlers)
    for handler in handlers | set(logging.root.handlers):
        handler.addFilter(_OneLineForKnownErrors())
