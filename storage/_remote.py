"""Object-store locations (``s3://...``): the storage options each is opened with, and the cheap
probe a run makes before any work.

Where credentials come from, first match per option:

1. ``storage_options`` given for the run (``mkdist.cluster(..., storage_options=...)``, the
   ``[storage_options]`` table of ``mkdist run --config``): they apply to every remote location
   of the run -- input, store, labels output -- and are registered in this process (by location)
   so that a store reopened from its URL later in the run gets them too;
2. the fsspec configuration (``FSSPEC_S3_<OPTION>`` variables, ``FSSPEC_CONFIG_DIR`` files);
3. for ``s3://``: the endpoint, ``AWS_ENDPOINT_URL_S3`` / ``AWS_ENDPOINT_URL``, from the
   environment -- not the keys: each process's own botocore finds those (the standard provider
   chain: ``AWS_ACCESS_KEY_ID`` / ``AWS_SECRET_ACCESS_KEY`` / ``AWS_SESSION_TOKEN``, a profile,
   an instance or pod role).

Dask ships a task's filesystem (or Zarr array) pickled with its options, through the scheduler
to the workers.  So the driver's environment stays in the driver: credentials taken from it
were copied into those options, and travelled in every graph; now a worker reads the storage
with its own credentials (its environment, its role), as any AWS client does, and a graph holds
no secret taken from the environment.  Credentials given explicitly in ``storage_options`` are
the caller's choice to send: they go where the options go, graphs included (use TLS between
client, scheduler and workers, ``deploy/dask-tls.yaml``, off a trusted network).  None is
ever written anywhere by mkdist: not in a store's attributes (the input is recorded by
location), not in a report, not in the lease (the CLI takes no credential on its command line,
which the lease records), not in a Prefect flow's parameters (:func:`public_options`).

Options registered for a bucket hold until :func:`clear_options`, or until the credentials
in the environment change (a rotated key, another profile): then they are dropped, and so
are the s3fs instances cached with the old credentials.
"""

from __future__ import annotations

import asyncio
import logging
import os
import sys
import threading
from collections.abc import Mapping
from typing import Any

from mkdist.errors import StorageAccessError

__all__ = [
    "PROBE_TIMEOUT_S",
    "clear_options",
    "close_sessions",
    "is_remote",
    "options_for",
    "probe",
    "probe_run",
    "protocol",
    "public_options",
    "register_options",
]

logger = logging.getLogger("mkdist")

#: Seconds the probe waits for an endpoint to connect or answer (one attempt, no retries):
#: an unreachable endpoint is reported in seconds, not after botocore's retries (7 s and more).
PROBE_TIMEOUT_S = 5.0

# Protocols that need neither credentials nor a probe: this machine's files, this process's memory.
_LOCAL = frozenset({"file", "local", "memory"})
_S3 = frozenset({"s3", "s3a"})
# Options that are secrets: never shown, never passed where they would be stored.
_SECRET = frozenset({"key", "secret", "token", "password", "aws_access_key_id", "aws_secret_access_key",
                     "aws_session_token", "account_key", "sas_token", "client_secret"})

# bucket -> (options, the environment's credentials digest when they were registered)
_REGISTERED: dict[str, tuple[dict[str, Any], str]] = {}
_LOCK = threading.Lock()
# The credentials digest options_for last saw (None: not asked yet).
_SEEN_ENVIRONMENT: list[str | None] = [None]
# Variables that choose credentials or an endpoint: a change in any of them is another identity.
_CREDENTIAL_PREFIXES = ("AWS_", "FSSPEC_")


def protocol(url: Any) -> str | None:
    """The fsspec protocol of a location (``"s3"``), ``"file"`` for a local path, None for
    an in-memory object."""
    if hasattr(url, "url"):  # a RunStore
        url = url.url
    if not isinstance(url, (str, os.PathLike)):
        return None
    raw = os.fspath(url)
    return raw.split("://", 1)[0].lower() if "://" in raw else "file"


def is_remote(url: Any) -> bool:
    """Whether ``url`` is on a remote filesystem (object store, HTTP, ...): credentials apply."""
    p = protocol(url)
    return p is not None and p not in _LOCAL


