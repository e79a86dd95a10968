"""README.md and docs/: every relative link resolves, every example runs (or at least parses),
and the reference pages name everything the code has."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import REPO

PAGES = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
FENCE = re.compile(r"(?:<!-- (?P<note>[^>]*) -->\s*\n)?```(?P<lang>\w*)\n(?P<body>.*?)```", re.S)
LINK = re.compile(r"!?\[[^\]]*\]\((?P<target>[^)\s]+)\)")


def _id(page: Path) -> str:
    return str(page.relative_to(REPO))


def _prose(text: str) -> str:
    """The page without its fenced blocks (a link or heading inside code is not one)."""
    return FENCE.sub("", text)


def _slug(heading: str) -> str:
    """A heading's anchor as GitHub makes it: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"[`*]|<[^>]+>", "", heading.strip().lower())
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def _anchors(page: Path) -> set[str]:
    return {_slug(line.lstrip("#")) for line in _prose(page.read_text()).splitlines() if line.startswith("#")}


@pytest.mark.parametrize("page", PAGES, ids=_id)
def test_every_relative_link_resolves(page: Path) -> None:
    broken = []
    for found in LINK.finditer(_prose(page.read_text())):
        target = found.group("target")
        if re.match(r"[a-z]+:", target):
            continue  # https:, mailto: ...
        path, _, anchor = target.partition("#")
        into = (page.parent / path).resolve() if path else page
        if not into.exists():
            broken.append(f"{target}: no file {into}")
        elif anchor and into.suffix == ".md" and anchor not in _anchors(into):
            broken.append(f"{target}: no heading #{anchor} in {_id(into)}")
    assert broken == [], broken


def test_the_link_checker_sees_a_broken_link(tmp_path: Path) -> None:
    (tmp_path / "a.md").write_text("# Top\n\n[ok](#top) [gone](b.md) [bad](#nowhere)\n```sh\n[not a link](x.md)\n```\n")
    prose = _prose((tmp_path / "a.md").read_text())
    targets = [m.group("target") for m in LINK.finditer(prose)]
    assert targets == ["#top", "b.md", "#nowhere"] and _anchors(tmp_path / "a.md") == {"top"}
    assert _slug("Which GPU: CUDA_VISIBLE_DEVICES and local ranks") == "which-gpu-cuda_visible_devices-and-local-ranks"


def test_every_guide_is_reachable_from_readme() -> None:
    linked = {(REPO / m.group("target").partition("#")[0]).resolve()
              for m in LINK.finditer(_prose((REPO / "README.md").read_text()))}
    index = REPO / "docs" / "README.md"
    linked |= {(index.parent / m.group("target").partition("#")[0]).resolve()
               for m in LINK.finditer(index.read_text())}
    missing = [_id(p) for p in PAGES[1:] if p.resolve() not in linked and p != index]
    assert missing == [], missing


def test_readme_is_a_landing_page() -> None:
    lines = (REPO / "README.md").read_text().splitlines()
    assert len(lines) <= 220
    first = "\n".join(lines[:30])
    assert "99.6%" in first and "0.00%" in first, "the remote-memory figure belongs on the first screen"
    assert "--machine" in "\n".join(lines[:80]), "trying it without a GPU belongs near the top"


# -- the examples -------------------------------------------------------------------------


def _blocks(lang: str) -> list[tuple[str, str | None, str]]:
    """Every fenced block of ``lang``: (page, the HTML comment just above it, its text)."""
    return [(_id(page), m.group("note"), m.group("body")) for page in PAGES
            for m in FENCE.finditer(page.read_text()) if m.group("lang") == lang]


PYTHON = _blocks("python")
SHELL = _blocks("sh")


@pytest.mark.parametrize(("page", "note", "code"), PYTHON, ids=[f"{p}:{i}" for i, (p, _, _) in enumerate(PYTHON)])
def test_every_python_example_runs(page: str, note: str | None, code: str, pair_root: Path) -> None:
    compile(code, page, "exec")
    if note and note.startswith("not run"):
        assert ":" in note, f"{page}: say why a block is not run (<!-- not run: reason -->)"
        return
    # As README's example runs: a fresh interpreter on the live machine seen as two GPUs on two nodes.
    env = {**os.environ, "NUMAPIN_FSROOT": str(pair_root)}
    for name in ("LOCAL_RANK", "CUDA_VISIBLE_DEVICES", "NUMAPIN_AUTOPIN", "NUMAPIN_APPLIED"):
        env.pop(name, None)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=env)
    assert proc.returncode == 0, f"{page}:\n{code}\n{proc.stderr}"


def _invocations(text: str) -> list[list[str]]:
    """Every ``numapin ...`` command in a shell block, as argv after ``numapin`` (the program after ``--`` cut)."""
    found = []
    for line in text.splitlines():
        line = line.split(" # ")[0]
        for match in re.finditer(r"(?:^|[\s;&|(])numapin\s+([^|;&>]*)", line):
            words = shlex.split(match.group(1))
            found.append(words[:words.index("--")] if "--" in words else words)
    return found


EXAMPLES = [(page, words) for page, _, text in SHELL for words in _invocations(text)]


