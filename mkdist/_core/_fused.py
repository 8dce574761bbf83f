"""The combination step of the fused embedding: kernel blocks of one view into one (b, n) block.

MKC-AE projects every base kernel onto the same landmark-side matrix Q = H_n D_n^-1, so the
weighted sum of the preprocessed kernel rows can be formed *before* the projection: one
(b, n) x (n, c) GEMM per row block instead of one per kernel (six for ``rbf-grid`` on two
views; those thin GEMMs were half of a W1 row's time).  What stands in the way is that the
preprocessing of kernel p scales each row by a factor that depends on that row's kernel mean
(centring, diagonal normalisation), so the sum needs each block's row means first.  This
module computes, for every row and kernel t of a view, from one *source* block:

    k_t   = src ** (2 ** powers[t])              (squarings or square roots, see _power_families)
    m_t   = mean_j k_t[j]
    a_t   = weight[t] * rowfactor(kxx[t], m_t)   (diagonal normalisation: 1/sqrt(kc(x, x)))
    C    += a_t * dl_t * k_t                     (dl_t: the landmark side of the normalisation)
    coef[t] = a_t,  cent[t] = a_t * (m_t - shift[t])   (the rank-one centring terms)

The compiled step (numba, a dependency of mkdist since issue 45) keeps each row
in L1 and touches the (b, n) block once per kernel.  For float32 RBF views it also forms the
source itself, src = exp(c (2 x.l - ||x||^2 - ||l||^2)), from the distance GEMM's block (no
NumPy exp pass, no [x, ||x||^2, 1] copy), and :func:`finish_compiled` does the block's last
step (centring terms, unit rows, cast) in one call.  Where numba cannot be imported (a NumPy
newer than it supports, a platform without an llvmlite wheel), :func:`combine_numpy` computes the
same sum a NumPy way (one thin GEMM per kernel, see there), and the process says so once (a
warning of the ``mkdist`` logger).  ``MKDIST_NUMBA=0`` selects NumPy, silently: it is a choice.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading

import numpy as np

__all__ = ["combine_numpy", "combine_compiled", "finish_compiled", "compiled_available", "prefetch", "warm",
           "prefetch_where_embedded", "MODE_CONSTANT", "MODE_DIAGONAL_CENTRED", "MODE_DIAGONAL"]

#: a_t = weight[t] (no normalisation, or trace normalisation folded into the weight)
MODE_CONSTANT = 0
#: a_t = weight[t] / sqrt(max(kxx - 2 m_t + shift[t], floor))  (centred, diagonal normalisation)
MODE_DIAGONAL_CENTRED = 1
#: a_t = weight[t] / sqrt(max(kxx, floor))  (diagonal normalisation without centring)
MODE_DIAGONAL = 2


def combine_numpy(src: np.ndarray, powers: np.ndarray, dlQ: np.ndarray, shift: np.ndarray, weight: np.ndarray,
                  kxx: np.ndarray, mode: int, clip: bool, H: np.ndarray, coef: np.ndarray, cent: np.ndarray,
                  offset: int, floor: float, work: np.ndarray | None = None) -> None:
    """The step in whole-block NumPy passes, each kernel through its own thin GEMM; ``src`` is overwritten.

    Without a compiler, forming C costs three (b, n) passes and a row sum per kernel, no less
    than the thin GEMM it saves (measured on W1), so this route projects each kernel on its
    own: G_t = k_t @ [dl_t Q, 1/n] gives the projection and the row mean in one GEMM, and
    ``H += a_t G_t`` -- the same sum as ``C @ Q``.

    Parameters
    ----------
    src : ndarray of shape (b, n)
        The view's source block: an exponentiated RBF family base, or a raw kernel block.
    powers : ndarray of shape (q,), int
        Kernel t is ``src ** 2 ** powers[t]`` (0: the block itself).
    dlQ : ndarray of shape (q, n, c'), src's dtype
        [dl_t Q, 1/n, zeros] (dl_t: 1 / sqrt of the centred landmark diagonal, ones without
        diagonal normalisation; zero columns pad c' to a multiple of 8, which OpenBLAS
        multiplies faster than c + 1 = 21).
    shift, weight : ndarray of shape (q,), float64
        The landmark kernel's grand mean s_t, and the kernel's weight (alpha^2, over the trace
        scale for trace normalisation).
    kxx : ndarray of shape (b, q), float64
        k_t(x, x) of every row.
    mode : int
        ``MODE_CONSTANT``, ``MODE_DIAGONAL_CENTRED`` or ``MODE_DIAGONAL``.
    clip : bool
        Clip ``src`` at 1 first (an RBF base from the expanded squared distance, whose rounding
        can leave an exponent a hair above 0).
    H : ndarray of shape (b, c), float64
        Accumulator of sum_t a_t k_t dl_t Q, updated in place.
    coef, cent : ndarray of shape (b, Q), float64
        Columns ``offset .. offset + q`` receive a_t and a_t (m_t - s_t).
    offset : int
    floor : float
        Floor of the centred self-kernel before its square root.
    work : ndarray of shape (b, n), src's dtype, optional
        Where the derived kernels are formed (allocated when needed if not given).
    """
    c = H.shape[1]
    if clip:
        np.minimum(src, 1.0, out=src)
    # The block itself first, then the squared kernels in increasing power, each from the one
    # before (one (b, n) buffer, no copy), then the square roots the same way.
    ups = sorted((t for t in range(len(powers)) if powers[t] > 0), key=lambda t: powers[t])
    downs = sorted((t for t in range(len(powers)) if powers[t] < 0), key=lambda t: -powers[t])
    for chain in ([t for t in range(len(powers)) if powers[t] == 0], ups, downs):
        done = 0
        for t in chain:
            p = int(powers[t])
            if p == 0:
                k = src
            else:
                if work is None:
                    work = np.empty_like(src)
                k = work
                for step in range(done, abs(p)):
                    prev = src if step == 0 else k
                    if p > 0:
                        np.multiply(prev, prev, out=k)
                    else:
                        np.sqrt(prev, out=k)
                done = abs(p)
            G = (k @ dlQ[t]).astype(np.float64, copy=False)
            m = G[:, c]
            a = _row_factor(m, kxx[:, t], mode, shift[t], weight[t], floor)
            coef[:, offset + t] = a
            cent[:, offset + t] = a * (m - shift[t])
            H += a[:, None] * G[:, :c]


def _row_factor(m: np.ndarray, kxx: np.ndarray, mode: int, shift: float, weight: float, floor: float) -> np.ndarray:
    if mode == MODE_DIAGONAL_CENTRED:
        return weight / np.sqrt(np.maximum(kxx - 2.0 * m + shift, floor))
    if mode == MODE_DIAGONAL:
        return weight / np.sqrt(np.maximum(kxx, floor))
    return np.full(m.shape, weight)


def _bits_as_float32(typingctx, bits):
    """An int32's bits read as a float32 (LLVM bitcast): 2^k as an exponent field, in a vector lane."""
    from llvmlite import ir
    from numba import types

    def codegen(context, builder, signature, args):
        _prefer_512_bit_vectors(builder.function)
        return builder.bitcast(args[0], ir.FloatType())
    return types.float32(types.int32), codegen


def _prefer_512_bit_vectors(function) -> None:
    """Let LLVM vectorise ``function``'s loops 16 floats wide on a CPU with AVX-512.

    LLVM's x86 tuning prefers 256-bit vectors on Intel's AVX-512 server cores (a frequency
    licence that pays off only for long vector loops), which is what the combination's loops
    are: measured on W1's blocks, the exp-and-combine step took 0.83 against 1.05 us a row and
    view at 256 bits.  The per-function attribute is clang's ``-mprefer-vector-width=512``,
    scoped to this function instead of numba's process-wide ``NUMBA_CPU_FEATURES``.  llvmlite
    lists only the attributes it knows, so the string attribute is added to the set directly;
    on CPUs without AVX-512 it changes nothing.
    """
    attribute = '"prefer-vector-width"="512"'
    if attribute not in function.attributes:
        set.add(function.attributes, attribute)


def _expf(x):
    """exp(x) in float32, written out so that numba vectorises it with the loop around it.

    numba's ``np.exp`` calls libm once per element (3.35 ns against NumPy's 0.47 ns/element,
    bench/RESULTS.md, roofline primitives) unless Intel's SVML is installed, and NumPy's own
    SIMD exp is a separate pass that writes the (b, n) block out and reads it back.  This is
    Cephes' expf (2^k e^r, |r| <= ln2/2, a degree-6 polynomial; measured within 1 ulp of the
    float64 exp on [-30, 0], NumPy's float32 exp up to 2.4 ulp), inlined into the loop that
    consumes it.  Arguments below -87.34 (results below float32's smallest normal) give 0 and
    above 88 give exp(88); the callers clip at 1 and only pass arguments <= ~0.
    """
    lo = np.float32(-87.33654)
    xc = x if x > lo else lo
    xc = xc if xc < np.float32(88.0) else np.float32(88.0)
    k = np.floor(xc * np.float32(1.44269504088896341) + np.float32(0.5))
    # ln 2 in two parts: k * 0.693359375 is exact in float32 (9 significant bits)
    r = xc - k * np.float32(0.693359375) + k * np.float32(2.12194440e-4)
    y = np.float32(1.9875691500e-4)
    y = y * r + np.float32(1.3981999507e-3)
    y = y * r + np.float32(8.3334519073e-3)
    y = y * r + np.float32(4.1665795894e-2)
    y = y * r + np.float32(1.6666665459e-1)
    y = y * r + np.float32(5.0000001201e-1)
    y = y * (r * r) + r + np.float32(1.0)
    y = y * _BITS_AS_FLOAT32((np.int32(k) + np.int32(127)) << np.int32(23))
    return y if x > lo else np.float32(0.0)


def _pow_4_16(x):
    """x^4 and x^16 by four squarings: rbf-grid's sigma and sigma/2 kernels from its sigma x 2 one."""
    x4 = x * x
    x4 = x4 * x4
    x16 = x4 * x4
    return x4, x16 * x16


def _row_terms(m, kxx, shift, weight, mode, floor, coef, cent, i, slot):
    """One row's factor a_t for kernel slot ``slot`` (row mean m), stored with its centring term."""
    if mode == MODE_DIAGONAL_CENTRED:
        a = weight / np.sqrt(max(kxx - 2.0 * m + shift, floor))
    elif mode == MODE_DIAGONAL:
        a = weight / np.sqrt(max(kxx, floor))
    else:
        a = weight
    coef[i, slot] = a
    cent[i, slot] = a * (m - shift)
    return a


# numba objects, made with the compiled step (numba is optional): the intrinsic, and the
# helpers above jitted to be inlined into the loops (inlined in numba's IR: the same code)
_BITS_AS_FLOAT32 = None
_EXP32 = None
_POW_4_16 = None
_ROW_TERMS = None


def _combine_loops(src, X, cb, scale, exp_source, powers, dl, shift, weight, kxx, mode, clip, C, coef, cent, offset,
                   floor, accumulate):
    """The same step row by row (compiled by numba), the row in L1 throughout.

    With ``exp_source`` (float32 only) ``src`` is the distance GEMM's block G = X (2 c L^T) and
    the kernel row is formed here: exp(scale[1] (G_ij - c ||x_i||^2 + cb_j)), c = scale[0],
    cb_j = -c ||l_j||^2 (``scale``: shape (2,), src's dtype, so float32 stays float32), clipped
    at 1 -- the exponential of the view's scaled squared distances without NumPy's exp pass
    over the (b, n) block (one write and one read of it less).
    Otherwise ``src`` is the kernel block itself (``X``, ``cb`` and ``scale`` unused).

    With ``accumulate`` False the first kernel's term is stored into C instead of added, so the
    block's first source needs no zeroed C (a (b, n) pass: 3% of a W1 row); the result is the
    sum added to zeros, up to the order of its roundings (LLVM may fuse the multiply-adds of the
    two loops differently), and does not depend on what C held.

    ``rbf-grid``'s family (a clipped source with powers 0, 2 and 4: sigma x 2, x 1, x 0.5) goes
    through two passes over the source row: the three row sums, then C += sum_t a_t dl_t k_t
    with the kernels recomputed from the source row (four squarings) rather than stored and
    read back, so the (b, n) accumulator is read and written once for the three.  Any other
    source goes kernel by kernel.
    """
    b, n = src.shape
    q = powers.shape[0]
    base = np.empty(n, dtype=src.dtype)
    work = np.empty(n, dtype=src.dtype)
    base[0] = 1.0
    one = base[0]  # 1 in src's dtype: float32 arithmetic stays float32
    zero = one - one
    slot = np.full(5, -1)
    for t in range(q):
        if 0 <= powers[t] <= 4:
            slot[powers[t]] = t
    family = clip and q == 3 and slot[0] >= 0 and slot[2] >= 0 and slot[4] >= 0
    af = np.zeros(3, dtype=src.dtype)
    for i in range(b):
        row = src[i]
        crow = C[i]
        # the source row, clipped, in L1
        if exp_source:
            xi = X[i]
            r = zero
            for k in range(xi.shape[0]):
                r += xi[k] * xi[k]
            r = -scale[0] * r
            sc = scale[1]
            for j in range(n):
                x = _EXP32(sc * ((row[j] + r) + cb[j]))
                base[j] = x if x < one else one
        elif clip:
            for j in range(n):
                x = row[j]
                base[j] = x if x < one else one
        else:
            for j in range(n):
                base[j] = row[j]
        if family:
            s0 = zero
            s1 = zero
            s2 = zero
            for j in range(n):
                x = base[j]
                x4, x16 = _POW_4_16(x)
                s0 += x
                s1 += x4
                s2 += x16
            t0, t1, t2 = slot[0], slot[2], slot[4]
            for u in range(3):
                t = (t0, t1, t2)[u]
                m = float((s0, s1, s2)[u]) / n
                af[u] = one * _ROW_TERMS(m, kxx[i, t], shift[t], weight[t], mode, floor, coef, cent, i, offset + t)
            f0, f1, f2 = af[0], af[1], af[2]
            d0, d1, d2 = dl[t0], dl[t1], dl[t2]
            if accumulate:
                for j in range(n):
                    x = base[j]
                    x4, x16 = _POW_4_16(x)
                    crow[j] += f0 * d0[j] * x + f1 * d1[j] * x4 + f2 * d2[j] * x16
            else:
                for j in range(n):
                    x = base[j]
                    x4, x16 = _POW_4_16(x)
                    crow[j] = f0 * d0[j] * x + f1 * d1[j] * x4 + f2 * d2[j] * x16
            continue
        for t in range(q):
            p = powers[t]
            tot = one - one
            if p == 0:
                for j in range(n):
                    x = base[j]
                    work[j] = x
                    tot += x
            elif p == 1:
                for j in range(n):
                    x = base[j] * base[j]
                    work[j] = x
                    tot += x
            elif p == 2:
                for j in range(n):
                    x = base[j] * base[j]
                    x = x * x
                    work[j] = x
                    tot += x
            elif p == 3:
                for j in range(n):
                    x = base[j] * base[j]
                    x = x * x
                    x = x * x
                    work[j] = x
                    tot += x
            elif p == 4:
                for j in range(n):
                    x = base[j] * base[j]
                    x = x * x
                    x = x * x
                    x = x * x
                    work[j] = x
                    tot += x
            elif p == -1:
                for j in range(n):
                    x = np.sqrt(base[j])
                    work[j] = x
                    tot += x
            elif p == -2:
                for j in range(n):
                    x = np.sqrt(np.sqrt(base[j]))
                    work[j] = x
                    tot += x
            else:
                for j in range(n):
                    x = base[j]
                    if p > 0:
                        for _ in range(p):
                            x = x * x
                    else:
                        for _ in range(-p):
                            x = np.sqrt(x)
                    work[j] = x
                    tot += x
            m = float(tot) / n
            af0 = one * _ROW_TERMS(m, kxx[i, t], shift[t], weight[t], mode, floor, coef, cent, i, offset + t)
            d = dl[t]
            if accumulate or t > 0:
                for j in range(n):
                    crow[j] += af0 * d[j] * work[j]
            else:
                for j in range(n):
                    crow[j] = af0 * d[j] * work[j]


def _finish_loops(P, cent, coef, U, V, center, unit, out):
    """H = P - cent U - coef V, optionally scaled to unit rows, in float64, stored into ``out``.

    One compiled call per block for what took eight NumPy calls on (b, c) arrays (two small
    GEMMs, the sum, the norm, the division, two casts): ~0.2 us a W1 row of Python and call
    overhead.  The sums run in float64 as before; only their order differs from NumPy's.
    """
    b, c = P.shape
    q = cent.shape[1]
    h = np.empty(c)
    tiny = np.finfo(np.float64).tiny
    for i in range(b):
        for k in range(c):
            h[k] = P[i, k]
        if center:
            for t in range(q):
                ct = cent[i, t]
                cf = coef[i, t]
                for k in range(c):
                    h[k] -= ct * U[t, k] + cf * V[t, k]
        if unit:
            ss = 0.0
            for k in range(c):
                ss += h[k] * h[k]
            norm = max(np.sqrt(ss), tiny)
            for k in range(c):
                out[i, k] = h[k] / norm
        else:
            for k in range(c):
                out[i, k] = h[k]


_COMPILED: list = []
_NO_EXP: dict = {}  # per dtype: the exp arguments of a call without one
_LOCK = threading.Lock()
_PREFETCHED: set = set()


def _compiled_finish():
    _compiled()
    return _COMPILED[1] if len(_COMPILED) > 1 else None


def compiled_available() -> bool:
    """Whether the compiled combination is used: numba importable and not ``MKDIST_NUMBA=0``.

    Decided by the environment alone, never by timing or by the size of a call, so that a row
    gets the same float32 bits in any process, chunk or run (the two routes differ by float32
    rounding, ~3e-6 on a unit embedding row).
    """
    if os.environ.get("MKDIST_NUMBA", "1") == "0":
        return False
    return _compiled() is not None


def _compiled():
    with _LOCK:
        if not _COMPILED:
            try:
                import numba
            except Exception as exc:  # noqa: BLE001 - ImportError, or numba's own refusal of this NumPy
                _COMPILED.append(None)
                _say_numpy_route(exc)
            else:
                # cache=True: the machine code is kept beside this module (or in numba's user
                # cache), so a new process loads it (~0.3-1 s with numba's import) instead of
                # compiling again (~3-6 s per dtype).  Reassociation lets the row sums
                # vectorise; no finite-math assumptions.
                from numba.extending import intrinsic

                global _BITS_AS_FLOAT32, _EXP32, _POW_4_16, _ROW_TERMS
                _BITS_AS_FLOAT32 = intrinsic(_bits_as_float32)
                # contract: the polynomial's multiply-adds fused (no reassociation: Horner's order)
                _EXP32 = numba.njit(inline="always", fastmath={"contract"})(_expf)
                _POW_4_16 = numba.njit(inline="always")(_pow_4_16)
                _ROW_TERMS = numba.njit(inline="always")(_row_terms)
                _COMPILED.append(numba.njit(cache=True, nogil=True,
                                            fastmath={"reassoc", "contract", "nsz"})(_combine_loops))
                # no fastmath: the float64 sums keep their written order
                _COMPILED.append(numba.njit(cache=True, nogil=True)(_finish_loops))
    return _COMPILED[0]


def _say_numpy_route(exc: BaseException) -> None:
    """Once per process (``_compiled`` fills its list once): the embedding runs the slower route."""
    message = (f"mkdist: numba cannot be imported in process {os.getpid()} ({type(exc).__name__}: {exc}); MKC's "
               "embedding takes the NumPy route, ~2x slower per row, same clusters up to float32 rounding. "
               "Install a numba that imports with this NumPy (pip install 'numba>=0.68') for the compiled route.")
    logging.getLogger("mkdist").warning(message)


def _numba_installed() -> bool:
    import importlib.util

    return os.environ.get("MKDIST_NUMBA", "1") != "0" and importlib.util.find_spec("numba") is not None


def prefetch(dtype: str) -> None:
    """Load the compiled step for ``dtype`` in a background thread of this process, once.

    A new process pays numba's import and the cached machine code's load (0.3-2 s, more on a
    busy machine) at its first compiled call; started while the landmark model is fitted, that
    time overlaps the fit instead of the first embed task.  Returns at once; a call that
    arrives before the load is done waits for it (numba's compiler lock).
    """
    key = np.dtype(dtype).str
    with _LOCK:
        if key in _PREFETCHED or not _numba_installed():
            return
        _PREFETCHED.add(key)
    threading.Thread(target=_load, args=(np.dtype(dtype),), name="mkdist-numba-prefetch", daemon=True).start()


def _load(dtype: np.dtype) -> None:
    from ._profiles import warm_loops

    warm_loops(dtype)  # the labels pass's profile loops, read from the same disk cache
    fn = _compiled()
    if fn is not None:
        finish = _compiled_finish()
        P = np.ones((1, 1), dtype=dtype)
        finish(P, np.ones((1, 1)), np.ones((1, 1)), np.ones((1, 1)), np.ones((1, 1)), True, True, P)
        src = np.ones((1, 1), dtype=dtype)
        unused = np.zeros(2, dtype=dtype)
        fn(src, np.zeros((1, 1), dtype=dtype), unused, unused, dtype == np.float32, np.zeros(1, dtype=np.int64),
           np.ones((1, 1), dtype=dtype), np.zeros(1), np.ones(1), np.ones((1, 1)), MODE_CONSTANT, True,
           np.zeros((1, 1), dtype=dtype), np.empty((1, 1)), np.empty((1, 1)), 0, 1e-12, True)


def warm(dtypes=("float32", "float64")) -> bool:
    """Compile (or load from numba's disk cache) the compiled step for ``dtypes`` in this process, now.

    numba keeps the machine code on disk (``cache=True``: beside this module when that directory
    is writable, else in numba's user cache or ``NUMBA_CACHE_DIR``), so a process that runs this
    once -- ``make setup``, deploy/Dockerfile's build -- leaves every later process on the machine
    a ~0.3-2 s load instead of a 4-9 s compilation per dtype.  Returns whether the compiled step
    is used here (False: numba cannot be imported, or ``MKDIST_NUMBA=0``).
    """
    if not compiled_available():
        return False
    for dtype in dtypes:
        _load(np.dtype(dtype))
    return True


def prefetch_where_embedded(dtype: str) -> None:
    """:func:`prefetch` on every worker of the active Dask client, and on every worker that joins it
    later, at its start (a worker plugin; registering it does not wait for the load); or in this
    process when there is no client: where the rows will be embedded."""
    if not _numba_installed():
        return
    from ._cluster import active_client

    client = active_client()
    if client is None:
        prefetch(dtype)
    else:
        plugin = _compiled_warmup_plugin(np.dtype(dtype).str)
        with contextlib.suppress(Exception):  # a speed-up only: a cluster that refuses it runs as before
            client.register_plugin(plugin, name=plugin.name)


def _compiled_warmup_plugin(dtype: str):
    from distributed.diagnostics.plugin import WorkerPlugin

    class CompiledWarmup(WorkerPlugin):
        """Loads the compiled step for one dtype in the background of each worker, at its start."""

        name = f"mkdist-compiled-{dtype}"

        def setup(self, worker):
            prefetch(dtype)

    return CompiledWarmup()


def combine_compiled(src, powers, dl, shift, weight, kxx, mode, clip, C, coef, cent, offset, floor,
                     accumulate: bool = True, exp_of: tuple | None = None) -> None:
    """The step through the compiled loops: ``C += a_t dl_t k_t`` (numba must be installed).

    Parameters as :func:`combine_numpy`, except ``dl`` : ndarray of shape (q, n) (the column
    scales alone), ``C`` : ndarray of shape (b, n) in src's dtype (the accumulator), and
    ``accumulate`` : bool, default True (False: ``C = sum_t a_t dl_t k_t``, C's contents
    ignored, for the block's first source); ``src`` is left as it is.

    exp_of : tuple (X, cb, c, scale), optional
        float32 only: ``src`` is the distance GEMM's block G = X (2 c L^T) and the source is
        ``min(exp(scale (G - c ||x_i||^2 + cb[None, :])), 1)``, formed row by row in the loop
        (X : ndarray of shape (b, d), the rows, cb : ndarray of shape (n,), -c ||l_j||^2,
        float32; c, scale : float).  ``clip`` is then implied.
    """
    fn = _compiled()
    if fn is None:
        raise ImportError("numba cannot be imported: pip install 'numba>=0.68'")
    dt = src.dtype
    if exp_of is None:
        X, cb, scale = _NO_EXP.get(dt.str) or _NO_EXP.setdefault(dt.str, (np.zeros((1, 1), dt), np.zeros(1, dt),
                                                                          np.zeros(2, dt)))
    else:
        if dt != np.float32:
            raise TypeError(f"the compiled exp is float32 only, got a {dt} block")
        X, cb, scale = exp_of[0], exp_of[1], np.array([exp_of[2], exp_of[3]], dtype=dt)
        clip = True
    fn(src, X, cb, scale, exp_of is not None, powers, dl, shift, weight, kxx, int(mode),
       bool(clip), C, coef, cent, int(offset), float(floor), bool(accumulate))


def finish_compiled(P: np.ndarray, cent: np.ndarray, coef: np.ndarray, U: np.ndarray, V: np.ndarray, center: bool,
                    unit: bool, out: np.ndarray) -> np.ndarray:
    """The block's last step compiled: ``out = unit?(P - cent @ U - coef @ V)`` (numba must be installed).

    Parameters
    ----------
    P : ndarray of shape (b, c)
        C @ Q, in the block's dtype.
    cent, coef : ndarray of shape (b, q), float64
        The centring terms of :func:`combine_compiled`.
    U, V : ndarray of shape (q, c), float64
    center : bool
        Subtract the centring terms (False: P as it is).
    unit : bool
        Scale each row to unit length (a zero row stays zero), in float64.
    out : ndarray of shape (b, c)
        Where the rows go, in any float dtype (may be P itself).

    Returns
    -------
    out
    """
    fn = _compiled_finish()
    if fn is None:
        raise ImportError("numba cannot be imported: pip install 'numba>=0.68'")
    fn(P, cent, coef, U, V, bool(center), bool(unit), out)
    return out
