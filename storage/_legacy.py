"""Read-only access to run stores of schema version 2 written on local disk.

Until schema version 2, a stage on local disk was committed by renaming its directory
``<url>/<stage>.partial-<uuid>/`` to ``<url>/<stage>/``, after moving the old stage aside:
the stage is its own directory, complete once the marker is in its attributes.  A reader
could find no stage, or read chunks of two versions, while a writer replaced it (issue 23),
which is why schema version 3 commits every stage as a generation named by a pointer.
Nothing writes this layout any more, so reading it as it stands is safe; mkdist reads such
stores and refuses to write them (``RunStore`` says how to re-create the run).
"""

from __future__ import annotations

import json
import posixpath
import re
from typing import Any

from ._verify import MARKER, is_marked

__all__ = ["LegacyDirectories"]

_PARTIAL = re.compile(r"(?P<stage>.+)\.partial-[0-9a-f]{32}")

#: (state, group, marker, problems) of a stage, as ``RunStore``'s ``_Stage`` holds them.
Found = tuple[str, "str | None", "dict[str, Any] | None", list[str]]


class LegacyDirectories:
    """The stages of a schema-2 local store: each one the directory of its own name.

    Parameters
    ----------
    fs : fsspec.AbstractFileSystem
        The local file system.
    root : str
        The store's path on ``fs``.
    """

    def __init__(self, fs: Any, root: str) -> None:
        self._fs, self._root = fs, root

    def locate(self, name: str) -> Found:
        """Stage ``name``: complete or damaged if its directory is marked, incomplete if a
        write of it was left unfinished, else missing."""
        try:
            meta = self._meta(name)
        except ValueError as e:
            return "damaged", name, None, [f"its group metadata {name}/zarr.json is unreadable ({e})"]
        if is_marked(meta):
            return "complete", name, meta["attributes"][MARKER], []
        parent = posixpath.dirname(name)
        unfinished = any(_stage_of(posixpath.join(parent, posixpath.basename(p.rstrip("/")))) == name
                         for p in self._ls(parent))
        if unfinished or self._holds_arrays(name):
            return "incomplete", None, None, []
        return "missing", None, None, []

    def stages(self) -> dict[str, Found]:
        """Every stage found (not verified): marked directories and unfinished writes."""
        found: dict[str, Found] = {}

        def visit(rel: str) -> None:
            for entry in self._ls(rel, detail=True):
                if entry["type"] != "directory":
                    continue
                child = posixpath.join(rel, posixpath.basename(entry["name"].rstrip("/")))
                if stage := _stage_of(child):
                    found.setdefault(stage, ("incomplete", None, None, []))
                    continue
                located = self.locate(child)
                if located[0] in ("complete", "damaged"):
                    found[child] = located
                elif self._holds_arrays(child):
                    found.setdefault(child, ("incomplete", None, None, []))
                else:
                    visit(child)

        visit("")
        return found

    # ---------------------------------------------------------------- internals
    def _abs(self, rel: str) -> str:
        return posixpath.join(self._root, rel) if rel else self._root

    def _ls(self, rel: str, detail: bool = False) -> list[Any]:
        try:
            return self._fs.ls(self._abs(rel), detail=detail)
        except (FileNotFoundError, NotADirectoryError):
            return []

    def _meta(self, rel: str) -> dict[str, Any] | None:
        """The parsed ``zarr.json`` of node ``rel``; None if there is none, ValueError if
        it is unreadable."""
        try:
            raw = self._fs.cat_file(self._abs(posixpath.join(rel, "zarr.json")))
        except (FileNotFoundError, NotADirectoryError, IsADirectoryError):
            return None
        value = json.loads(raw)
        if not isinstance(value, dict):
            raise ValueError(f"it holds a JSON {type(value).__name__}, not an object")
        return value

    def _holds_arrays(self, rel: str) -> bool:
        """Whether directory ``rel`` directly holds arrays (data whose marker never came)."""
        for child in self._ls(rel):
            try:
                meta = self._meta(posixpath.join(rel, posixpath.basename(child.rstrip("/"))))
            except ValueError:
                continue
            if (meta or {}).get("node_type") == "array":
                return True
        return False


def _stage_of(rel: str) -> str | None:
    """The stage whose unfinished write ``rel`` is, or None."""
    m = _PARTIAL.fullmatch(rel)
    return m["stage"] if m else None
