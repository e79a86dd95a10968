"""The runs of ``numapin ab``: each variant is ``numapin exec OPTIONS -- COMMAND``, run in randomised blocks.

Every run goes through ``numapin exec``, the baseline ``none`` too (with options that place nothing:
every CPU the process may use, no memory policy, thread pools as they are), so that every variant pays
the same start-up and a variant is exactly what a user would then deploy. A round runs each variant
once, in an order drawn afresh (a drift of the machine's speed hits every variant alike); warm-up
rounds come first and are discarded. A run that fails, times out or yields no value is kept and
reported, never averaged in. While a run lives past a second, numapin's judge samples it (threads
outside its placement, the share of its own memory on other nodes): the last sample is kept.
"""

from __future__ import annotations

import os
import random
import re
import shlex
import signal
import subprocess
import sys
import time

from ...base.choices import Choice
from ...base.environment import AUTOPIN, AUTOPIN_OPTIONS, KEEP
from ...base.errors import UsageError, quoted
from ...base.frozen import frozen, replace
from ...base.text import json_value, printable

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Mapping, Sequence
    from typing import Any

    from ...base.stop import Stop

__all__ = ["Better", "Design", "Metric", "MetricKind", "Run", "Status", "Variant", "experiment", "parse_metric",
           "parse_variant", "run_once"]

#: How much of a run's standard output is kept for a ``regex:`` metric (its end: the figure a program prints
#: last).
_KEPT_OUTPUT = 1 << 20


class Status(Choice):
    """How a run ended."""

    OK = "ok"
    FAILED = "failed"
    """It exited non-zero (or was killed by a signal)."""
    TIMEOUT = "timeout"
    NO_VALUE = "no value"
    """It succeeded, but the metric found no number in what it printed or wrote."""
    INTERRUPTED = "interrupted"


class MetricKind(Choice):
    """What a run's value is."""

    WALL = "wall"
    """Its wall time."""
    REGEX = "regex"
    """A number it prints."""
    JSON = "json"
    """A number in a JSON file it writes."""


class Better(Choice):
    """Which way a metric improves."""

    LOWER = "lower"
    HIGHER = "higher"


@frozen
class Variant:
    """A named set of ``numapin exec`` options (none: the command run with a placement of nothing)."""

    name: str
    options: tuple[str, ...]

    @property
    def words(self) -> str:
        return shlex.join(self.options)


def _nothing(cpus: str) -> tuple[str, ...]:
    """What a variant without options runs under: exec's start-up, none of its placement (``cpus``: every CPU
    allowed; no memory policy; thread pools and NICs as they are)."""
    return ("--cpus", cpus, "--memory", "none", "--threads", "keep", "--nics", "none")


_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.+-]{0,39}\Z")


def parse_variant(text: str) -> Variant:
    """``NAME=EXEC-OPTIONS`` (options as a shell would split them; empty: the baseline's placement of
    nothing)."""
    name, sep, options = text.partition("=")
    if not sep or not _NAME.match(name):
        raise UsageError(f"--variant {quoted(text)}: expected NAME=EXEC-OPTIONS, NAME of letters, digits and "
                         "._+- (e.g. --variant 'bind=--mode node --memory bind')", value=text)
    try:
        words = tuple(shlex.split(options))
    except ValueError as exc:
        raise UsageError(f"--variant {quoted(text)}: {exc}", value=text) from None
    if "--" in words or any(w in ("--dry-run", "--json", "--keep") or w.startswith(("--keep-", "--dry"))
                            for w in words):
        raise UsageError(f"--variant {quoted(text)}: a variant holds numapin exec's placement options only "
                         "(no --, --dry-run, --json or --keep)", value=text)
    return Variant(name, words)


