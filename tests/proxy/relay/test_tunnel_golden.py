"""The old Tunnel gives today what ``equivalence.json`` says it gave (the file is its output, not edited)."""

from __future__ import annotations

import json

import pytest

from tests.proxy.relay.old_tunnel_rig import OldRig
from tests.proxy.relay.test_core_equivalence import CASES, GOLDEN, run


@pytest.mark.parametrize(("conversation", "setup"), CASES, ids=[f"{c}-{s}" for c, s in CASES])
def test_the_tunnel_gives_the_recorded_outcome(conversation: str, setup: str) -> None:
    expected = json.loads(GOLDEN.read_text())[f"{conversation}/{setup}"]
    assert json.loads(json.dumps(run(OldRig, conversation, setup))) == expected
