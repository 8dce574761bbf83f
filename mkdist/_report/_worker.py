"""The run report's drawing process: ``python -m mkdist._report._worker``.

A run draws its report's figures while it goes on (``mkdist._report._summary.ReportDraft``).  Drawing
in a thread of the run's process held the GIL beside Dask's scheduler, which a LocalCluster
runs in that process: the embed stage of a 1M-row run took 1-2.7 s longer for 0.9 s of
drawing (bench/RESULTS.md, "Run report cost").  This process draws instead, at a lower
priority (``nice`` 10), so the workers and the scheduler are served first; it imports
matplotlib while the run fits its model (the fit keeps one core of two busy).

Protocol, one JSON line each way per request, so no pipe ever holds more than a line:
the run sends ``{"data": path of the report data (JSON, its arrays beside it in .npz; see
``mkdist._report._files.load_report_data``), "kinds": [figure kinds],
"out_dir": directory}``; this process draws the figures with
:func:`mkdist._report._figures.build_figures`, writes each as ``<out_dir>/<name>.png`` and
answers ``{"figures": [{"name", "title", "caption", "section", "kind", "size", "png"}],
"omitted": {...}, "kinds": [...], "cpu_s": CPU seconds so far, "import_cpu_s" and
"imported_at": when its imports were done, "received" / "answered": when it read the request
and answered (``time.time()``)}`` (or ``{"error": ...}`` and the times).
It exits when its standard input closes.
"""

from __future__ import annotations

import json
import os
import sys
import time


def serve(requests, replies, ready: dict | None = None) -> None:
    """Answer each request line of ``requests`` with one line on ``replies``; ``ready`` (the
    CPU seconds and the time at which the imports were done) goes into every answer."""
    from mkdist._report._figures import build_figures
    from mkdist._report._files import load_report_data

    for line in requests:
        received = time.time()
        try:
            request = json.loads(line)
            data = load_report_data(request["data"])
            figures = build_figures(data, kinds=tuple(request["kinds"]))
            drawn = []
            for name, fig in figures.figures.items():
                path = os.path.join(request["out_dir"], f"{name}.png")
                with open(path, "wb") as f:
                    f.write(fig.png())
                drawn.append({"name": name, "title": fig.title, "caption": fig.caption, "section": fig.section,
                              "kind": fig.kind, "size": list(fig.size_inches()), "png": path})
            reply = {"figures": drawn, "omitted": figures.omitted, "kinds": figures.kinds}
        except Exception as exc:  # noqa: BLE001 -- the run draws these figures itself at the end
            reply = {"error": f"{type(exc).__name__}: {exc}"}
        reply.update(cpu_s=time.process_time(), received=received, answered=time.time(), **(ready or {}))
        replies.write(json.dumps(reply) + "\n")
        replies.flush()


def main() -> None:
    try:
        os.nice(10)
    except (AttributeError, OSError):  # no nice on this platform: same priority
        pass
    # Imported now, before the first request: the run is still fitting its model.
    import matplotlib.backends.backend_agg  # noqa: F401
    import matplotlib.figure  # noqa: F401

    import mkdist._report._figures  # noqa: F401
    import mkdist._report._files  # noqa: F401

    serve(sys.stdin, sys.stdout, {"import_cpu_s": time.process_time(), "imported_at": time.time()})


if __name__ == "__main__":
    main()
