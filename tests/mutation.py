"""Mutation testing of the pure core: ``python -m tests.mutation [MODULE...]`` (docs/testing.md).

Each module in :data:`TARGETS` is mutated by mutmut 3 with only the fast pure tests that cover it,
in a scratch copy of the tree (the work tree is never mutated, an interrupted run leaves nothing
behind), time-boxed; it prints killed / survived / timeout / no tests / not checked per module and
the surviving mutants (``--show`` prints their diffs). ``--floor PCT`` exits 1 when a module's
score is below PCT; CI runs :data:`CI_MODULES` that way (tests/test_mutation.py).

Why mutmut and not cosmic-ray: mutmut forks every mutant from a process that has already imported
pytest, Hypothesis and the code, and runs only the tests that called the mutated function; on this
2-core machine a fresh pytest process (what cosmic-ray starts per mutant) costs ~9 s before the
first test, which would put even the three CI modules at tens of minutes. Its limit: mutmut mutates
function bodies only, not module-level constants (the cause->input maps, ``RST_TO_STATUS``); the
exhaustive (state, input) tests of the table read those on every run.

This module is also the pytest plugin loaded into every mutant run (``-p tests.mutation``):
- it recomputes the tables built at import time (:data:`IMPORT_TIME`): mutmut switches a mutant on
  at call time, so a function called once at import (``_table()``) would never be seen mutated;
- it derandomizes Hypothesis and drops its example database, so a score is reproducible, and
  skips shrinking (the first failing example kills the mutant).
"""

from __future__ import annotations

import argparse
import fnmatch
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from replay.compiled import PURE_ENV

ROOT = Path(__file__).resolve().parent.parent

# The tracker's outcomes are what `replay check` prints: its in-process CLI tests read them too.
# test_check_json_stream: when the tracker hands settled requests to its sink (`_retire`), which no output shows.
_TRACK = ("tests/replay/machine/test_track.py", "tests/replay/machine/test_track_models.py",
          "tests/replay/machine/test_http.py", "tests/replay/machine/test_losses.py",
          "tests/replay/machine/test_golden.py", "tests/replay/cli/test_check_cli.py",
          "tests/replay/cli/test_check_json_stream.py")
# The writer's own tests: a real writer thread on a temporary directory (no sockets).
_WRITER = ("tests/proxy/capture/test_writer.py", "tests/proxy/capture/test_upkeep_writer.py")
# What `diff` prints is its result: the in-process CLI tests read it too (not the one binding a port).
_DIFF_CLI = tuple(
    f"tests/replay/cli/test_diff_cli.py::{name}"
    for name in ("test_identical_captures_exit_0", "test_changed_requests_are_shown_field_by_field_and_exit_1",
                 "test_json_document", "test_diff_lists_the_holes_of_either_capture",
                 "test_a_duplicated_response_line_is_not_a_false_change",
                 "test_payload_matching_on_meta_captures_warns_or_fails")
)  # fmt: skip
#: Module -> the fast pure tests that cover it (never the e2e tier, never sockets).
TARGETS: dict[str, tuple[str, ...]] = {
    "replay/machine/table.py": ("tests/replay/machine/test_table.py", "tests/replay/machine/test_track.py"),
    "replay/machine/groups.py": _TRACK,
    "replay/machine/tracker.py": _TRACK,
    "replay/machine/outcomes.py": _TRACK,
    "proxy/triton/causes.py": ("tests/proxy/triton/test_causes.py",),
    "proxy/triton/inflight.py": ("tests/proxy/triton/test_inflight.py",),
    # test_label_key: the field scanner and cache in front of protobuf's decode give what the decode gives.
    "proxy/triton/labels.py": ("tests/proxy/triton/test_labels.py", "tests/proxy/triton/test_label_key.py"),
    "replay/tools/match.py": ("tests/replay/tools/test_match.py",),
    "replay/capture/schema.py": ("tests/replay/capture",),
    "replay/capture/reader.py": ("tests/replay/capture",),
    "replay/capture/holes.py": ("tests/replay/capture", "tests/replay/machine/test_losses.py"),
    "proxy/capture/gaps.py": ("tests/proxy/capture/test_gaps.py", "tests/proxy/capture/test_writer.py"),
    "proxy/capture/writer.py": _WRITER,
    "replay/tools/diff.py": ("tests/replay/tools/test_diff.py", *_DIFF_CLI),
}
#: Modules scored on part of their functions only (mutmut's names: ``xǁClassǁmethod`` or ``x_function``,
#: fnmatch patterns): the writer's gap accounting, not its file handling (rotation, retention, reopen).
FUNCTIONS: dict[str, tuple[str, ...]] = {
    "proxy/capture/writer.py": tuple(
        f"xǁCaptureWriterǁ{name}"
        for name in ("emit", "counts", "stats", "_take_queue_gap", "_write_batch", "_check_live", "_merge_gap",
                     "_hold_back", "_finish", "_end_record")
    ),
}  # fmt: skip
#: What CI runs (tests/test_mutation.py): the request table, causes, the in-flight set and the writer's pending gap.
CI_MODULES = ("replay/machine/table.py", "proxy/triton/causes.py", "proxy/triton/inflight.py", "proxy/capture/gaps.py")

