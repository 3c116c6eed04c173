"""``--match``: the request-matching strategies ``serve`` and ``diff`` share, and their hint."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from typing import TYPE_CHECKING, TextIO

from replay.errors import UserError
from replay.tools.match import STRATEGIES, parse_strategies

if TYPE_CHECKING:
    from replay.tools.captured import CaptureSummary


def strategies_type(text: str) -> tuple[str, ...]:
    try:
        return parse_strategies(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


MATCH_HELP = (f"comma-separated match strategies tried in order: id (model + request id), payload (model + input "
               f"hash; needs --payload full captures: alone it is an error on others, with other strategies a "
               f"warning), order (next unused request of the model); "
               f"default {','.join(STRATEGIES)}")  # fmt: skip


def payload_hint(capture: CaptureSummary, strategies: Sequence[str], what: str, err: TextIO) -> None:
    """``--match payload`` on a capture without request bytes: an error when it is the only strategy
    (nothing could ever match), else a warning that it is skipped for this capture. The default
    strategies (the very :data:`STRATEGIES` object, not a --match the user gave) try payload only
    when they can, so they say nothing."""
    if strategies is STRATEGIES or "payload" not in strategies or capture.matchable_by_payload:
        return
    why = f"{what} holds no request payload bytes: --match payload needs captures recorded with --payload full"
    if all(s == "payload" for s in strategies):
        raise UserError(why)
    print(f"triton-tap: warning: {why}; only {', '.join(s for s in strategies if s != 'payload')} can match", file=err)