def _key(url: str) -> str:
    """Options are registered per bucket (``s3://bucket``): a run's locations in one bucket --
    the store, the report beside it, the labels -- share its endpoint and credentials."""
    proto, _, path = url.partition("://")
    return f"{proto.lower()}://{path.strip('/').split('/', 1)[0]}"


def register_options(options: Mapping[str, Any] | None, *urls: Any) -> None:
    """Remember ``options`` for the buckets of the remote locations ``urls`` in this process: a
    store reopened from its URL later in the run, the report next to it, are opened with them."""
    if not options:
        return
    digest = _credentials_digest()
    with _LOCK:
        for url in urls:
            if is_remote(url):
                _REGISTERED[_key(os.fspath(url.url if hasattr(url, "url") else url))] = (dict(options), digest)


def clear_options(*urls: Any) -> None:
    """Forget the options registered for the buckets of ``urls`` (all of them when none is
    given): later locations there are opened with the fsspec configuration and the environment."""
    with _LOCK:
        if not urls:
            _REGISTERED.clear()
        for url in urls:
            if is_remote(url):
                _REGISTERED.pop(_key(os.fspath(url.url if hasattr(url, "url") else url)), None)


def _registered(url: str) -> dict[str, Any] | None:
    digest = _credentials_digest()
    with _LOCK:
        found = _REGISTERED.get(_key(url))
        if found is not None and found[1] != digest:
            # The environment's credentials changed since: these options were another identity's.
            logger.info("%s: the credentials in the environment changed; options registered before are dropped",
                        _key(url))
            del _REGISTERED[_key(url)]
            found = None
    return None if found is None else dict(found[0])


def _credentials_digest() -> str:
    """A digest of the variables that choose credentials (never the values themselves: it is
    compared, not stored or sent)."""
    import hashlib

    relevant = sorted((k, v) for k, v in os.environ.items() if k.startswith(_CREDENTIAL_PREFIXES))
    return hashlib.sha256(repr(relevant).encode()).hexdigest()


def _drop_stale_instances() -> None:
    """s3fs caches a filesystem per set of options: with the keys no longer among them, an
    instance made under the previous environment's credentials would be reused after they
    changed.  Closed and dropped from the cache (:func:`close_sessions`) when the environment's
    credentials digest changes."""
    digest = _credentials_digest()
    with _LOCK:
        changed = _SEEN_ENVIRONMENT[0] is not None and _SEEN_ENVIRONMENT[0] != digest
        _SEEN_ENVIRONMENT[0] = digest
    if changed and "s3fs" in sys.modules:
        close_sessions()


def _environment(proto: str) -> dict[str, Any]:
    """Options of ``proto`` from fsspec's configuration and, for s3, the AWS variables."""
    import fsspec.config

    out: dict[str, Any] = {}
    if proto in _S3:
        # One request per object read: s3fs (2026.x) sizes every whole-object read first (a
        # HEAD, or a listing when the key is missing) to split large objects into concurrent
        # ranges (fsspec/s3fs#1027, whose workaround this is); a run reads many small
        # metadata documents and chunks, and the extra round trip doubled their cost.
        out["max_concurrency"] = 1
        # The endpoint only: botocore reads the keys from each process's own environment (or
        # profile, or role); copied here they travelled in every task graph (module docstring).
        env = os.environ
        endpoint_url = next((env[n] for n in ("AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL") if env.get(n)), None)
        if endpoint_url:
            out["endpoint_url"] = endpoint_url
    # fsspec's own configuration wins over the AWS variables, as it does in fsspec itself
    # (it is applied to the keyword arguments of every filesystem it creates).
    for name in {proto, "s3"} if proto in _S3 else {proto}:
        out.update(fsspec.config.conf.get(name) or {})
    return out


