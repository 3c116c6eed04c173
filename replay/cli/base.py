"""What every ``triton-tap`` command shares: the parser, argument types, and error -> exit code.

Both command trees (``triton-tap ...`` in :mod:`proxy.cli`, ``python -m replay`` in
:mod:`replay.cli.main`) run through :func:`run_guarded`, so an error a user can meet is one line on
stderr and the same exit code whichever way the command was started. This module imports nothing
heavy: ``triton-tap --help`` must not load the relay, grpc or tritonclient.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import math
import signal
import sys
import threading
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import NoReturn

from replay.errors import EXIT_INTERRUPTED, EXIT_OK, EXIT_USAGE, Damaged, TritonTapError, UserError, exit_code_for

#: Upper bound of the integer flags (--payload-cap, --length): the capture's JSON holds 64-bit ints only.
MAX_INT = 2**31
#: Upper bound of the float flags (seconds, milliseconds, MB): larger ones overflow timers and sizes.
MAX_FLOAT = 1e9


#: What stops a command that records (``replay send``, ``check-cancel``) as Ctrl-C does: a harness's timeout or
#: ``kill`` (SIGTERM), and the terminal it ran in closing (SIGHUP).
STOP_SIGNALS: tuple[signal.Signals, ...] = (signal.SIGTERM, signal.SIGHUP)


@contextlib.contextmanager
def sigterm_interrupts() -> Iterator[None]:
    """Inside, SIGTERM (and SIGHUP: :data:`STOP_SIGNALS`) ends the command as Ctrl-C does (KeyboardInterrupt,
    exit 130), so its ``finally`` blocks run: a harness's timeout, ``kill`` or a closed terminal must leave what
    the command recorded as complete as a Ctrl-C does (a capture with its end, its last records written), not
    cut off by the default action. Outside the main thread (an embedding program) the program's own handling
    stays."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def interrupt(_sig: int, _frame: object) -> None:
        raise KeyboardInterrupt

    old = [(sig, signal.signal(sig, interrupt)) for sig in STOP_SIGNALS]
    try:
        yield
    finally:
        for sig, handler in old:
            signal.signal(sig, handler)


@contextlib.contextmanager
def gc_paused() -> Iterator[None]:
    """No cyclic garbage collection inside: for reads of millions of records.

    Why: a read allocates millions of records and frees them again, none in a reference cycle, so
    each collection only walks what the tool keeps (tracker state, the report's columns) over and
    over: ~20 % of `check`'s time, ~5 % of `report`'s. The collector's state is restored on the way out.
    """
    was_on = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_on:
            gc.enable()


def add_capture_argument(p: argparse.ArgumentParser, *, skip_damaged: bool = False) -> None:
    """The ``CAPTURE...`` positional every offline command takes (one help text for every command);
    ``skip_damaged``: with ``--skip-damaged`` (:func:`add_skip_damaged`)."""
    p.add_argument("capture", nargs="+", metavar="CAPTURE",
                   help="capture files (.jsonl, .jsonl.zst, .jsonl.gz) and/or directories")  # fmt: skip
    if skip_damaged:
        add_skip_damaged(p)


def add_skip_damaged(p: argparse.ArgumentParser) -> None:
    """``--skip-damaged``, for a command that shows the holes of what it read; :func:`run_command` applies it."""
    p.add_argument("--skip-damaged", action="store_true",
                   help="read on past a damaged line (not JSON, not a record) or compressed frame (from the next "
                   "frame that decodes), reporting each as a hole (file, line or byte offset, why), instead of "
                   "stopping with exit 2")  # fmt: skip


def run_command(args: argparse.Namespace) -> int:
    """Run a parsed command (``args.func``), its captures read as its ``--skip-damaged`` says."""
    if not hasattr(args, "skip_damaged"):
        return int(args.func(args))
    from replay.capture.reader import skipping_damaged

    try:
        with skipping_damaged(args.skip_damaged):
            return int(args.func(args))
    except Damaged as e:
        raise type(e)(e.path, e.line, f"{e.reason} ({e.skip_hint})") from None


class Parser(argparse.ArgumentParser):
    """argparse that reports a bad command line as one line (exit :data:`~replay.errors.EXIT_USAGE`)."""

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message} (see --help)\n")


def same_file(a: Path, b: Path) -> bool:
    """Whether two paths name one file (an output that would overwrite an input); False when either does not
    resolve (a symlink loop: reading it then fails in one line of its own)."""
    try:
        return a.resolve() == b.resolve()
    except (OSError, RuntimeError):  # (RuntimeError: Path.resolve's "Symlink loop")
        return False


def positive_float(text: str) -> float:
    """argparse type of every duration/size flag: a finite number in (0, MAX_FLOAT]."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    # nan passes every comparison, inf overflows int(); neither is a duration or a size.
    if not math.isfinite(value) or not 0 < value <= MAX_FLOAT:
        raise argparse.ArgumentTypeError(f"must be a number > 0 and <= {MAX_FLOAT:g}: {text!r}")
    return value


def positive_int(text: str) -> int:
    """argparse type of the count/size flags: an integer in 1..MAX_INT."""
    if not text.isascii() or not text.isdigit() or not 0 < int(text) <= MAX_INT:
        raise argparse.ArgumentTypeError(f"must be an integer 1..{MAX_INT}: {text!r}")
    return int(text)


def seq_number(text: str) -> int:
    """argparse type of a capture's record number: an integer in 0..MAX_INT."""
    if not text.isascii() or not text.isdigit() or not int(text) <= MAX_INT:
        raise argparse.ArgumentTypeError(f"must be a record number 0..{MAX_INT}: {text!r}")
    return int(text)


def parse_pairs(texts: Sequence[str], flag: str, *, empty_value: bool = False) -> dict[str, str]:
    """``KEY=VALUE`` flags given once or more (``--model-map OLD=NEW``, ``--header K=V``) -> dict; raises
    UserError. A key given twice with two values is refused: which one was meant cannot be told (the last
    one given won in silence). ``empty_value``: ``KEY=`` is a value (a header's), else bad input (a model's)."""
    out: dict[str, str] = {}
    for text in texts:
        key, found, value = text.partition("=")
        key = key.strip()
        if not found or not key or not (value or empty_value):
            raise UserError(f"{flag} {text!r}: expected {'KEY=VALUE' if empty_value else 'OLD=NEW'}")
        had = out.setdefault(key, value)
        if had != value:
            raise UserError(f"{flag} {key!r} given twice: {had!r} and {value!r}")
    return out


def hostport(flag: str, *, listen: bool) -> Callable[[str], str]:
    """An argparse type checking ``HOST:PORT`` (port 0 only where a free port can be listened on)."""
    from replay.hostport import parse_hostport

    def check(text: str) -> str:
        try:
            parse_hostport(text, flag, allow_port_zero=listen)
        except UserError as e:
            raise argparse.ArgumentTypeError(str(e)) from None
        return text

    return check


def fail(error: TritonTapError) -> int:
    """Print ``error`` as the one line every command uses; return its exit code."""
    print(f"triton-tap: error: {error}", file=sys.stderr)
    return exit_code_for(error)


def run_guarded(run: Callable[[], int]) -> int:
    """Run a parsed command; errors a user can meet become one line on stderr and an exit code."""
    try:
        return run()
    except TritonTapError as e:
        return fail(e)
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED
    except BrokenPipeError:
        # `check ... | head`: the reader went away; what was computed stands, so not an error of ours.
        return EXIT_OK
