"""Every parameter a docstring documents exists in its signature (``make lint``).

pydoclint (PyPI) compares each docstring's arguments with the signature, once per docstring
style the package uses: Sphinx ``:param x:`` (operators, sensors, hooks, as Airflow's own) and
Google ``Args:`` (the rest). This check fails only on its finding that matters to a reader: an
argument in the docstring but not in the signature (a reference that documents ``poll_interval``
for a sensor that takes ``poke_interval``). ``a, b:`` and ``a / b:`` document two arguments at
once; ``kwargs`` stands for ``**kwargs``. Arguments a docstring leaves out are not findings: the
project documents the arguments that need words.

Exit 0 when nothing is extraneous, else 1 with one line per finding::

    .venv/bin/python dev/doc_params.py [PATH ...]   # default: airflow_provider_tsb
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

STYLES = ("sphinx", "google")
#: pydoclint's command, installed beside this interpreter (``make install``: the ``dev`` extra)
PYDOCLINT = str(Path(sys.executable).parent / "pydoclint")
OPTIONS = ["--arg-type-hints-in-docstring=False", "--check-return-types=False", "--check-arg-order=False",
           "--skip-checking-short-docstrings=True", "--check-class-attributes=False", "--skip-checking-raises=True",
           "--quiet"]
FINDING = re.compile(r"^\s+(\d+): DOC103: (\w+) `([\w.]+)`: .*?Arguments in the function signature but not in the "
                     r"docstring: \[(.*?)\]\. Arguments in the docstring but not in the function signature: \[(.*?)\]")
SIGNATURE_ONLY = re.compile(r"^\s+(\d+): DOC10[13]: (\w+) `([\w.]+)`: .*?Arguments in the docstring but not in the "
                            r"function signature: \[(.*?)\]")


def names(listing: str) -> set[str]:
    """The argument names of a pydoclint list ``[a: int, **kw: Any]`` (types and stars dropped;
    ``a, b`` and ``a / b`` are two names)."""
    out = set()
    for item in re.split(r",\s*(?![^\[]*\])", listing):
        name = item.split(":", 1)[0]
        out.update(part.strip().lstrip("*") for part in re.split(r"[,/]", name) if part.strip())
    return out


def signature_names(path: Path, line: int) -> set[str]:
    """The parameter names of the function defined at ``line`` of ``path``."""
    import ast

    tree = ast.parse(path.read_text())
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.lineno <= line <= (node.end_lineno or 0):
            candidates = [n for n in ast.walk(node) if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)
                          and n.lineno == line] or [node]
            fn = candidates[0]
            args = [*fn.args.posonlyargs, *fn.args.args, *fn.args.kwonlyargs]
            extra = [a for a in (fn.args.vararg, fn.args.kwarg) if a is not None]
            return {a.arg for a in [*args, *extra]}
    return set()


def findings(paths: list[str]) -> list[str]:
    """One line per documented argument missing from its signature."""
    found: set[str] = set()
    for style in STYLES:
        run = subprocess.run([PYDOCLINT, f"--style={style}", *OPTIONS, *paths],
                             capture_output=True, text=True, check=False)
        if run.returncode not in (0, 1) or "Traceback" in run.stderr:
            raise SystemExit(f"pydoclint --style={style} failed (exit {run.returncode}):\n{run.stderr[-2000:]}")
        current: Path | None = None
        for raw in (run.stdout + run.stderr).splitlines():
            if raw and not raw[0].isspace():
                current = Path(raw.strip())
                continue
            match = SIGNATURE_ONLY.match(raw)
            if current is None or match is None:
                continue
            line, kind, name, documented = int(match[1]), match[2], match[3], names(match[4])
            missing = documented - signature_names(current, line) - {"kwargs", "args"}
            if missing:
                found.add(f"{current}:{line}: {kind.lower()} {name} documents {sorted(missing)}, "
                          "which its signature does not take: rename or remove them in the docstring")
    return sorted(found)


def main(argv: list[str]) -> int:
    lines = findings(argv or ["airflow_provider_tsb"])
    for line in lines:
        print(line)
    return 1 if lines else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
