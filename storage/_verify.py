"""Stage manifests: what a complete stage holds, and checks that it still holds it.

A manifest records, for every Zarr array of a stage group, its shape, data type, chunk
shape, chunk count and one CRC-32 per chunk, plus a digest per array and one per stage.
The checksums cover the values Zarr stores (after xarray's CF encoding), so they can be
checked from Zarr alone, without xarray.
"""

from __future__ import annotations

import hashlib
import json
import math
import threading
import zlib
from collections import OrderedDict, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import dask
import dask.array as da
import numpy as np
import zarr
from dask.base import tokenize

from mkdist.errors import DamagedStageError, StoreNotFoundError

from ._faults import reaching_storage_failed

__all__ = ["CHECKSUM", "MARKER", "array_spec", "chunk_crc", "numpy_crcs", "store_with_crcs",
           "manifest", "is_marked", "StageListing", "list_stage", "quick_problems", "full_problems", "verified_dask"]

#: Name of the per-chunk checksum recorded in the manifest.
CHECKSUM = "crc32"
#: Group attribute holding a stage's completion marker (its manifest, set last).
MARKER = "mkdist_stage"
# Problems listed per array before "and N more": a message names what is wrong, it does
# not enumerate 10 000 missing chunks.
_SHOWN = 5


# ------------------------------------------------------------------ checksums
def chunk_crc(block: Any) -> int:
    """CRC-32 of a chunk's values in C order.

    Numbers are hashed as little-endian bytes (the layout does not depend on the machine);
    strings, which have no fixed byte layout, as length-prefixed UTF-8.
    """
    a = np.asarray(block)
    if a.dtype.kind in "OT":
        crc = 0
        for item in a.ravel(order="C"):
            raw = item.encode() if isinstance(item, str) else bytes(item)
            crc = zlib.crc32(len(raw).to_bytes(8, "little") + raw, crc)
        return crc
    if a.dtype.byteorder == ">":
        a = a.astype(a.dtype.newbyteorder("<"))
    return zlib.crc32(np.ascontiguousarray(a).reshape(-1).view(np.uint8))