@frozen
class Metric:
    """What a run is judged by: its wall time, a number it prints (``regex``), or one it writes (``json``)."""

    kind: MetricKind
    better: Better
    pattern: str | None = None
    path: str | None = None
    key: str | None = None

    @property
    def words(self) -> str:
        if self.kind is MetricKind.WALL:
            return "wall time (s)"
        if self.kind is MetricKind.REGEX:
            return f"regex {self.pattern}"
        return f"{self.key} in {self.path}"

    def read(self, output: bytes, started: float, wall: float) -> float | None:
        """The run's value, None when it gave none."""
        if self.kind is MetricKind.WALL:
            return wall
        if self.kind is MetricKind.REGEX:
            assert self.pattern is not None
            found = list(re.finditer(self.pattern, output.decode(errors="replace"), re.MULTILINE))
            if not found:
                return None
            last = found[-1]
            return _number(last.group(1) if last.groups() else last.group(0))
        assert self.path is not None and self.key is not None
        try:
            if os.stat(self.path).st_mtime < started:
                return None  # not written by this run: an older run's file says nothing of this one
            with open(self.path, "rb") as file:
                data: Any = json_value(file.read(_KEPT_OUTPUT))
        except OSError:
            return None
        for part in self.key.split("."):
            data = data.get(part) if isinstance(data, dict) else None
        return _number(data)


def _number(value: object) -> float | None:
    if isinstance(value, bool):
        return None
    try:
        found = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return None
    return found if found == found and abs(found) != float("inf") else None


def parse_metric(text: str, better: str | None) -> Metric:
    """``wall`` (lower is better), ``regex:PATTERN`` (its first group, or the whole match, of the last match in
    what the run prints) or ``json:FILE:KEY`` (KEY, dotted, in the JSON FILE the run writes): for the last two,
    ``better`` must say which way is better."""
    word, _, rest = text.partition(":")
    chosen = None if better is None else Better(better)
    if word == MetricKind.WALL and not rest:
        if chosen is Better.HIGHER:
            raise UsageError("--metric wall: a shorter wall time is better; --higher-is-better contradicts it",
                             value=text)
        return Metric(MetricKind.WALL, Better.LOWER)
    if word not in (MetricKind.REGEX, MetricKind.JSON) or not rest:
        raise UsageError(f"--metric {quoted(text)}: expected wall, regex:PATTERN or json:FILE:KEY", value=text)
    if chosen is None:
        raise UsageError(f"--metric {quoted(text)}: say which way is better: --higher-is-better (a throughput) "
                         "or --lower-is-better (a latency)", value=text)
    if word == MetricKind.REGEX:
        try:
            compiled = re.compile(rest, re.MULTILINE)
        except re.error as exc:
            raise UsageError(f"--metric {quoted(text)}: not a regular expression: {exc}", value=text) from None
        if compiled.groups > 1:
            raise UsageError(f"--metric {quoted(text)}: one group at most (the number)", value=text)
        return Metric(MetricKind.REGEX, chosen, pattern=rest)
    path, sep, key = rest.rpartition(":")
    if not sep or not path or not key:
        raise UsageError(f"--metric {quoted(text)}: expected json:FILE:KEY", value=text)
    return Metric(MetricKind.JSON, chosen, path=os.path.abspath(path), key=key)


@frozen
class Run:
    """One run of one variant."""

    variant: str
    round: int
    """0-based; warm-up rounds are negative."""
    status: Status
    value: float | None
    wall: float
    detail: str | None = None
    """Why it failed (its exit status, its last line of stderr), when it did."""
    outside: int | None = None
    """Threads outside the placement at the last sample (runs that lived past a second)."""
    remote: float | None = None
    """Share of its own memory on other nodes than the placement's, at the last sample."""

    def as_dict(self) -> dict[str, Any]:
        return {"variant": self.variant, "round": self.round, "status": self.status.value, "value": self.value,
                "wall": round(self.wall, 6), "detail": self.detail, "outside": self.outside, "remote": self.remote}


@frozen
class Design:
    """How many runs, in what order, and when to stop."""

    rounds: int = 10
    """Rounds measured (each runs every variant once); with ``until_clear``, the most."""
    warmup: int = 1
    until_clear: bool = False
    """Stop as soon as every comparison with the baseline is clear (checked after each round from the
    fifth, each look at its share of the error rate)."""
    max_time: float | None = None
    """Start no run after this many seconds."""
    timeout: float | None = None
    """A run still going after this many seconds is stopped and counted as timed out."""
    seed: int | None = None
    alpha: float = 0.05
    """The chance, over every comparison and look, of calling a difference where there is none."""
    resamples: int = 4000
    """Of each bootstrap interval."""


