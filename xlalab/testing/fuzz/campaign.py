"""A fuzzing campaign: many programs, every distinct finding shrunk, counted and optionally saved.

Hypothesis stops a run at its first failure and shrinks it. A campaign therefore runs in
rounds (each a hypothesis run of up to ``ROUND`` programs with its own seed): a program
whose finding is new fails its round, hypothesis shrinks it to a minimal program (shrinking
keeps only programs with the same finding signature), and the next round goes on with that
signature known, so one bug is reported once however often programs hit it.
"""

from __future__ import annotations

import hashlib
import json
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from hypothesis import HealthCheck, Phase, given, seed, settings

from xlalab.runtime import metrics

from .differential import Finding, check
from .program import Program
from .strategies import programs, source

ROUND = 100
# Relative to the working directory: `make fuzz` runs from the repository root.
REGRESSIONS = Path("tests") / "fuzz" / "regressions"


class _NewFinding(Exception):
    """Raised inside a hypothesis run to make it shrink a program with a new finding."""


@dataclass
class Report:
    programs: int = 0
    backward: int = 0
    mismatches: int = 0  # programs with a mismatch (during exploration, not shrinking)
    crashes: int = 0
    ops: set[str] = field(default_factory=set)
    findings: list[tuple[Finding, Program]] = field(default_factory=list)  # shrunk, one per signature
    seconds: float = 0.0

    aten_lowered: set[str] = field(default_factory=set)  # aten ops recorded into xla graphs
    aten_fallback: set[str] = field(default_factory=set)  # aten ops that ran on the CPU instead

    def summary(self, menu_size: int) -> str:
        fallback = f" ({', '.join(sorted(self.aten_fallback))})" if self.aten_fallback else ""
        return (
            f"programs: {self.programs} ({self.backward} with backward) in {self.seconds:.0f}s\n"
            f"mismatches: {self.mismatches}\n"
            f"crashes: {self.crashes}\n"
            f"distinct findings: {len(self.findings)}\n"
            f"ops covered: {len(self.ops)} of {menu_size} menu ops; {len(self.aten_lowered)} aten ops "
            f"lowered, {len(self.aten_fallback)} on the CPU fallback{fallback}"
        )


class _Round:
    """One hypothesis run: counts the programs it explores, shrinks the first new finding."""

    def __init__(
        self,
        report: Report,
        known: set[str],
        deadline: float | None,
        journal: Path | None,
        checker: Callable[[Program], Finding | None],
    ) -> None:
        self.journal = journal
        self.checker = checker
        self.report = report
        self.known = known
        self.deadline = deadline
        self.target: str | None = None  # the signature being shrunk
        self.minimal: tuple[Finding, Program] | None = None

    def one(self, program: Program) -> None:
        report = self.report
        if self.target is None:
            if self.deadline is not None and time.monotonic() >= self.deadline:
                return
            report.programs += 1
            report.backward += program.backward
            report.ops |= program.ops()
        if self.journal is not None:
            # A crash of the process itself (an abort in native code) leaves the culprit here.
            self.journal.write_text(program.to_json())
        finding = self.checker(program)
        if finding is None:
            return
        if self.target is None:
            if finding.kind == "crash":
                report.crashes += 1
            else:
                report.mismatches += 1
            if _is_known(finding, program, self.known):
                return
            self.target = finding.signature
        elif finding.signature != self.target:
            return  # a different bug: shrinking must not wander onto it
        self.minimal = (finding, program)
        raise _NewFinding(finding.signature)


def _known_key(finding: Finding, program: Program) -> str:
    """What a shrunk finding adds to the known set.

    A finding is named by the op whose value differs first; a gradient cannot be pinned on
    one op, so a gradient finding is named by the ops of its shrunk program instead.
    """
    if finding.op != "grad":
        return finding.signature
    return finding.signature + ",".join(sorted(program.ops()))


def _is_known(finding: Finding, program: Program, known: set[str]) -> bool:
    if finding.op != "grad":
        return finding.signature in known
    ops = program.ops()
    prefix = finding.signature
    return any(k.startswith(prefix) and set(filter(None, k[len(prefix) :].split(","))) <= ops for k in known)


def run_campaign(
    n_programs: int,
    seed_value: int,
    seconds: float | None = None,
    *,
    on_finding: Callable[[Finding, Program], None] | None = None,
    known: set[str] | None = None,
    journal: Path | None = None,
    checker: Callable[[Program], Finding | None] | None = None,
) -> Report:
    """Run up to ``n_programs`` programs (or until ``seconds`` pass) and shrink each new finding.

    ``journal``, if given, holds the program being run, as JSON (see ``save_regression``).
    ``checker`` runs one program against eager (default: lazy mode, ``differential.check``;
    compiled mode is ``compiled.check``).
    """
    checker = check if checker is None else checker
    report = Report()
    known = set() if known is None else known
    start = time.monotonic()
    deadline = start + seconds if seconds is not None else None
    round_no = 0
    while report.programs < n_programs and (deadline is None or time.monotonic() < deadline):
        one_round = _Round(report, known, deadline, journal, checker)
        run = settings(
            max_examples=min(ROUND, n_programs - report.programs),
            database=None,
            deadline=None,
            suppress_health_check=list(HealthCheck),
            phases=(Phase.generate, Phase.shrink),
            report_multiple_bugs=False,
            print_blob=False,
        )(seed(seed_value * 1_000_003 + round_no)(given(programs())(one_round.one)))
        try:
            run()
        except _NewFinding:
            assert one_round.minimal is not None
            finding, program = one_round.minimal
            known.add(_known_key(finding, program))
            report.findings.append((finding, program))
            if on_finding is not None:
                on_finding(finding, program)
        round_no += 1
    report.seconds = time.monotonic() - start
    # The runtime's counters: xla::<op> per recorded op, aten::<op> per CPU fallback.
    for name, count in list(metrics.COUNTERS.items()):
        if count and name.startswith("xla::"):
            report.aten_lowered.add(name.removeprefix("xla::"))
        elif count and name.startswith("aten::") and name != "aten::_local_scalar_dense":
            report.aten_fallback.add(name.removeprefix("aten::"))
    return report


def describe(finding: Finding, program: Program) -> str:
    """A finding as text: what differs, then the minimal program as runnable Python."""
    head = f"{finding.kind} in {finding.op}" + (" (second run, changed argument)" if finding.variant else "")
    return f"{head}: {finding.detail}\n\n{source(program)}"


def save_regression(finding: Finding, program: Program, folder: Path = REGRESSIONS) -> Path:
    """Write the shrunk program where tests/fuzz replays it; the file name says what it was."""
    folder.mkdir(parents=True, exist_ok=True)
    text = program.to_json()
    digest = hashlib.sha1(text.encode()).hexdigest()[:8]
    slug = re.sub(r"[^a-z0-9_]+", "_", f"{finding.kind}_{finding.op}".lower())
    path = folder / f"{slug}_{digest}.json"
    data = json.loads(text)
    data["found"] = f"{finding.kind} in {finding.op}: {finding.detail}"[:500]
    path.write_text(json.dumps(data, indent=1) + "\n")
    return path
