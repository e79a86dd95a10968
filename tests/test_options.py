"""The placement options, declared once (numapin.pinning.options): every surface that takes them is held to it."""

from __future__ import annotations

import inspect
import re
from pathlib import Path

import pytest

import numapin
from numapin.base.environment import AUTOPIN_OPTIONS
from numapin.base.errors import UsageError
from numapin.cli import build_parser
from numapin.pinning.options import NOT_PIN, OPTIONS, default
from numapin.pinning.request import ExecRequest, autopin_request

DOCS = Path(__file__).resolve().parents[1] / "docs" / "cli.md"


def test_the_hook_takes_exactly_the_options_with_a_variable() -> None:
    assert {o.name: o.variable for o in OPTIONS.values() if o.variable} == AUTOPIN_OPTIONS
    assert autopin_request({}) == ExecRequest(program=())  # unset: the table's defaults, which the request's are
    for option in OPTIONS.values():
        assert getattr(ExecRequest(program=()), option.name) == default(option.name) or option.kind == "switch"


@pytest.mark.parametrize("name", [o.name for o in OPTIONS.values() if o.variable])
def test_a_variable_is_parsed_by_its_options_parser_and_named_in_its_error(name: str) -> None:
    option = OPTIONS[name]
    word = option.words[-1] if option.kind == "choice" else "2" if option.kind == "count" else "keep"
    assert getattr(autopin_request({option.variable: f" {word} "}), name) == option.parse(word)
    with pytest.raises(UsageError, match=f"^{option.variable}: ") as caught:
        autopin_request({option.variable: "bogus"})
    assert caught.value.value == "bogus"


@pytest.mark.parametrize("function", [numapin.pin, numapin.pinned])
def test_pin_and_pinned_take_the_options_with_a_keyword_and_their_defaults(function: object) -> None:
    parameters = inspect.signature(function).parameters  # type: ignore[arg-type]
    for option in OPTIONS.values():
        if option.pin_default == NOT_PIN:
            assert option.name not in parameters, option.name
        else:
            assert parameters[option.name].default == option.pin_default, option.name


def test_exec_takes_every_option_with_its_words_and_default() -> None:
    parser = build_parser("exec")
    actions = {a.option_strings[0]: a for a in parser._subparsers._group_actions[0].choices["exec"]._actions  # type: ignore[union-attr]
               if a.option_strings}
    for option in OPTIONS.values():
        action = actions[option.flag]
        assert action.help == option.help or option.name == "mode", option.flag
        if option.kind == "choice":
            assert list(action.choices or ()) == list(option.words)
        if option.name != "mode":  # exec's --mode stays unset unless given: it and --cpus choose the CPUs
            assert action.default == (False if option.kind == "switch" else option.default), option.flag


def test_the_docs_option_table_is_the_declaration() -> None:
    text = DOCS.read_text()
    table = text[text.index("| option | start-up hook | `pin()` | meaning |"):]
    rows = [line for line in table.split("\n\n", 1)[0].splitlines()[2:]]
    found = {}
    for row in rows:
        flag, variable, keyword = (cell.strip() for cell in row.strip("|").split(" | ")[:3])
        found[re.match(r"`(--[\w-]+)", flag).group(1)] = (variable.strip("`"), keyword.strip("`"))  # type: ignore[union-attr]
    assert found == {o.flag: (o.variable or "—", "—" if o.pin_default == NOT_PIN else f"{o.name}={o.pin_default!r}"
                              .replace("'", '"')) for o in OPTIONS.values()}
