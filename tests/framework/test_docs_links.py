"""The README is a front page and the rest lives in docs/: every link of the README, docs/ and
benchmarks/README.md reaches a file of the checkout and, with a `#anchor`, a heading of that
file (GitHub's anchors); the README keeps its two commands first and stays short."""

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", ROOT / "benchmarks" / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
README_MAX_LINES = 150
COMMANDS = ("bash scripts/setup.sh && python -m pytest tests/hil", "python -m pytest")

LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")


def without_blocks(text: str) -> str:
    """`text` without its fenced code blocks."""
    return re.sub(r"^(```|~~~).*?^\1\s*$", "", text, flags=re.M | re.S)


def prose(text: str) -> str:
    """`text` without fenced code blocks and inline code, where a link is not a link."""
    return re.sub(r"`[^`\n]*`", "", without_blocks(text))


def slug(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation dropped, spaces as hyphens."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading.strip().lower())
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def anchors(path: Path) -> set[str]:
    found: dict[str, int] = {}
    names = set()
    for line in without_blocks(path.read_text()).splitlines():
        m = re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line)
        if m:
            base = slug(m.group(1))
            n = found.get(base, 0)
            found[base] = n + 1
            names.add(base if n == 0 else f"{base}-{n}")
    names.update(re.findall(r"<a\s+(?:name|id)=\"([^\"]+)\"", path.read_text()))
    return names


def broken_links(page: Path, root: Path = ROOT) -> list[str]:
    broken = []
    for target in LINK.findall(prose(page.read_text())):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # https:, mailto:
            continue
        path_part, _, anchor = target.partition("#")
        dest = (page.parent / path_part).resolve() if path_part else page
        if not dest.exists():
            broken.append(f"{target}: no {dest.relative_to(root) if dest.is_relative_to(root) else dest}")
        elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
            broken.append(f"{target}: no heading #{anchor} in {dest.relative_to(root)}")
    return broken


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_link_reaches_a_file_and_heading(page):
    assert broken_links(page) == []


def test_the_link_check_sees_a_broken_file_and_a_broken_anchor(tmp_path):
    (tmp_path / "other.md").write_text("# The runtime under test\n\n## `ci.py`: CI's time\n")
    page = tmp_path / "page.md"
    page.write_text("[ok](other.md#the-runtime-under-test) [ok](other.md#cipy-cis-time)\n"
                    "[gone](missing.md) [bad anchor](other.md#runtime) [web](https://x.org/y)\n"
                    "`[in code](nowhere.md)`\n\n```text\n[in a block](nowhere.md)\n```\n")
    assert broken_links(page, tmp_path) == ["missing.md: no missing.md",
                                            "other.md#runtime: no heading #runtime in other.md"]


def test_the_readme_is_a_front_page_with_its_two_commands_first():
    text = (ROOT / "README.md").read_text()
    assert len(text.splitlines()) <= README_MAX_LINES
    block = re.search(r"^```bash\n(.*?)^```", text, re.M | re.S).group(1)
    commands = [line.split("#", 1)[0].strip() for line in block.splitlines()]
    assert commands == list(COMMANDS)


def test_every_docs_page_is_reachable_from_the_readme():
    """A page a reader cannot find from the front page is lost: each is linked from the README
    or from a page the README links."""
    def linked(page: Path) -> set[Path]:
        return {(page.parent / t.partition("#")[0]).resolve() for t in LINK.findall(prose(page.read_text()))
                if not re.match(r"^[a-z][a-z0-9+.-]*:", t) and t.partition("#")[0].endswith(".md")}
    first = linked(ROOT / "README.md")
    reached = first | {p for page in first if page.exists() for p in linked(page)}
    assert sorted(str(p.relative_to(ROOT)) for p in set(PAGES[2:]) - reached) == []