#: Module -> globals computed at import time (tables built by calling the module's own functions),
#: recomputed before every test from the module's own source, so this list names them but never
#: repeats how they are computed (a copy here went stale once: the schema's required fields).
IMPORT_TIME: dict[str, tuple[str, ...]] = {
    "replay.machine.table": ("_TRANSITIONS", "KEPT_BY_RESPONSE"),
    "replay.capture.schema": (
        "_OMITTED", "_BUILD", "_STICKY_SKIP", "_REQUIRED", "_NULLS", "_TENSOR_CHECKS", "_TENSOR_FIELDS", "_TENSOR_REQUIRED",
        "_CHECKS", "_CHECK_MAP",
    ),
}  # fmt: skip

#: Module -> caches its functions fill as they run (memoised results, compiled decoders), emptied before
#: every test: mutmut forks each mutant from the process that ran the clean tests, so a cache filled
#: there would answer in place of the mutated code (a mutant of the labels' protobuf decode survived
#: that way, never called).
CACHES: dict[str, tuple[str, ...]] = {
    "proxy.triton.labels": ("_requests", "_responses", "_stream_responses", "_SPECS"),
    "replay.capture.schema": ("_SHAPES", "_SPECS"),
}

# mutmut's exit codes of a mutant's test run (mutmut/stats.py), grouped as reported.
_KILLED = {1, 3}
_SURVIVED = {0}
_TIMEOUT = {36, 24, -24, 152, 255}
_NO_TESTS = {5, 33}
_SKIPPED = {34}


@dataclass
class Score:
    """The outcome of one module's run."""

    module: str
    killed: int = 0
    survived: int = 0
    timeout: int = 0
    no_tests: int = 0
    not_checked: int = 0
    other: int = 0
    survivors: list[str] = field(default_factory=list)
    boxed: bool = False  # the time box ended the run before every mutant was checked

    @property
    def checked(self) -> int:
        return self.killed + self.survived + self.timeout + self.no_tests + self.other

    @property
    def percent(self) -> float:
        """Mutants the tests detect (killed, or made to hang) out of those checked."""
        return 100.0 * (self.killed + self.timeout) / self.checked if self.checked else 0.0

    def line(self) -> str:
        box = " (time box hit)" if self.boxed else ""
        return (
            f"{self.module:32} killed {self.killed:4}  survived {self.survived:3}  timeout {self.timeout:2}  "
            f"no tests {self.no_tests:2}  not checked {self.not_checked:3}  score {self.percent:5.1f} %{box}"
        )


def _scratch(module: str, tests: tuple[str, ...], parent: Path) -> Path:
    """A copy of the tree mutmut may mutate, configured for ``module`` and its ``tests``."""
    work = Path(tempfile.mkdtemp(prefix="mutation-", dir=parent))
    junk = shutil.ignore_patterns("__pycache__", ".hypothesis", "e2e", "*.pyc")
    for name in ("proxy", "replay", "tests", "docs"):  # docs: the schema's tests read capture-format.md
        shutil.copytree(ROOT / name, work / name, ignore=junk)
    config = {
        "source_paths": ["proxy/", "replay/"],
        "also_copy": ["docs/"],
        "only_mutate": [module],
        "pytest_add_cli_args_test_selection": list(tests),
        "pytest_add_cli_args": ["-p", "tests.mutation"],
        "use_git_change_detection": False,
    }
    body = "\n".join(f"{key} = {json.dumps(value)}" for key, value in config.items())
    (work / "pyproject.toml").write_text((ROOT / "pyproject.toml").read_text() + f"\n[tool.mutmut]\n{body}\n")
    return work