def _environment(environ: Mapping[str, str]) -> dict[str, str]:
    """The runs' environment: the caller's, less what would make numapin place them a second time (the
    start-up hook's variables): each variant's placement is its exec options alone."""
    dropped = {AUTOPIN, KEEP, *AUTOPIN_OPTIONS.values()}
    return {k: v for k, v in environ.items() if k not in dropped}


def run_once(argv: Sequence[str], environ: Mapping[str, str], metric: Metric, *, timeout: float | None,
             sample: Callable[[int], tuple[int | None, float | None]] | None = None,
             stop: Stop | None = None) -> Run:
    """Run ``argv`` once (its variant and round left blank for the caller). KeyboardInterrupt, or ``stop`` set
    (what ``numapin ab``'s ^C does: a flag, looked at between steps, so that no step is cut in half and no
    run is left behind half started), stops the run (its whole process group and session) and raises
    KeyboardInterrupt.

    The run is a program ``ab`` does not trust: its output is read as it comes and only the last
    :data:`_KEPT_OUTPUT` bytes of each stream kept (a program may print without end); at ``timeout`` its
    process group and session are killed and its pipes closed, whoever still holds them (a child that
    called ``setsid``, a daemon); once it has exited, what holds its pipes gets :data:`_AFTER_EXIT` seconds
    more to finish writing, then is no part of the run.
    """
    started = time.time()
    clock = time.perf_counter()
    proc = subprocess.Popen(list(argv), env=dict(environ), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, start_new_session=True)
    samples: list[tuple[int | None, float | None]] = []
    out, err = _Tail(), _Tail()
    try:
        finished = _collect(proc, clock, timeout, sample, samples, out, err, stop)
    except BaseException:
        _stop(proc)
        raise
    finally:
        for pipe in (proc.stdout, proc.stderr):
            if pipe is not None:
                pipe.close()
    if not finished:
        _stop(proc)
        return Run("", 0, Status.TIMEOUT, None, time.perf_counter() - clock, f"still running after {timeout:g} s")
    wall = time.perf_counter() - clock
    _stop(proc)  # what the run left in its process group and session ends with it
    outside, remote = samples[-1] if samples else (None, None)
    if proc.returncode != 0:
        # The program's own words, shown on a terminal: escaped as a table's cells are.
        last = printable((err.kept().decode(errors="replace").strip().splitlines() or [""])[-1][:200])
        code = proc.returncode
        how = f"killed by signal {-code}" if code < 0 else f"exit {code}"
        return Run("", 0, Status.FAILED, None, wall, how + (f": {last}" if last else ""), outside, remote)
    value = metric.read(out.kept(), started, wall)
    if value is None:
        return Run("", 0, Status.NO_VALUE, None, wall, f"no value for {metric.words}", outside, remote)
    return Run("", 0, Status.OK, value, wall, None, outside, remote)


#: Seconds the pipes of a run that has exited are still read (its last writes, a child finishing its own).
_AFTER_EXIT = 1.0


class _Tail:
    """The last :data:`_KEPT_OUTPUT` bytes of a stream, however much of it comes."""

    def __init__(self) -> None:
        self._data = bytearray()

    def add(self, chunk: bytes) -> None:
        self._data += chunk
        if len(self._data) > 2 * _KEPT_OUTPUT:  # trimmed now and then, not at every chunk
            del self._data[:-_KEPT_OUTPUT]

    def kept(self) -> bytes:
        return bytes(self._data[-_KEPT_OUTPUT:])


