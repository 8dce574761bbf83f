"""Telling a failure to reach the storage from a statement about what it holds.

A read that fails because the network dropped, a request timed out or a permission is missing
says nothing about the data: reported as "not a Zarr group", "damaged" or "a file mkdist did not
write", it sends the caller down the wrong path (another format's reader, a recomputation, an
overwrite).  The sites that interpret errors ask :func:`reaching_storage_failed` first and
re-raise those as they are.
"""

from __future__ import annotations

__all__ = ["reaching_storage_failed"]


def _access_errors() -> tuple[type[BaseException], ...]:
    found: tuple[type[BaseException], ...] = (ConnectionError, TimeoutError, PermissionError)
    try:  # botocore's are not OSErrors (s3fs passes some on unwrapped)
        from botocore.exceptions import ConnectionError as BotoConnectionError, HTTPClientError
    except ImportError:
        return found
    return (*found, BotoConnectionError, HTTPClientError)


def reaching_storage_failed(exc: BaseException) -> bool:
    """Whether ``exc``, or an error it was raised from (its cause or context), is a failure to
    reach the storage: a connection error, a timeout, a permission refused.

    Parameters
    ----------
    exc : BaseException

    Returns
    -------
    bool
    """
    kinds = _access_errors()
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        if isinstance(exc, kinds):
            return True
        seen.add(id(exc))
        exc = exc.__cause__ or exc.__context__
    return False