def _mutmut() -> str:
    beside = Path(sys.executable).with_name("mutmut")
    return str(beside) if beside.exists() else "mutmut"


def _run_boxed(argv: list[str], cwd: Path, box: float, log: Path) -> bool:
    """Run ``argv`` in its own process group; stop the whole group after ``box`` s. True if stopped."""
    with log.open("w") as out:
        # The Python alone: a module compiled from its source would run in place of its mutated file
        # (the stale-build rule would notice, but every other module would then run uncompiled too).
        env = {**os.environ, PURE_ENV: "1"}
        proc = subprocess.Popen(argv, cwd=cwd, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            proc.wait(timeout=box)
            return False
        except subprocess.TimeoutExpired:
            _stop_group(proc)
            return True
        except BaseException:  # Ctrl-C or a pytest timeout: never leave mutmut's workers behind
            _stop_group(proc)
            raise


def _stop_group(proc: subprocess.Popen[bytes]) -> None:
    os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout=20)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def _patterns(module: str, only: list[str] | None = None) -> list[str]:
    """mutmut's mutant-name patterns for what is run of ``module`` ([]: all of it).

    ``only``: mutant names or fnmatch patterns (``--only``, e.g. to re-check the survivors of a run
    after adding tests); else the part of the module in :data:`FUNCTIONS`.
    """
    if only:
        return [name for name in only if name.startswith(module.removesuffix(".py").replace("/", ".") + ".")]
    dotted = module.removesuffix(".py").replace("/", ".")
    return [f"{dotted}.{function}__mutmut_*" for function in FUNCTIONS.get(module, ())]


def _tally(module: str, work: Path, patterns: list[str]) -> Score:
    score = Score(module=module)
    meta = work / "mutants" / (module + ".meta")
    codes: dict[str, int | None] = json.loads(meta.read_text())["exit_code_by_key"] if meta.exists() else {}
    if patterns:
        codes = {k: v for k, v in codes.items() if any(fnmatch.fnmatchcase(k, p) for p in patterns)}
    for name, code in sorted(codes.items()):
        if code is None:
            score.not_checked += 1
        elif code in _KILLED:
            score.killed += 1
        elif code in _TIMEOUT:
            score.timeout += 1
        elif code in _SKIPPED:
            score.not_checked += 1
        elif code in _SURVIVED or code in _NO_TESTS:
            if code in _SURVIVED:
                score.survived += 1
            else:
                score.no_tests += 1
            score.survivors.append(name)
        else:
            score.other += 1
            score.survivors.append(f"{name} (exit {code})")
    return score


