"""CI's mutation floor: the request table, cause classification, the in-flight set and the writer's pending gap.

Runs ``python -m tests.mutation --ci --floor 90`` (tests/mutation.py: mutmut 3 in a scratch copy of
the tree, each module against its own pure tests). It fails when a module's share of detected
mutants falls below the floor, i.e. when a change to these modules (or their tests) lets a wrong
behaviour through that the tests used to catch. The whole core is run by hand with
``python -m tests.mutation`` (docs/testing.md "Mutation testing").
"""

from __future__ import annotations

import shutil
import subprocess
import sys

import pytest

from tests.mutation import CI_MODULES
from tests.support.paths import ROOT

FLOOR = 90.0
#: Per module; a module whose time box ends it early is scored on what was checked.
BOX_S = 240.0


@pytest.mark.timeout(len(CI_MODULES) * (BOX_S + 60))
@pytest.mark.skipif(shutil.which("nice") is None, reason="the run is niced: no `nice` on this machine")
def test_mutation_score_of_the_ci_modules_stays_above_the_floor() -> None:
    """Every CI module keeps >= FLOOR % of its mutants detected by its tests."""
    argv = [sys.executable, "-m", "tests.mutation", "--ci", "--floor", str(FLOOR), "--box", str(BOX_S)]
    proc = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, check=False)
    print(proc.stdout)
    assert proc.returncode == 0, proc.stdout + proc.stderr[-3000:]
