"""Exceptions and warnings raised by mkdist.

Every error subclasses a built-in so callers can catch it the usual way
(``except ValueError``) or precisely (``except MkdistError``).
"""

from __future__ import annotations

__all__ = [
    "MkdistError",
    "InputValidationError",
    "StoreError",
    "StoreExistsError",
    "StoreNotFoundError",
    "IncompleteStageError",
    "SchemaVersionError",
    "DamagedStoreError",
    "DamagedStageError",
    "StoreLockedError",
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