def test_the_examples_hold_many_commands() -> None:
    assert len(EXAMPLES) >= 25 and {w[0] for _, w in EXAMPLES} >= {"show", "plan", "exec", "threads", "doctor",
                                                                  "snapshot", "machine"}
    assert _invocations("NUMAPIN_AUTOPIN=1 torchrun x.py && numapin exec --gpu 1 -- python -v t.py | head") == [
        ["exec", "--gpu", "1"]]


@pytest.mark.parametrize(("page", "words"), EXAMPLES, ids=[f"{p}:{' '.join(w)}" for p, w in EXAMPLES])
def test_every_command_example_parses_and_synthetic_ones_run(page: str, words: list[str], tmp_path: Path) -> None:
    from numapin.cli import build_parser

    try:
        if words[0] == "numactl":  # numactl's own language, read by its own reader
            from numapin.tools.numactl import parse_numactl

            parse_numactl([*words[1:], *([] if {"--show", "--hardware"} & set(words) else ["true"])])
        else:
            build_parser(words[0]).parse_args(words)
    except SystemExit as exc:
        pytest.fail(f"{page}: numapin {' '.join(words)} does not parse ({exc})")
    # Those that read a synthetic machine and change nothing run for real.
    readonly = words[0] in ("show", "plan", "doctor") or (words[0] == "exec" and "--dry-run" in words)
    if "--machine" in words and readonly:
        run = [w if not w.endswith((".svg", ".html")) else str(tmp_path / w) for w in words]
        proc = subprocess.run([sys.executable, "-m", "numapin", *run, *(["--", "true"] if words[0] == "exec" else [])],
                              capture_output=True, text=True, timeout=120)
        assert proc.returncode in ((0, 1) if words[0] == "doctor" else (0,)), proc.stderr


@pytest.mark.parametrize(("page", "words"), [c for c in EXAMPLES if c[1][0] != "numactl"],
                         ids=[f"{p}:{' '.join(w)}" for p, w in EXAMPLES if w[0] != "numactl"])
def test_a_command_parses_alike_with_only_its_own_parser_built(page: str, words: list[str]) -> None:
    # main() builds only the named sub-command's parser: what it makes of the words must be what the whole
    # parser makes of them.
    from numapin.cli import build_parser

    assert build_parser(words[0]).parse_args(words) == build_parser().parse_args(words)


def test_numapin_help_lists_every_command(capsys: pytest.CaptureFixture[str]) -> None:
    from numapin.cli import COMMANDS, main

    with pytest.raises(SystemExit) as exc:
        main(["--help"])
    listed = {line.split()[0] for line in capsys.readouterr().out.splitlines() if line.startswith("    ")}
    assert exc.value.code == 0 and set(COMMANDS) <= listed


# -- the reference pages name everything ------------------------------------------------------


def test_the_cli_reference_names_every_command_and_option() -> None:
    from numapin.cli import COMMANDS, build_parser

    page = (REPO / "docs" / "cli.md").read_text()
    headings = {line[3:].strip() for line in page.splitlines() if line.startswith("## ")}
    parser = build_parser()
    sub = next(a for a in parser._actions if a.dest == "command")
    missing = [name for name in COMMANDS if name not in headings]
    for name, command in sub.choices.items():  # type: ignore[union-attr]
        missing += [f"{name} {o}" for a in command._actions for o in a.option_strings
                    if o.startswith("--") and o != "--help" and f"`{o}" not in page and f" {o}" not in page]
    assert missing == [], missing


def test_the_doctor_page_lists_every_finding() -> None:
    source = "".join(path.read_text() for path in (REPO / "src" / "numapin" / "tools" / "doctor").glob("*.py"))
    ids = set(re.findall(r'Finding\(\s*"([a-z][a-z-]+)"', source))
    from numapin.base.pinners import PINNERS  # the other pinners' findings are named by their rows

    ids |= {f"{key}-affinity" for key, row in PINNERS.items() if row.fights}
    table = set(re.findall(r"^\| `([a-z][a-z-]+)` \|", (REPO / "docs" / "doctor.md").read_text(), re.M))
    assert len(ids) >= 12 and ids == table, (ids ^ table)


def test_the_environment_page_names_every_variable() -> None:
    from numapin.base import environment

    names: set[str] = set()
    for attribute in environment.__all__:
        value = getattr(environment, attribute)
        names |= {value} if isinstance(value, str) else set(value.values() if isinstance(value, dict) else value)
    page = (REPO / "docs" / "environment.md").read_text()
    assert sorted(n for n in names if f"`{n}`" not in page) == []


def test_the_library_page_states_a_core_and_the_rest_and_together_they_are_every_public_name() -> None:
    import numapin

    text = (REPO / "docs" / "library.md").read_text()
    core = text[text.index("**The core**"):text.index("**The advanced surface**")]
    rest = text[text.index("**The advanced surface**"):text.index("Everything else lives")]
    named = [set(re.findall(r"`([A-Za-z_][A-Za-z0-9_]*)(?:\(|`)", part)) for part in (core, rest)]
    assert named[0] >= {"pin", "pinned", "plan", "machine", "host_buffer", "CpuSet", "UsageError"}, named[0]
    assert not named[0] & named[1] and named[0] | named[1] == set(numapin.__all__), (named, numapin.__all__)
    assert f"({len(numapin.__all__)} of them, a core of {len(named[0])}" in text.replace("\n", " ")
