"""What README and docs/ say of the commands and their options, held to the parser and the exporter: a command or
option removed, or one added, fails here until the pages say so."""

from __future__ import annotations

import os
import re
import subprocess
import sys

from conftest import REPO
from numapin.cli import COMMANDS, READ_THE_MACHINE, build_parser, guides

CLI = (REPO / "docs" / "cli.md").read_text()
README = (REPO / "README.md").read_text()


def _options() -> dict[str, set[str]]:
    """Each command's options, as its parser has them."""
    parser = build_parser()
    sub = next(a for a in parser._actions if a.dest == "command")
    return {name: {o for a in command._actions for o in a.option_strings}
            for name, command in sub.choices.items()}  # type: ignore[union-attr]


def test_the_command_table_lists_every_command_and_no_other() -> None:
    table = re.findall(r"^\| \[`([a-z]+)`\]\(#\1\) \|", CLI, re.M)
    assert table == list(COMMANDS), set(table) ^ set(COMMANDS)


def test_the_commands_said_to_read_a_machine_are_those_that_take_machine_and_root() -> None:
    options = _options()
    taking = {name for name, opts in options.items() if "--machine" in opts}
    assert taking == {name for name, opts in options.items() if "--root" in opts}
    assert set(READ_THE_MACHINE) == taking  # what `numapin --help` says
    for page, text in (("README.md", README), ("docs/cli.md", CLI)):
        said = re.search(r"The commands that read the machine — ([^—]+) —", text.replace("\n", " "))
        assert said is not None, f"{page} no longer says which commands take --machine"
        assert set(re.findall(r"`([a-z]+)`", said.group(1))) == taking, page


def test_the_metrics_table_is_what_the_exporter_serves() -> None:
    from numapin.tools.exporter import OWN_METRICS
    from numapin.tools.prometheus import METRICS

    rows = [line.split("|")[1] for line in CLI.splitlines() if line.startswith("| `numapin_")]
    documented = {name for cell in rows for name in re.findall(r"`(numapin_[a-z_]+)`", cell)}
    assert documented == set(METRICS) | set(OWN_METRICS), documented ^ (set(METRICS) | set(OWN_METRICS))


def test_the_quick_suites_time_is_stated_once_in_readme() -> None:
    stated = []
    for page in [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]:
        for line in page.read_text().splitlines():
            if re.search(r"quick", line, re.I) and re.search(r"\b\d+\s*(?:<!--[^>]*-->\s*)?s\b", line):
                stated.append(page.name)
    assert stated == ["README.md"], stated


def test_plain_numapin_prints_the_help() -> None:
    done = subprocess.run([sys.executable, "-m", "numapin"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and done.stderr == ""
    assert done.stdout.startswith("usage: numapin") and all(name in done.stdout for name in COMMANDS)


def test_the_guides_path_is_copied_whole_from_a_narrow_terminal() -> None:
    for columns in ("30", "80"):
        done = subprocess.run([sys.executable, "-m", "numapin", "--help"], capture_output=True, text=True,
                              timeout=60, env={**os.environ, "COLUMNS": columns})
        lines = done.stdout.splitlines()
        at = lines.index("Guides:")
        assert lines[at + 1].strip() == guides(), lines[at:]


def _inline_commands() -> list[tuple[str, str, list[str]]]:
    """Every inline ``numapin CMD --option ...`` or ``CMD --option ...`` of README and docs/, outside code blocks
    (those are parsed whole by test_docs): its page, the command and the options it names."""
    options = _options()
    found = []
    for page in [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]:
        text = re.sub(r"```.*?```", "", page.read_text(), flags=re.S)
        for match in re.finditer(r"`([^`\n]+)`", text):
            words = match.group(1).split()
            if len(words) >= 2 and words[0] == "numapin" and words[1] in options:
                command, rest = words[1], words[2:]
            elif len(words) >= 2 and words[0] in options and words[1].startswith("--"):
                command, rest = words[0], words[1:]
            else:
                continue
            rest = rest[:rest.index("--")] if "--" in rest else rest
            named = [w.split("=")[0].rstrip(",.;:)") for w in rest if w.startswith("--") and len(w) > 2]
            if command != "numactl" and named:  # numactl's options are numactl's language
                found.append((page.name, command, named))
    return found


def test_every_option_the_pages_name_inline_is_the_commands() -> None:
    options = _options()
    inline = _inline_commands()
    assert len(inline) >= 30, "the pages name options inline: the reader finds them"
    unknown = [(page, command, o) for page, command, named in inline for o in named
               if o not in options[command] | {"--help", "--version", "--verbose"}]
    assert unknown == [], unknown


def test_the_exit_codes_are_one_enum_and_the_reference_lists_each() -> None:
    from numapin.cli.common import Exit

    said = re.search(r"Exit codes \(`numapin\.cli\.common\.Exit`[^\n]*(?:\n(?!\n)[^\n]*)*", CLI)
    assert said is not None, "docs/cli.md no longer lists the exit codes"
    listed = {int(n) for n in re.findall(r"(?<![\w.])(\d+)\s+[a-z`]", said.group(0))}
    assert listed == {int(code) for code in Exit}, listed


def test_each_command_is_a_module_of_its_own_behind_a_dispatcher() -> None:
    import importlib

    entry = REPO / "src" / "numapin" / "cli" / "__init__.py"
    assert len(entry.read_text().splitlines()) <= 250, "the entry module dispatches; commands live in their modules"
    for name in COMMANDS:
        module = importlib.import_module(f"numapin.cli.{name}")
        assert isinstance(module.HELP, str) and callable(module.arguments) and callable(module.run), name
