"""Dask graph builders for the embedding stage: one fused task per row chunk."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ._model import MKCModel, embed_chunk
from .errors import InputValidationError

__all__ = ["embed_dask", "align_row_chunks", "check_chunk_finite"]


def check_chunk_finite(view_names: Sequence[str], blocks: Sequence[np.ndarray], chunk_index: int,
                       row_start: int) -> None:
    """Raise naming the view, the chunk and the first bad row if a block holds NaN/inf.

    Runs inside the embedding tasks, so the check costs no extra pass over the data.
    """
    for name, b in zip(view_names, blocks):
        if np.issubdtype(b.dtype, np.floating) and not np.isfinite(b).all():
            row = int(np.argmax(~np.isfinite(b).all(axis=1)))
            raise InputValidationError(
                f"Input contains NaN or infinity: view {name!r}, chunk {chunk_index} "
                f"(first bad row {row_start + row})."
            )


def _embed_block(*args, block_info=None):
    *blocks, model = args
    loc = block_info[0]
    check_chunk_finite(model.view_names, blocks, loc["chunk-location"][0], loc["array-location"][0][0])
    return embed_chunk(model, *blocks)


def align_row_chunks(arrays: Sequence, names: Sequence[str] | None = None) -> list:
    """Check that all views share one row chunking and have a single column chunk.

    Mismatched row chunks are an error (not silently rechunked: a rechunk of millions of
    rows is a shuffle the user should choose); column chunks are merged, which is cheap.
    """
    names = list(names) if names is not None else [f"view{i}" for i in range(len(arrays))]
    first = arrays[0].chunks[0]
    for name, a in zip(names, arrays):
        if a.chunks[0] != first:
            raise InputValidationError(
                f"view {name!r} is chunked {a.chunks[0][:4]}... along rows but view {names[0]!r} is "
                f"chunked {first[:4]}...; rechunk all views the same way, e.g. "
                f"X.rechunk({{0: {first[0]}}})."
            )
        if any(np.isnan(c) for c in a.chunks[0]):
            raise InputValidationError(
                f"view {name!r} has unknown chunk sizes; call .compute_chunk_sizes() first."
            )
    return [a if a.numblocks[1] == 1 else a.rechunk({1: -1}) for a in arrays]


def embed_dask(arrays: Sequence, model: MKCModel):
    """Lazy H_N for row-chunked Dask views: one fused ``map_blocks`` task per row chunk.

    Each task computes, for its chunk: one GEMM per view against that view's landmarks,
    every base kernel of the view from it, the preprocessing, the alpha^2-weighted sum and
    one GEMM with H_n D_n^-1 -- a (chunk, K) block.  The model travels as a single graph
    key (a Delayed), not copied into every task.

    Returns
    -------
    dask.array.Array of shape (N, K)
    """
    import dask
    import dask.array as da

    from dask.base import tokenize

    arrays = align_row_chunks(arrays, model.view_names)
    model_key = dask.delayed(model, pure=True, traverse=False)
    # The name must be unique per (model, input): Dask treats equal keys as equal results.
    name = f"mkdist-embed-{tokenize(model_key, *arrays)}"
    return da.map_blocks(
        _embed_block, *arrays, model_key,
        chunks=(arrays[0].chunks[0], (model.n_components,)),
        dtype=np.dtype(model.dtype), name=name,
        meta=np.empty((0, model.n_components), dtype=np.dtype(model.dtype)),
    )