def options_for(url: Any, given: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The storage options to open ``url`` with: ``given`` (else those registered for it) over
    the fsspec configuration and the environment; ``{}`` for local and in-memory locations."""
    if not is_remote(url):
        return {}
    raw = os.fspath(url.url if hasattr(url, "url") else url)
    proto = protocol(raw)
    if proto in _S3:
        _drop_stale_instances()
    explicit = dict(given) if given else _registered(raw) or {}
    return {**_environment(proto), **explicit}


def public_options(options: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """``options`` without its secrets (for what is stored or shown: flow parameters, logs)."""
    if options is None:
        return None
    return {k: ("<redacted>" if k.lower() in _SECRET else v) for k, v in options.items()}


def endpoint(url: Any, options: Mapping[str, Any]) -> str:
    """The endpoint a location is reached at, for messages."""
    client = options.get("client_kwargs") or {}
    found = options.get("endpoint_url") or client.get("endpoint_url")
    if found:
        return str(found)
    return "the AWS default endpoint" if protocol(url) in _S3 else f"{protocol(url)}://"


def _filesystem(url: str, options: dict[str, Any]):
    """A filesystem for the probe: one attempt, short timeouts, not the cached instance."""
    import fsspec

    proto = protocol(url)
    try:
        cls = fsspec.get_filesystem_class(proto)
    except (ImportError, ValueError) as e:
        extra = " (pip install 'mkdist[s3]')" if proto in _S3 else ""
        raise StorageAccessError(f"cannot open {url}: {e}{extra}") from None
    options = dict(options)
    if proto in _S3:
        config = dict(options.get("config_kwargs") or {})
        config.setdefault("connect_timeout", PROBE_TIMEOUT_S)
        config.setdefault("read_timeout", PROBE_TIMEOUT_S)
        config["retries"] = {"max_attempts": 1}
        options["config_kwargs"] = config
    return cls(**options, skip_instance_cache=True), cls._strip_protocol(url)


def _unreachable(exc: BaseException) -> bool:
    try:
        from botocore.exceptions import ConnectionError as BotoConnectionError, HTTPClientError
    except ImportError:  # no botocore: only the built-in connection errors
        BotoConnectionError = HTTPClientError = ConnectionError
    return isinstance(exc, (ConnectionError, TimeoutError, BotoConnectionError, HTTPClientError))


def probe(url: Any, storage_options: Mapping[str, Any] | None = None, *, what: str = "location",
          must_exist: bool = False) -> None:
    """Check that a remote location can be reached with its credentials: a request or two, no data.

    Local and in-memory locations pass at once.  Run before any work, so that a wrong key or a
    mistyped endpoint is one line, with nothing created.

    Parameters
    ----------
    url : str or RunStore
    storage_options : mapping, optional
        As given for the run (else registered, configured or from the environment).
    what : str
        What the location is (``"input"``, ``"store"``, ``"labels output"``), for messages.
    must_exist : bool, default=False
        Refuse a location that does not exist (an input).  An output need not exist, but
        its bucket must.

    Raises
    ------
    StorageAccessError
        "cannot reach s3 endpoint http://...: ..." or "access denied to s3://bucket/path: check the
        key ..." or "bucket ... does not exist".
    """
    if not is_remote(url):
        return
    raw = os.fspath(url.url if hasattr(url, "url") else url)
    options = options_for(raw, storage_options)
    where = endpoint(raw, options)
    fs, path = _filesystem(raw, options)
    bucket = path.split("/", 1)[0]
    try:
        try:
            fs.info(path)
        except FileNotFoundError:
            if must_exist:
                return  # the input's own check names it, with a close match if there is one
            if path != bucket and not fs.exists(bucket):
                raise StorageAccessError(
                    f"the {what} {raw} is in bucket {bucket!r}, which does not exist at {where}: "
                    "create the bucket, or check the URL") from None
    except StorageAccessError:
        raise
    except PermissionError as e:
        raise StorageAccessError(
            f"access denied to {raw} (the {what}) at {where}: check the key (AWS_ACCESS_KEY_ID / "
            f"AWS_SECRET_ACCESS_KEY or storage_options key/secret) and its permissions ({e})") from None
    except Exception as e:  # noqa: BLE001 - every backend has its own errors; one line each
        if _unreachable(e) or _unreachable(e.__cause__ or e):
            raise StorageAccessError(
                f"cannot reach {protocol(raw)} endpoint {where} for the {what} {raw} ({e}); check "
                "the endpoint (AWS_ENDPOINT_URL or storage_options endpoint_url) and the network"
            ) from None
        raise StorageAccessError(f"cannot use the {what} {raw} at {where}: {type(e).__name__}: {e}") from None


def probe_run(source: Any = None, store: Any = None, labels_out: Any = None,
              storage_options: Mapping[str, Any] | None = None) -> None:
    """Probe a run's remote locations (input, store, labels output) before any work, and
    register ``storage_options`` for them (see the module docstring)."""
    register_options(storage_options, *(u for u in (source, store, labels_out) if u is not None))
    if source is not None:
        probe(source, storage_options, what="input", must_exist=True)
    if store is not None:
        probe(store, storage_options, what="store")
    if labels_out is not None:
        probe(labels_out, storage_options, what="labels output")


#: Seconds :func:`close_sessions` waits for zarr's event loop to close the sessions.
CLOSE_TIMEOUT_S = 2.0


async def _close_clients(creators: list) -> None:
    """Exit s3fs's client contexts (what its own finalizer does), on the loop their sessions use."""
    for result in await asyncio.gather(*(c.__aexit__(None, None, None) for c in creators), return_exceptions=True):
        if isinstance(result, BaseException):
            logger.debug("closing an s3 session: %r", result)


def close_sessions(timeout: float = CLOSE_TIMEOUT_S) -> int:
    """Close the HTTP sessions of the asynchronous s3fs filesystems cached in this process, on
    zarr's event loop, and empty s3fs's instance cache; returns how many were open.

    Zarr opens a store at a URL with an ``asynchronous=True`` filesystem and does its I/O on its
    own event loop thread (``zarr.core.sync``), so every process that reads or writes a chunk on
    s3 -- a Dask worker above all -- holds an aiohttp session of that loop.  Nothing closes it:
    s3fs registers its closing finalizer for synchronous instances only (an asynchronous one is
    left to its caller, who owns the loop), zarr 3.1 never closes the filesystems it creates
    (zarr-developers/zarr-python#2901, fsspec/s3fs#943; zarr-python#4003 closes one on an
    explicit ``Store.close()``, which a task that unpickled a store never calls), and zarr's
    atexit hook stops its loop first.  The session is then garbage-collected at interpreter exit
    and aiohttp prints "Unclosed client session": one per worker process of a run on s3.

    So a process closes them itself before it ends, while zarr's loop still runs
    (:mod:`mkdist._pipeline._sessions` does it in every Dask worker a run's client reaches).
    Synchronous instances are left to s3fs (its finalizer closes them on fsspec's loop).  Safe to
    call more than once, and from any thread but zarr's; a filesystem opened afterwards starts a
    new session.
    """
    s3fs = sys.modules.get("s3fs")
    if s3fs is None:  # never imported here: nothing was opened
        return 0
    creators = [c for fs in list(s3fs.S3FileSystem._cache.values())
                if fs.asynchronous and (c := getattr(fs, "_s3creator", None)) is not None]
    # The instances cached now are closed: the next one asked for must be a new one.
    s3fs.S3FileSystem.clear_instance_cache()
    if not creators:
        return 0
    zarr_sync = sys.modules.get("zarr.core.sync")
    loop = zarr_sync.loop[0] if zarr_sync is not None else None
    if loop is None or not loop.is_running() or threading.current_thread() is zarr_sync.iothread[0]:
        # Their loop is gone (or is this thread): nothing can be awaited on it any more.
        logger.debug("%d s3 sessions left open: zarr's event loop is not running", len(creators))
        return len(creators)
    future = asyncio.run_coroutine_threadsafe(_close_clients(creators), loop)
    try:
        future.result(timeout)
    except Exception as exc:  # noqa: BLE001 - a hung close must not keep a process from ending
        future.cancel()
        logger.debug("closing %d s3 sessions on zarr's event loop: %r", len(creators), exc)
    return len(creators)