def _collect(proc: subprocess.Popen[bytes], clock: float, timeout: float | None,
             sample: Callable[[int], tuple[int | None, float | None]] | None,
             samples: list[tuple[int | None, float | None]], out: _Tail, err: _Tail,
             stop: Stop | None = None) -> bool:
    """Read the run's output into ``out`` and ``err`` until it has exited and its pipes closed (or
    :data:`_AFTER_EXIT` after it exited); every second past the first, a sample of where it runs. False when
    ``timeout`` came first."""
    import selectors

    assert proc.stdout is not None and proc.stderr is not None
    reading = selectors.DefaultSelector()
    reading.register(proc.stdout, selectors.EVENT_READ, out)
    reading.register(proc.stderr, selectors.EVENT_READ, err)
    next_sample = clock + 1.0
    exited_at: float | None = None
    try:
        while True:
            if stop is not None and stop.is_set():
                raise KeyboardInterrupt
            now = time.perf_counter()
            if timeout is not None and now - clock >= timeout:
                return False
            if exited_at is None and proc.poll() is not None:
                exited_at = now
            if exited_at is not None and (not reading.get_map() or now - exited_at >= _AFTER_EXIT):
                proc.wait()
                return True
            if sample is not None and now >= next_sample and exited_at is None:
                next_sample = now + 1.0
                try:
                    samples.append(sample(proc.pid))
                except Exception:  # a process that ended meanwhile, or one the judge cannot read: no sample
                    pass
            wait = 0.1 if exited_at is None and reading.get_map() else 0.02
            if timeout is not None:
                wait = min(wait, max(0.0, timeout - (time.perf_counter() - clock)))
            for key, _ in reading.select(wait) if reading.get_map() else ():
                chunk = os.read(key.fd, 1 << 16)
                if chunk:
                    key.data.add(chunk)
                else:
                    reading.unregister(key.fileobj)
            if not reading.get_map() and exited_at is None:
                time.sleep(wait)  # both pipes closed, the process not yet reaped: poll it again shortly
    finally:
        reading.close()


def _stop(proc: subprocess.Popen[bytes]) -> None:
    """End a run and everything it started: its process group and its session (both the run's own: it was
    started in a new session), then reap it."""
    for pid in _session(proc.pid):
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except OSError:
        pass
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:  # a process the kernel has not let go of yet: reaped on the next run's end
        pass


def _session(sid: int) -> list[int]:
    """The processes of session ``sid`` (its members that left its process group too)."""
    from ...base.errors import ProcessError
    from ...facts import procfs

    found = []
    for pid in procfs.pids():
        try:
            if procfs.stat(pid).session == sid:
                found.append(pid)
        except ProcessError:  # ended meanwhile, or unreadable: not ours to end
            continue
    return found


def experiment(command: Sequence[str], variants: Sequence[Variant], metric: Metric, design: Design, *,
               environ: Mapping[str, str] | None = None, allowed: str = "",
               measure: Callable[[Variant, int], Run] | None = None,
               clear: Callable[[list[Run]], bool] | None = None,
               progress: Callable[[Run], None] | None = None,
               stop: Stop | None = None) -> tuple[list[Run], bool]:
    """Every run of the design: warm-up rounds (discarded by the report), then rounds in random order, until
    ``design.rounds``, ``clear(runs)`` (with ``until_clear``) or ``design.max_time``. The runs, and whether
    ^C cut them short. ``measure`` stands in for the real runs (tests of the design); ``allowed`` is the
    cpulist the baseline runs on."""
    env = _environment(os.environ if environ is None else environ)
    rng = random.Random(design.seed)
    sampler = _sampler()

    def real(variant: Variant, round_: int) -> Run:
        options = variant.options or _nothing(allowed)
        argv = [sys.executable, "-m", "numapin", "exec", *options, "--", *command]
        return replace(run_once(argv, env, metric, timeout=design.timeout, sample=sampler, stop=stop),
                       variant=variant.name, round=round_)

    one = measure or real
    runs: list[Run] = []
    began = time.monotonic()
    for round_ in range(-design.warmup, design.rounds):
        order = list(variants)
        rng.shuffle(order)
        for variant in order:
            if design.max_time is not None and time.monotonic() - began > design.max_time:
                return runs, False
            try:
                if stop is not None and stop.is_set():
                    raise KeyboardInterrupt
                run = one(variant, round_)
            except KeyboardInterrupt:
                runs.append(Run(variant.name, round_, Status.INTERRUPTED, None, 0.0, "stopped by ^C"))
                return runs, True
            runs.append(run)
            if progress is not None:
                progress(run)
        if design.until_clear and round_ >= 4 and clear is not None and clear(runs):
            break
    return runs, False


def _sampler() -> Callable[[int], tuple[int | None, float | None]]:
    """Where a run is, by numapin's judge: threads outside its placement, the remote share of its memory.
    The process numapin exec started is the judged one (its record names the placement)."""

    def sample(pid: int) -> tuple[int | None, float | None]:
        from ...observe.judge import judge

        judged = judge(pid)
        if judged.expected is None:
            return None, None
        return len(judged.outside), judged.remote_share()

    return sample