def grid_shape(shape: Sequence[int], chunk_shape: Sequence[int]) -> tuple[int, ...]:
    """Number of chunks along each axis (0 along an empty axis)."""
    return tuple(-(-s // c) for s, c in zip(shape, chunk_shape))


def chunk_slices(idx: Sequence[int], shape: Sequence[int],
                 chunk_shape: Sequence[int]) -> tuple[slice, ...]:
    """The region of chunk ``idx``, clipped to the array's bounds."""
    return tuple(slice(i * c, min((i + 1) * c, s)) for i, c, s in zip(idx, chunk_shape, shape))


def chunk_key(idx: Sequence[int], encoding: Mapping[str, Any] | None) -> str | None:
    """Store key of chunk ``idx`` under a chunk key encoding; None for unknown encodings."""
    encoding = encoding or {"name": "default"}
    sep = (encoding.get("configuration") or {}).get("separator")
    if encoding.get("name") == "default":
        return (sep or "/").join(["c", *map(str, idx)])
    if encoding.get("name") == "v2":
        return (sep or ".").join(map(str, idx)) or "0"
    return None


def array_spec(meta: Mapping[str, Any]) -> dict[str, Any]:
    """Shape, data type, chunk shape and chunk count of an array, from its ``zarr.json``.

    Raises
    ------
    ValueError
        The metadata is not that of a regularly chunked Zarr v3 array.
    """
    try:
        if meta["node_type"] != "array":
            raise ValueError(f"node_type is {meta['node_type']!r}, not 'array'")
        grid = meta["chunk_grid"]
        if grid["name"] != "regular":
            raise ValueError(f"chunk grid {grid['name']!r} is not regular")
        shape = [int(s) for s in meta["shape"]]
        chunk_shape = [int(c) for c in grid["configuration"]["chunk_shape"]]
        data_type = meta["data_type"]
    except (KeyError, TypeError) as e:
        raise ValueError(f"malformed array metadata (no {e})") from None
    return {"shape": shape, "data_type": data_type, "chunk_shape": chunk_shape,
            "n_chunks": math.prod(grid_shape(shape, chunk_shape))}


def numpy_crcs(values: np.ndarray, spec: Mapping[str, Any]) -> list[int]:
    """Per-chunk CRCs of an in-memory array, chunks in C order of the chunk grid."""
    shape, chunks = spec["shape"], spec["chunk_shape"]
    return [chunk_crc(values[chunk_slices(idx, shape, chunks)])
            for idx in np.ndindex(*grid_shape(shape, chunks))]


def _store_chunk(block: np.ndarray, *, array: Any, shape: tuple[int, ...],
                 chunk_shape: tuple[int, ...], block_id: tuple[int, ...] = ()) -> np.ndarray:
    """Write one block (one whole chunk) into a Zarr array; its CRC, shaped (1, ..., 1)."""
    array[chunk_slices(block_id, shape, chunk_shape)] = block
    return np.array(chunk_crc(block), dtype=np.int64).reshape((1,) * block.ndim)


def store_with_crcs(x: da.Array, array: Any, spec: Mapping[str, Any], *, label: str = "array") -> da.Array:
    """Write a Dask array into a Zarr array lazily; its per-chunk CRCs, in the same tasks.

    Returns a lazy int64 array of the chunk grid's shape: computing it computes each block
    of ``x`` once, writes it, and checksums it.  (Checksum tasks beside ``da.store``'s could
    not share its blocks: ``da.store`` fuses the source graph into its own tasks.)  ``x`` is
    rechunked only if its blocks are not the stored chunks (xarray stores Dask chunks as
    they are, so normally it is not).  The tasks are named ``mkdist-write-<label>-...``: the
    computation of ``x`` fuses into them, and the dashboard should say what they write.
    """
    if x.size == 0:
        return da.zeros((0,), dtype=np.int64)
    shape, chunk_shape = tuple(spec["shape"]), tuple(spec["chunk_shape"])
    x = x.rechunk(chunk_shape)
    name = f"mkdist-write-{label}-{tokenize(x.name, str(array.store), array.path)}"
    return x.map_blocks(_store_chunk, dtype=np.int64, meta=np.empty((0,) * x.ndim, np.int64), name=name,
                        chunks=tuple((1,) * n for n in x.numblocks),
                        array=array, shape=shape, chunk_shape=chunk_shape)


def _digest(obj: Any) -> str:
    return "sha256:" + hashlib.sha256(json.dumps(obj, sort_keys=True).encode()).hexdigest()


def array_digest(spec: Mapping[str, Any]) -> str:
    """Digest of an array's manifest entry (its shape, data type, chunking and checksums)."""
    return _digest({k: spec[k] for k in ("shape", "data_type", "chunk_shape", CHECKSUM)})


def manifest(specs: Mapping[str, Mapping[str, Any]],
             crcs: Mapping[str, Iterable[int]]) -> dict[str, Any]:
    """The ``arrays`` and ``digest`` entries of a completion marker."""
    arrays = {}
    for name in sorted(specs):
        entry = dict(specs[name])
        entry[CHECKSUM] = [int(c) for c in np.asarray(crcs[name]).ravel()]
        if len(entry[CHECKSUM]) != entry["n_chunks"]:
            raise RuntimeError(f"array {name!r}: {len(entry[CHECKSUM])} checksums for "
                               f"{entry['n_chunks']} chunks (Dask blocks are not the Zarr chunks)")
        entry["digest"] = array_digest(entry)
        arrays[name] = entry
    return {"checksum": CHECKSUM, "arrays": arrays,
            "digest": _digest({n: a["digest"] for n, a in arrays.items()})}


# ------------------------------------------------------------------- checking
def is_marked(meta: Mapping[str, Any] | None) -> bool:
    """Whether node metadata (a parsed ``zarr.json``) carries the completion marker."""
    marker = ((meta or {}).get("attributes") or {}).get(MARKER)
    return isinstance(marker, Mapping) and marker.get("complete") is True


def _listed(what: str, items: Sequence[Any], total: int | None = None) -> str:
    shown = ", ".join(str(tuple(i)) if isinstance(i, tuple) else repr(i) for i in items[:_SHOWN])
    more = f" and {len(items) - _SHOWN} more" if len(items) > _SHOWN else ""
    of = f" of {total}" if total is not None else ""
    return f"{len(items)}{of} {what}: {shown}{more}"


@dataclass(frozen=True)
class StageListing:
    """What one listing of a stage group found, and the ``zarr.json`` documents under it.

    Attributes
    ----------
    files : dict of str to dict
        Every object under the group, by key relative to it, with fsspec's info.
    metadata : dict of str to bytes or Exception
        The raw ``zarr.json`` of the group (key ``"zarr.json"``) and of each child node
        (``"<child>/zarr.json"``), or the error reading it raised.
    """

    files: dict[str, dict[str, Any]]
    metadata: dict[str, bytes | Exception]


# zarr.json documents by (path, content version): a stage is read many times by one run
# (every stage read is verified against its metadata), and on an object store each read of
# each array's zarr.json is a request of its own.  The version is what the listing already
# reports (an object store's ETag, a file's size and mtime), so a document is fetched again
# exactly when the object changed; a listing without one is never cached.
_METADATA_CACHE: OrderedDict[tuple[str, tuple[Any, ...]], bytes] = OrderedDict()
_METADATA_CACHE_SIZE = 4096
_METADATA_LOCK = threading.Lock()


def _content_version(info: Mapping[str, Any]) -> tuple[Any, ...] | None:
    etag = info.get("ETag") or info.get("etag")
    if etag:
        return ("etag", etag, info.get("size"))
    stamp = info.get("mtime", info.get("LastModified", info.get("created")))
    if stamp is None or info.get("size") is None:
        return None
    return ("stamp", str(stamp), info["size"])


def list_stage(fs: Any, root: str, known: Mapping[str, bytes] | None = None) -> StageListing:
    """One listing of the stage group at ``root`` and its nodes' ``zarr.json`` documents.

    Documents whose object is unchanged since this process last read it come from memory;
    so do those in ``known`` (by key relative to ``root``: what this process itself just
    wrote there); the others are fetched together (concurrently on an object store).
    """
    try:
        found = fs.find(root, detail=True)
    except FileNotFoundError:
        found = {}
    files = {path[len(root):].lstrip("/"): info for path, info in found.items()}
    wanted = [rel for rel in files
              if rel == "zarr.json" or (rel.endswith("/zarr.json") and rel.count("/") == 1)]
    metadata: dict[str, bytes | Exception] = {}
    to_fetch: dict[str, tuple[str, tuple[Any, ...] | None]] = {}
    with _METADATA_LOCK:
        for rel in wanted:
            path = f"{root}/{rel}"
            version = _content_version(files[rel])
            cached = _METADATA_CACHE.get((path, version)) if version is not None else None
            if known and rel in known:
                cached = known[rel]
                if version is not None:
                    _METADATA_CACHE[(path, version)] = cached
            if cached is not None:
                if (path, version) in _METADATA_CACHE:
                    _METADATA_CACHE.move_to_end((path, version))
                metadata[rel] = cached
            else:
                to_fetch[rel] = (path, version)
    if to_fetch:
        paths = [path for path, _ in to_fetch.values()]
        got = fs.cat(paths, on_error="return")  # a list: always {path: bytes or the error}
        by_path = {fs._strip_protocol(p): v for p, v in got.items()}
        for rel, (path, version) in to_fetch.items():
            raw = by_path.get(fs._strip_protocol(path), FileNotFoundError(path))
            metadata[rel] = raw
            if isinstance(raw, bytes) and version is not None:
                with _METADATA_LOCK:
                    _METADATA_CACHE[(path, version)] = raw
                    while len(_METADATA_CACHE) > _METADATA_CACHE_SIZE:
                        _METADATA_CACHE.popitem(last=False)
    return StageListing(files, metadata)


def quick_problems(fs: Any, root: str, marker: Mapping[str, Any],
                   listing: StageListing | None = None) -> list[str]:
    """What is wrong with the stage group at ``root`` judged from metadata and one listing.

    Every recorded array must have a readable ``zarr.json`` matching the marker (shape,
    data type, chunk shape) and exactly the recorded chunk objects; the group must hold
    nothing else; the marker's digests must match its checksums.  No chunk is read.
    ``listing`` is :func:`list_stage`'s of ``root`` (listed here when not given).
    """
    arrays = marker.get("arrays")
    if (marker.get("checksum") != CHECKSUM or not isinstance(arrays, Mapping)
            or not all(isinstance(a, Mapping) for a in arrays.values())):
        return ["its completion marker records no checksums (not written by this mkdist)"]
    problems: list[str] = []
    if _digest({n: a.get("digest") for n, a in arrays.items()}) != marker.get("digest"):
        problems.append("its completion marker is inconsistent (the stage digest does not "
                        "match the arrays' digests): the marker was edited")
    listing = listing if listing is not None else list_stage(fs, root)
    keys: dict[str, set[str]] = defaultdict(set)  # array -> its objects' keys
    strays = []
    for rel in listing.files:
        head, _, key = rel.partition("/")
        if head in arrays and key:
            keys[head].add(key)
        elif rel != "zarr.json":
            strays.append(rel)
    for name, spec in sorted(arrays.items()):
        try:
            problems += [f"array {name!r}: {p}" for p in _array_problems(
                spec, keys[name], listing.metadata.get(f"{name}/zarr.json"))]
        except (KeyError, TypeError, ValueError) as e:
            problems.append(f"array {name!r}: its marker entry is malformed "
                            f"({type(e).__name__}: {e})")
    if strays:
        problems.append(_listed("objects outside the recorded arrays", sorted(strays)))
    return problems


def _array_problems(spec: Mapping[str, Any], present: set[str], raw: bytes | Exception | None) -> list[str]:
    """What is wrong with one array, given the keys of the objects stored under it and its
    ``zarr.json`` as read."""
    if "zarr.json" not in present or isinstance(raw, FileNotFoundError) or raw is None:
        return ["its zarr.json is missing"]
    present = present - {"zarr.json"}
    try:
        if isinstance(raw, Exception):
            raise ValueError(f"{type(raw).__name__}: {raw}")
        meta = json.loads(raw)
        stored = array_spec(meta)
    except ValueError as e:  # JSONDecodeError, UnicodeDecodeError, not an array
        return [f"its zarr.json is unreadable ({type(e).__name__}: {e})"]
    problems = []
    if array_digest(spec) != spec["digest"]:
        problems.append("its marker entry does not match its digest (the marker was edited)")
    mismatched = [f"{key} is {stored[key]}, the marker recorded {spec[key]}"
                  for key in ("shape", "data_type", "chunk_shape") if stored[key] != spec[key]]
    if mismatched:
        return problems + ["; ".join(mismatched)]
    grid = grid_shape(spec["shape"], spec["chunk_shape"])
    encoding = meta.get("chunk_key_encoding")
    expected = {chunk_key(idx, encoding): idx for idx in np.ndindex(*grid)}
    if None in expected:  # an unknown key encoding: only the count can be compared
        if len(present) != spec["n_chunks"]:
            problems.append(f"{len(present)} chunk objects stored, {spec['n_chunks']} recorded")
        return problems
    missing = [idx for key, idx in expected.items() if key not in present]
    if missing:
        problems.append(_listed("chunks missing", missing, spec["n_chunks"]))
    extra = sorted(present - expected.keys())
    if extra:
        problems.append(_listed("unexpected objects", extra))
    return problems


def full_problems(group: Any, marker: Mapping[str, Any]) -> list[str]:
    """What is wrong with the chunks of an opened Zarr group: every chunk read and checked.

    Call it on a group whose :func:`quick_problems` are empty.
    """
    problems: list[str] = []
    for name, spec in sorted(marker["arrays"].items()):
        try:
            array = group[name]
        except Exception as e:  # the codec configuration itself is unusable
            if reaching_storage_failed(e):  # not the array's fault: no verdict on it
                raise
            problems.append(f"array {name!r}: cannot be opened ({type(e).__name__}: {e})")
            continue

        def check(idx: tuple[int, ...], expected: int, array=array, spec=spec) -> str | None:
            try:
                crc = chunk_crc(array[chunk_slices(idx, spec["shape"], spec["chunk_shape"])])
            except Exception as e:
                if reaching_storage_failed(e):
                    raise
                return f"cannot be decoded ({type(e).__name__}: {e})"
            return "checksum mismatch" if crc != expected else None

        grid = list(np.ndindex(*grid_shape(spec["shape"], spec["chunk_shape"])))
        # Chunk reads wait on storage: a few threads overlap them.
        with ThreadPoolExecutor(max_workers=8) as pool:
            found = list(pool.map(check, grid, spec[CHECKSUM]))
        bad = [idx for idx, reason in zip(grid, found) if reason]
        reasons = [reason for reason in found if reason]
        if bad:
            kinds = "; ".join(sorted(set(reasons)))
            problems.append(f"array {name!r}: " + _listed(f"chunks damaged ({kinds})", bad,
                                                          spec["n_chunks"]))
    return problems


# ---------------------------------------------------------------- verified read
def _read_chunk(expected: np.ndarray, *, array: Any, shape: tuple[int, ...],
                chunk_shape: tuple[int, ...], where: str, fix: str,
                block_id: tuple[int, ...] = ()) -> np.ndarray:
    """Read chunk ``block_id`` of a Zarr array and check it against its recorded CRC
    (``expected[block_id]``: ``expected`` holds every chunk's, shaped as the chunk grid)."""
    try:
        block = np.asarray(array[chunk_slices(block_id, shape, chunk_shape)])
    except Exception as e:
        if reaching_storage_failed(e):  # a chunk not reached is not a chunk damaged
            raise
        failed = e
    else:
        failed = None
    if failed is not None:
        _refuse_removed(array, where, block_id)  # outside the except: see _refuse_removed
        raise DamagedStageError(f"{where}, chunk {tuple(block_id)}: cannot be read or decoded "
                                f"({type(failed).__name__}: {failed}). {fix}") from failed
    if chunk_crc(block) != int(expected[tuple(block_id)]):
        _refuse_removed(array, where, block_id)
        raise DamagedStageError(f"{where}, chunk {tuple(block_id)}: checksum mismatch (the "
                                f"stored chunk differs from what was written). {fix}")
    return block


def _refuse_removed(array: Any, where: str, block_id: Sequence[int]) -> None:
    """Raise if the group of ``array`` is gone: the version read was replaced, then removed.

    Zarr reads a deleted chunk as fill values, which would otherwise be reported as a
    checksum mismatch, i.e. as damage, although the store is fine and reading again works:
    StoreNotFoundError says so.
    """
    group = array.path.rpartition("/")[0]
    try:
        zarr.open_group(store=array.store, path=group, mode="r", zarr_format=3)
    except FileNotFoundError:
        gone = True
    else:
        gone = False
    # Raised outside the except clause, so that it carries no __context__: Dask's distributed
    # workers pickle an error with its context, and zarr's not-found errors do not unpickle
    # (the client would get a bare Exception instead of StoreNotFoundError).
    if gone:
        raise StoreNotFoundError(
            f"{where}, chunk {tuple(block_id)}: the version of the stage this read opened was "
            "replaced by a writer and removed after its grace period (MKDIST_GENERATION_GRACE_S)"
            "; read the stage again, or raise the grace period for readers this slow.")


def verified_dask(array: Any, spec: Mapping[str, Any], dtype: np.dtype, *, where: str,
                  fix: str) -> da.Array:
    """A Dask array reading a Zarr array chunk by chunk, each chunk checked when computed.

    One task per stored chunk reads and checks it, so verification costs no extra pass.

    Raises
    ------
    DamagedStageError
        When computed: a chunk cannot be decoded or its CRC differs from ``spec``'s; the
        message starts with ``where`` and names the chunk, then says ``fix``.
    StoreNotFoundError
        When computed: the array's group was removed meanwhile (a replaced generation whose
        grace period passed).
    """
    shape, chunk_shape = tuple(spec["shape"]), tuple(spec["chunk_shape"])
    if math.prod(shape) == 0:
        return da.from_array(np.empty(shape, dtype=dtype))
    grid = grid_shape(shape, chunk_shape)
    # The checksums as ONE graph key that every read task looks its own up in: a Dask array of
    # them (a getter task per chunk) would not fuse with the reads, one more task per chunk in
    # every pass over a stored array; as a keyword every task would carry all of them.
    expected = dask.delayed(np.asarray(spec[CHECKSUM], dtype=np.int64).reshape(grid), pure=True, traverse=False)
    return da.map_blocks(
        _read_chunk, expected, dtype=dtype, meta=np.empty((0,) * len(shape), dtype=dtype),
        chunks=da.core.normalize_chunks(chunk_shape, shape),
        # Named by what is read, where from: reading the same stage twice shares keys, and a
        # rewritten stage (another group, or other data) gets new ones.
        name="mkdist-read-" + tokenize(where, array.path, spec["digest"]),
        array=array, shape=shape, chunk_shape=chunk_shape, where=where, fix=fix)
