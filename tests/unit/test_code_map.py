"""docs/architecture.md's code map is true: every module under hutch/ is named in the section of its
package, and every module a package's section names exists.

A package's sections are the headings that name it in backticks (`hutch.node`); a module is named
there as its file (`pool.py`, `routes/files.py`), as its folder and its name in backticks (`routes/`
... `files`), or anywhere in the document by its dotted name (`hutch.node.pool`). A folder of
numbered migrations (`migrations/versions/`) is named as a folder. A file name in a package's
section that is no module of it is a stale entry, unless the text gives it a path
(`hutch/e2b/webhooks.py`) that exists.
"""

from __future__ import annotations

import re
from pathlib import Path

import hutch

ROOT = Path(hutch.__file__).parent
DOC = ROOT.parent / "docs" / "architecture.md"
HEADING = re.compile(r"^(#{2,4}) (.*)$", re.MULTILINE)
FILE = re.compile(r"(?<![\w/.-])((?:[a-z_0-9]+/)*[a-z_0-9]+\.py)\b")
PATH = re.compile(r"(?<![\w.-])(?:hutch/)?((?:[a-z_0-9]+/)+[a-z_0-9]+\.py)\b")


def modules() -> dict[str, list[str]]:
    """Each package right under hutch/ and its modules' files, relative to the package."""
    found: dict[str, list[str]] = {}
    for path in sorted(ROOT.rglob("*.py")):
        rel = path.relative_to(ROOT)
        if len(rel.parts) < 2 or rel.name == "__init__.py":
            continue
        found.setdefault(f"hutch.{rel.parts[0]}", []).append("/".join(rel.parts[1:]))
    return found


def sections(text: str, package: str) -> str:
    """The text of every section whose heading names the package, each to the next heading of its
    level or above."""
    heads = list(HEADING.finditer(text))
    parts = []
    for i, head in enumerate(heads):
        if f"`{package}`" not in head.group(2):
            continue
        level = len(head.group(1))
        end = next((h.start() for h in heads[i + 1:] if len(h.group(1)) <= level), len(text))
        parts.append(text[head.start():end])
    return "\n".join(parts)


def test_every_module_is_on_the_map() -> None:
    text = DOC.read_text()
    missing = []
    for package, files in modules().items():
        section = sections(text, package)
        named = {m.group(1) for m in FILE.finditer(section)}
        for file in files:
            dotted = f"{package}.{file[:-3].replace('/', '.')}"
            folder, _, stem = file[:-3].rpartition("/")
            in_folder = bool(folder) and f"{folder}/" in section and (
                f"`{stem}`" in section or re.fullmatch(r"v\d{4}_\w+", stem) is not None)
            if file not in named and file.rsplit("/", 1)[-1] not in named and dotted not in text and not in_folder:
                missing.append(f"{dotted} (in no section naming `{package}`)")
    assert not missing, "docs/architecture.md's code map does not name:\n  " + "\n  ".join(missing)


def test_the_map_names_no_module_that_is_gone() -> None:
    text = DOC.read_text()
    stale = []
    for package, files in modules().items():
        section = sections(text, package)
        if not section:
            stale.append(f"no section's heading names `{package}`")
            continue
        here = {f.rsplit("/", 1)[-1] for f in files}
        folder = ROOT / package.split(".")[1]
        for m in FILE.finditer(section):
            name = m.group(1)
            if "/" in name:  # a path: from the repository, from hutch/, or from the package
                known = any((base / name).exists() for base in (ROOT.parent, ROOT, folder))
            else:
                known = name in here or name.startswith("test_") or (ROOT / name).exists()  # or hutch's own
            if not known:
                stale.append(f"{name} in the section of `{package}`")
    for m in PATH.finditer(text):
        rel = m.group(1)
        if rel.split("/")[0] in {p.name for p in ROOT.iterdir()} and not (ROOT / rel).exists():
            stale.append(f"{rel}: no such module")
    assert not stale, "docs/architecture.md names what does not exist:\n  " + "\n  ".join(sorted(set(stale)))
