"""Lines of code of a package tree, docstrings, comments and blank lines excluded (JSON).

Used by the architecture issue to compare the size of ``mkdist/`` before and after a change:
``python bench/code_size.py mkdist storage flows``.
"""

from __future__ import annotations

import ast
import io
import json
import sys
import tokenize
from pathlib import Path


def _docstring_lines(tree: ast.AST) -> set[int]:
    lines: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            body = getattr(node, "body", [])
            if body and isinstance(body[0], ast.Expr) and isinstance(getattr(body[0], "value", None), ast.Constant) \
                    and isinstance(body[0].value.value, str):
                lines.update(range(body[0].lineno, body[0].end_lineno + 1))
    return lines


def code_lines(path: Path) -> int:
    """Physical lines holding at least one code token that is not part of a docstring."""
    text = path.read_text()
    doc = _docstring_lines(ast.parse(text))
    code: set[int] = set()
    skip = {tokenize.COMMENT, tokenize.NL, tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT,
            tokenize.ENCODING, tokenize.ENDMARKER}
    for tok in tokenize.generate_tokens(io.StringIO(text).readline):
        if tok.type in skip:
            continue
        for line in range(tok.start[0], tok.end[0] + 1):
            if line not in doc:
                code.add(line)
    return len(code)


def main(roots: list[str]) -> None:
    out = {}
    for root in roots:
        files = sorted(Path(root).rglob("*.py"))
        per_file = {str(f): code_lines(f) for f in files}
        out[root] = {"code_lines": sum(per_file.values()), "files": len(files), "per_file": per_file}
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main(sys.argv[1:] or ["mkdist"])
