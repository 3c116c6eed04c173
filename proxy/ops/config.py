"""``triton-tap record --config FILE.toml``: the record flags as a TOML file (for sidecars).

Keys are the flag names without ``--`` (``capture-dir = "/captures"``; ``capture_dir`` is accepted
too). Values go through the same argparse types and choices as the flags, so the file can express
exactly what the command line can, and nothing else: an unknown key or a bad value is one line
naming the file and the key. Flags given on the command line override the file (``--redact`` adds
to the file's list).
"""

from __future__ import annotations

import argparse
import tomllib
from pathlib import Path
from typing import Any

from replay.errors import UserError

#: Options of the record parser that are not settings (they cannot appear in a config file).
NOT_SETTINGS = frozenset({"help", "config"})


def config_keys(parser: argparse.ArgumentParser) -> dict[str, argparse.Action]:
    """Config key (flag name without ``--``) -> the argparse action it sets."""
    keys: dict[str, argparse.Action] = {}
    for action in parser._actions:
        if action.dest in NOT_SETTINGS or not action.option_strings:
            continue
        long = next((o for o in action.option_strings if o.startswith("--")), None)
        if long is not None:
            keys[long[2:]] = action
    return keys


def _convert(path: Path, key: str, action: argparse.Action, value: Any) -> Any:
    where = f"config {str(path)!r}: key {key!r}"
    if isinstance(action, argparse._StoreTrueAction):
        if not isinstance(value, bool):
            raise UserError(f"{where} must be true or false, got {value!r}")
        return value
    if isinstance(action, argparse._AppendAction):
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise UserError(f"{where} must be a list of strings, got {value!r}")
        return [_convert_one(where, action, v) for v in value]
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        raise UserError(f"{where} must be a string or a number, got {value!r}")
    return _convert_one(where, action, value)


def _convert_one(where: str, action: argparse.Action, value: str | int | float) -> Any:
    converted: Any = value
    if action.type is not None and callable(action.type):
        try:
            converted = action.type(str(value))
        except (argparse.ArgumentTypeError, ValueError, TypeError) as e:
            raise UserError(f"{where}: {e}") from None
    elif not isinstance(value, str):
        converted = str(value)
    if action.choices is not None and converted not in action.choices:
        raise UserError(f"{where} must be one of {', '.join(map(str, action.choices))}, got {value!r}")
    return converted


def load_config(path: Path, parser: argparse.ArgumentParser) -> dict[str, Any]:
    """The file's settings as ``{dest: value}`` for ``parser.set_defaults``; :class:`UserError` if bad."""
    try:
        with open(path, "rb") as f:
            data = tomllib.load(f)
    except OSError as e:
        raise UserError(f"cannot read config {str(path)!r}: {e.strerror or e}") from None
    except tomllib.TOMLDecodeError as e:
        raise UserError(f"config {str(path)!r} is not valid TOML: {e}") from None
    except UnicodeDecodeError as e:
        raise UserError(f"config {str(path)!r} is not UTF-8 text (byte {e.start}): TOML files must be UTF-8") from None
    keys = config_keys(parser)
    out: dict[str, Any] = {}
    given: dict[str, str] = {}  # dest -> the key that set it
    for raw_key, value in data.items():
        key = raw_key.replace("_", "-")
        action = keys.get(key)
        if action is None:
            raise UserError(f"config {str(path)!r}: unknown key {raw_key!r} (known: {', '.join(sorted(keys))})")
        if action.dest in given:
            # `rotate_mb` and `rotate-mb` are one setting: the later would win without a word.
            raise UserError(f"config {str(path)!r}: keys {given[action.dest]!r} and {raw_key!r} set the same setting")
        given[action.dest] = raw_key
        out[action.dest] = _convert(path, raw_key, action, value)
    return out
