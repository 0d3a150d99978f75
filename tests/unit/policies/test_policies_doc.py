"""Every registered plugin has its section in docs/policies.md, under its role's chapter:
adding a policy without documenting it fails here."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from policies.plugins import Role
from policies.registry import registered

DOC = Path(__file__).resolve().parents[3] / "docs" / "policies.md"
CHAPTERS: dict[Role, str] = {
    "limit": "## Limits",
    "fairness": "## Fairness",
    "discipline": "## Queue discipline",
    "gate": "## Gates",
}


def _sections(chapter: str) -> set[str]:
    """The plugin names of the ``### `name` ...`` headings of one ``##`` chapter."""
    text = DOC.read_text()
    start = text.index(chapter)
    following = text.find("\n## ", start + len(chapter))
    body = text[start : following if following != -1 else len(text)]
    return set(re.findall(r"^### `([a-z_]+)`", body, flags=re.M))


@pytest.mark.parametrize("role", list(CHAPTERS))
def test_every_registered_plugin_has_a_section_in_its_chapter(role: Role) -> None:
    missing = set(registered(role)) - _sections(CHAPTERS[role])
    assert not missing, f"docs/policies.md ({CHAPTERS[role]}) has no section for {missing}"


def test_no_section_documents_a_plugin_that_is_not_registered() -> None:
    documented = set().union(*(_sections(c) for c in CHAPTERS.values()))
    known = set().union(*(registered(r) for r in CHAPTERS))
    assert documented - known <= {"headroom"}, "headroom is a policy section, not a plugin"
