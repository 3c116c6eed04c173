"""docs/exit-codes.md held to the code: its codes and error classes are replay/errors.py's, every subcommand
of the command tree has a row, and a row says what the command's own `--help` says about its exit codes."""

from __future__ import annotations

import argparse
import re

import pytest

from proxy.cli import build_parser
from replay import errors
from tests.support.paths import ROOT

DOC = (ROOT / "docs" / "exit-codes.md").read_text()
GENERAL, PER_COMMAND = DOC.split("\n## Per command\n")
DASH = "—"


def _rows(text: str) -> list[list[str]]:
    """The cells of the first Markdown table in ``text``, header and rule left out."""
    lines = [line for line in text.splitlines() if line.startswith("|")]
    return [[c.strip() for c in line.strip("|").split("|")] for line in lines[2:]]


def _commands(parser: argparse.ArgumentParser, prefix: str) -> dict[str, argparse.ArgumentParser]:
    """Every runnable subcommand of ``parser`` by its full name (``triton-tap replay check``)."""
    out: dict[str, argparse.ArgumentParser] = {}
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                inner = _commands(sub, f"{prefix} {name}")
                out.update(inner or {f"{prefix} {name}": sub})
    return out


COMMANDS = _commands(build_parser(), "triton-tap")
ROWS = {re.match(r"`([^`]+)`", row[0])[1]: row[1:] for row in _rows(PER_COMMAND)}  # type: ignore[index]


def test_the_codes_and_their_errors_are_those_of_replay_errors() -> None:
    """Each code's number is its constant's, every EXIT_ constant has a row, and the errors a row names get
    that code from exit_code_for, as does every other error class of replay/errors.py (by its base)."""
    rows = _rows(GENERAL)
    assert {name.strip("`"): int(code) for code, name, *_ in rows} == {
        n: getattr(errors, n) for n in dir(errors) if n.startswith("EXIT_")}  # fmt: skip
    named = {cls: int(code) for code, _, _, cell in rows for cls in re.findall(r"`(\w+)`", cell)}
    assert named, "the errors column names the error classes"
    classes = [c for c in vars(errors).values()
               if isinstance(c, type) and issubclass(c, errors.TritonTapError) and c is not errors.TritonTapError]  # fmt: skip
    for cls in classes:
        (code,) = {named[base.__name__] for base in cls.__mro__ if base.__name__ in named}
        assert errors.exit_code_for(cls.__new__(cls)) == code, cls.__name__


def test_every_subcommand_has_one_row() -> None:
    """The per-command table lists exactly the commands of `triton-tap` (a new command needs its row)."""
    assert sorted(ROWS) == sorted(COMMANDS)
    assert all(len(cells) == 3 and all(cells) for cells in ROWS.values())


def _said(parser: argparse.ArgumentParser) -> set[int] | None:
    """The codes of the `Exit 0: ...; 1: ...` sentence of a command's `--help` (None when it has none)."""
    description = " ".join((parser.description or "").split())
    if "Exit " not in description:
        return None
    return {int(c) for c in re.findall(r"(?:\bExit |; )(\d+): ", description[description.index("Exit ") :])}


SAID = {name: codes for name, p in COMMANDS.items() if (codes := _said(p)) is not None}


@pytest.mark.parametrize("command", sorted(SAID))
def test_a_row_says_what_the_commands_help_says(command: str) -> None:
    """Where `--help` states `Exit 0: ...; 1: ...; 2: ...`, the row uses exactly those codes (a dash for the rest)."""
    used = {code for code, cell in zip((0, 1, 2), ROWS[command], strict=True) if cell != DASH}
    assert used == SAID[command], COMMANDS[command].description
