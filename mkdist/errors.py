"""Exceptions and warnings raised by mkdist.

Every error subclasses a built-in so callers can catch it the usual way
(``except ValueError``) or precisely (``except MkdistError``).
"""

from __future__ import annotations

__all__ = [
    "MkdistError",
    "InputValidationError",
    "ParameterError",
    "StoreError",
    "StoreExistsError",
    "StoreNotFoundError",
    "IncompleteStageError",
    "SchemaVersionError",
    "DamagedStoreError",
    "DamagedStageError",
    "StoreLockedError",
    "LeaseLostError",
    "StorageAccessError",
    "SchedulerUnreachableError",
    "DriftDetectedError",
    "EmbeddingStabilityWarning",
    "DegenerateKernelWarning",
    "AmbiguousNClustersWarning",
]


class MkdistError(ValueError):
    """Base class of every error mkdist raises on purpose."""

    def __reduce__(self):
        # Rebuilt from its arguments (and attributes).  Without this, an error that also
        # subclasses OSError (StoreNotFoundError, StoreExistsError) inherits OSError.__reduce__,
        # which tblib (used by Dask's distributed workers to send a task's error) cannot
        # rebuild: the client would get a bare Exception instead of the error a task raised.
        return type(self), self.args, self.__dict__ or None


class InputValidationError(MkdistError):
    """The input views, kernel specs or parameters are not usable.

    Raised before any heavy computation starts.
    """


class ParameterError(InputValidationError):
    """A parameter's value is refused: the message is "`name`=value" and why.

    It keeps the parameter's name and value apart from the rest of the message, so a front
    end can name the parameter its own way: the CLI says ``--n-clusters 0: ...`` where Python
    says "`n_clusters`=0: ..." (other names and values in the message are in backquotes,
    which the CLI also words its way).

    Parameters
    ----------
    parameter : str
        The parameter, as Python spells it (``n_clusters``).
    value : object
        The refused value.
    rest : str
        The message after "`name`=value", from its first character (" must be >= 2.",
        ": give K as ...").
    show_value : bool, default=True
        False: the message is "`name`" and ``rest`` (which then shows the value itself).
    """

    def __init__(self, parameter: str, value: object, rest: str, *, show_value: bool = True):
        self.parameter, self.value, self.rest, self.show_value = parameter, value, rest, show_value
        super().__init__(f"`{parameter}`" + (f"={_value_text(value)}" if show_value else "") + rest)

    def __reduce__(self):
        return _rebuild_parameter_error, (type(self), self.parameter, self.value, self.rest, self.show_value)


def _rebuild_parameter_error(cls, parameter, value, rest, show_value):
    return cls(parameter, value, rest, show_value=show_value)


def _value_text(value: object) -> str:
    """A value as the message shows it: repr, NumPy scalars as Python's."""
    item = getattr(value, "item", None)
    if callable(item) and getattr(value, "shape", None) == ():
        value = item()
    return repr(value)


class StoreError(MkdistError):
    """A run store cannot be used as asked."""


class StoreExistsError(StoreError, FileExistsError):
    """The store location already holds a different run (pass ``overwrite=True``)."""


class StoreNotFoundError(StoreError, FileNotFoundError):
    """No mkdist store (or no such stage) exists at the location."""


class IncompleteStageError(StoreError):
    """A stage exists but was never marked complete (its writer crashed or is still running)."""


class SchemaVersionError(StoreError):
    """The store was written with another on-disk schema than this mkdist reads."""


class DamagedStoreError(StoreError):
    """The store's own metadata (its root ``zarr.json``) is unreadable or malformed."""


class DamagedStageError(DamagedStoreError):
    """A complete stage no longer holds what its completion marker records.

    A chunk or an array's metadata is missing, unreadable, or its checksum differs; the
    message names the store, the stage, the array and (when known) the chunk.
    """


class StoreLockedError(StoreError):
    """Another live run holds the store's writer lease; the message says who and since when."""


class LeaseLostError(StoreLockedError):
    """This run's writer lease was taken over while it was stopped past its TTL (a paused VM, a
    long GC, SIGSTOP, a network partition): its commits are fenced off, so it commits nothing more,
    and the store holds the other run's work."""


class StorageAccessError(StoreError):
    """A remote location (``s3://...``) cannot be used: its endpoint does not answer, the key is
    refused, or its bucket does not exist.  Raised by the probe a run makes before any work; the
    message names the location, the endpoint and what failed (never the credentials)."""


class SchedulerUnreachableError(MkdistError, ConnectionError):
    """The Dask scheduler a run names does not answer within the connect timeout."""


class DriftDetectedError(MkdistError):
    """A batch labelled with a stored model drifted beyond the thresholds (``fail_on_drift``)."""


class EmbeddingStabilityWarning(RuntimeWarning):
    """The spectral embedding may be unreliable (tiny eigenvalues or eigen-gaps)."""


class DegenerateKernelWarning(RuntimeWarning):
    """A base kernel carries (almost) no cluster structure and was dropped or down-weighted."""


class AmbiguousNClustersWarning(UserWarning):
    """``n_clusters="auto"`` found no clear eigengap, or a gap whose partition is clearly less
    modular than another k's: the fit used the best guess, and the choice
    (``n_clusters_choice_``) names the runner-up."""