def run_module(
    module: str, *, box: float, children: int, show: bool, keep: bool, parent: Path, only: list[str] | None = None
) -> Score:
    """Mutate ``module`` against its tests for at most ``box`` seconds."""
    work = _scratch(module, TARGETS[module], parent)
    patterns = _patterns(module, only)
    try:
        argv = ["nice", "-n", "10", _mutmut(), "run", "--max-children", str(children), *patterns]
        boxed = _run_boxed(argv, work, box, work / "mutmut.log")
        score = _tally(module, work, patterns)
        score.boxed = boxed
        if not score.checked:
            print((work / "mutmut.log").read_text()[-3000:], file=sys.stderr)
        if show:
            for name in score.survivors:
                diff = subprocess.run(
                    [_mutmut(), "show", name.split(" ")[0]], cwd=work, capture_output=True, text=True, check=False
                )
                print(diff.stdout)
        return score
    finally:
        if keep:
            print(f"kept {work}", file=sys.stderr)
        else:
            shutil.rmtree(work, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.mutation", description=__doc__.splitlines()[0])
    parser.add_argument("modules", nargs="*", metavar="MODULE", help=f"source files (default: all of {len(TARGETS)})")
    parser.add_argument("--ci", action="store_true", help=f"the CI set: {', '.join(CI_MODULES)}")
    parser.add_argument("--box", type=float, default=900.0, help="time box per module, seconds (default 900)")
    parser.add_argument("--children", type=int, default=2, help="mutants tested at once (default 2)")
    parser.add_argument("--floor", type=float, help="exit 1 when a module scores below this percentage")
    parser.add_argument("--show", action="store_true", help="print each surviving mutant's diff")
    parser.add_argument("--keep", action="store_true", help="keep the scratch copies (to run mutmut browse there)")
    parser.add_argument("--only", action="append", metavar="MUTANT",
                        help="run only these mutants (names as printed, or fnmatch patterns; repeatable)")
    args = parser.parse_args(argv)
    modules = list(CI_MODULES) if args.ci else args.modules or list(TARGETS)
    unknown = [m for m in modules if m not in TARGETS]
    if unknown:
        parser.error(f"no test selection for {', '.join(unknown)}; known: {', '.join(TARGETS)}")
    failed = False
    with tempfile.TemporaryDirectory(prefix="triton-tap-mutation-") as scratch:
        parent = Path(tempfile.mkdtemp(prefix="triton-tap-mutation-")) if args.keep else Path(scratch)
        for module in modules:
            started = time.monotonic()
            score = run_module(
                module, box=args.box, children=args.children, show=args.show, keep=args.keep, parent=parent,
                only=args.only,
            )
            print(score.line() + f"  ({time.monotonic() - started:.0f} s)", flush=True)
            for name in score.survivors:
                print(f"    survived: {name}", flush=True)
            if args.floor is not None and (score.percent < args.floor or not score.checked):
                print(f"    below the floor of {args.floor:.0f} %", flush=True)
                failed = True
    return 1 if failed else 0


# --- the pytest plugin side (loaded by mutmut's test runs with -p tests.mutation) ---


def pytest_configure(config: Any) -> None:
    """Derandomized Hypothesis without an example database: one score per tree, every run.

    And no shrinking: a mutant is killed by the first failing example; shrinking it to the
    smallest (which the verdict does not need) took most of the time of the schema's slowest
    mutants, whose tests are Hypothesis round trips over whole records.
    """
    from hypothesis import Phase, settings

    settings.register_profile(
        "mutation", derandomize=True, database=None, phases=(Phase.explicit, Phase.reuse, Phase.generate)
    )
    settings.load_profile("mutation")


_COMPILED: dict[str, list[tuple[str, Any]]] = {}


def _assignments(module: Any, names: tuple[str, ...]) -> list[tuple[str, Any]]:
    """The module's own top-level ``NAME = expression`` statements for ``names``, compiled, in file order."""
    if module.__name__ in _COMPILED:
        return _COMPILED[module.__name__]
    import ast
    import inspect

    source = inspect.getsource(module)
    out = []
    for node in ast.parse(source).body:
        target = node.targets[0] if isinstance(node, ast.Assign) else node.target if isinstance(node, ast.AnnAssign) else None
        if isinstance(target, ast.Name) and target.id in names and node.value is not None:  # type: ignore[union-attr]
            expr = ast.Expression(node.value)  # type: ignore[union-attr]
            out.append((target.id, compile(expr, inspect.getfile(module), "eval")))
    missing = set(names) - {name for name, _ in out}
    assert not missing, f"{module.__name__} no longer assigns {sorted(missing)} at import: update IMPORT_TIME"
    _COMPILED[module.__name__] = out
    return out


def pytest_runtest_setup(item: Any) -> None:
    """Recompute import-time tables and empty caches, so the mutant now switched on (if any) is the one used."""
    for module_name, names in IMPORT_TIME.items():
        module = sys.modules.get(module_name)
        if module is None:
            continue
        for attr, code in _assignments(module, names):
            setattr(module, attr, eval(code, vars(module)))  # the module's own expression, in its globals
    for module_name, names in CACHES.items():
        module = sys.modules.get(module_name)
        if module is None:
            continue
        for attr in names:
            cache = getattr(module, attr, None)
            assert callable(getattr(cache, "clear", None)), f"{module_name} has no cache {attr!r} any more: update CACHES"
            cache.clear()


if __name__ == "__main__":
    sys.exit(main())
