"""Plan and run DVC stages one at a time: the logic behind the Prefect flows in ``pipelines/``.

Nothing here imports Prefect. The flows ask DVC for the stage graph (``dvc dag --dot``), pick the
stages to run (matrix items filtered by backbone / seed), and run each with
``dvc repro --single-item <stage>``; DVC keeps caching, the run-cache and ``dvc.lock``.

Concurrency: ``dvc repro`` holds the repository lock only while it collects the graph and while it
commits outputs; it releases the lock while the stage command runs (``dvc.stage.run.unlocked_repo``)
and guards the stage's own dependencies (read) and outputs (write) with a per-path lock. So several
``dvc repro --single-item`` processes on *independent* stages run their commands at the same time;
``--wait-for-lock`` makes each wait for the short locked phases instead of failing.

Failures are classified so that only transient ones are retried (:func:`classify_failure`):

* transient: the stage exited with :data:`EX_TEMPFAIL` (75, sysexits' "try again"; stages use it for an
  unreachable tracking server), was killed by a signal (OOM killer, pre-emption), DVC could not take
  its lock, or the output shows a network / busy-database error and no deterministic error;
* deterministic (never retried): everything else, in particular bad params (``error: params ...``,
  exit 1) and Python exceptions such as ``ValueError``, ``KeyError``, ``FileNotFoundError`` or
  ``NonFiniteLossError`` — rerunning the same command on the same inputs fails the same way.
"""

from __future__ import annotations

import math
import os
import re
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from focalcse.errors import EX_TEMPFAIL  # re-exported: importers find it here
from focalcse.stage_table import dvc_str

TRANSIENT = "transient"
DETERMINISTIC = "deterministic"

_EXIT_RE = re.compile(r"exited with (-?\d+)")
_EXC_RE = re.compile(r"^(?:[\w.]+\.)?(\w+(?:Error|Exception|Exit))(?::|$)", re.MULTILINE)
# Exceptions that mean "same inputs, same failure".
_DETERMINISTIC_EXC = {
    "ConfigError",
    "ValueError",
    "KeyError",
    "TypeError",
    "IndexError",
    "AttributeError",
    "AssertionError",
    "NameError",
    "ImportError",
    "ModuleNotFoundError",
    "FileNotFoundError",
    "NotADirectoryError",
    "IsADirectoryError",
    "NonFiniteLossError",
    "FloatingPointError",
    "ZeroDivisionError",
    "SyntaxError",
}
_TRANSIENT_PATTERNS = re.compile(
    "|".join(
        [
            r"Unable to acquire lock",  # DVC repo lock held by another process
            r"is busy, it is being blocked by",  # DVC's per-path lock held by another stage
            r"database is locked",  # SQLite writer contention (MLflow store)
            r"Connection refused",
            r"Connection reset",
            r"Connection aborted",
            r"Temporary failure in name resolution",
            r"Read timed out",
            r"ConnectTimeout",
            r"ReadTimeout",
            r"TrackingUnavailableError",
            r"\b(?:429|502|503|504)\b[^\n]*(?:Too Many Requests|Bad Gateway|Service Unavailable|Gateway Timeout)",
        ]
    )
)


def classify_failure(returncode: int, output: str) -> str:
    """``"transient"`` or ``"deterministic"`` for a failed ``dvc repro`` (see the module docstring).

    Args:
        returncode: ``dvc``'s exit status (or the stage command's, when run directly).
        output: its stdout and stderr; DVC reports the stage command's status as ``exited with N``.
    """
    codes = [int(c) for c in _EXIT_RE.findall(output)]
    code = codes[-1] if codes else returncode
    if code == EX_TEMPFAIL or code < 0 or code in (128 + 9, 128 + 15):  # signal: killed / terminated
        return TRANSIENT
    if re.search(r"^error: params ", output, re.MULTILINE):  # ConfigError reported by stages/_common
        return DETERMINISTIC
    exceptions = _EXC_RE.findall(output)
    if exceptions and exceptions[-1] in _DETERMINISTIC_EXC:
        return DETERMINISTIC
    if _TRANSIENT_PATTERNS.search(output):
        return TRANSIENT
    return DETERMINISTIC


class StageError(RuntimeError):
    """A DVC stage failed; ``kind`` says whether retrying can help."""

    def __init__(self, stage: str, returncode: int, kind: str, tail: str) -> None:
        super().__init__(f"stage {stage!r} failed ({kind}, exit {returncode}):\n{tail}")
        self.stage, self.returncode, self.kind, self.tail = stage, returncode, kind, tail

    @property
    def transient(self) -> bool:
        return self.kind == TRANSIENT


# ---------------------------------------------------------------- the graph, from DVC
@dataclass
class StageGraph:
    """DVC's stage DAG: ``stages`` in a topological order, ``upstream[s]`` the direct dependencies."""

    stages: list[str]
    upstream: dict[str, set[str]] = field(default_factory=dict)

    def has(self, name: str) -> bool:
        """A stage, matrix item or matrix stage (``train`` for ``train@...``) of this name exists."""
        return any(_matches(s, [name]) for s in self.stages)

    def ancestors(self, stage: str) -> set[str]:
        seen: set[str] = set()
        todo = list(self.upstream.get(stage, ()))
        while todo:
            s = todo.pop()
            if s not in seen:
                seen.add(s)
                todo.extend(self.upstream.get(s, ()))
        return seen


_NODE_RE = re.compile(r'^\s*"([^"]+)"\s*;\s*$')
_EDGE_RE = re.compile(r'^\s*"([^"]+)"\s*->\s*"([^"]+)"\s*;\s*$')


def parse_dot(text: str) -> StageGraph:
    """Parse ``dvc dag --dot`` output into a :class:`StageGraph` (stable topological order: DVC's
    listing order breaks ties)."""
    nodes: list[str] = []
    upstream: dict[str, set[str]] = {}
    for line in text.splitlines():
        if m := _EDGE_RE.match(line):
            a, b = m.groups()
            for n in (a, b):
                if n not in upstream:
                    nodes.append(n)
                    upstream[n] = set()
            upstream[b].add(a)
        elif (m := _NODE_RE.match(line)) and m.group(1) not in upstream:
            nodes.append(m.group(1))
            upstream[m.group(1)] = set()
    return StageGraph(topological_order(nodes, upstream), upstream)


def topological_order(nodes: Sequence[str], upstream: dict[str, set[str]]) -> list[str]:
    """Kahn's algorithm, keeping ``nodes``' order among ready stages; raises on a cycle."""
    done: list[str] = []
    placed: set[str] = set()
    remaining = list(nodes)
    while remaining:
        ready = [n for n in remaining if upstream.get(n, set()) <= placed]
        if not ready:
            raise ValueError(f"cycle among stages {remaining}")
        for n in ready:
            done.append(n)
            placed.add(n)
        remaining = [n for n in remaining if n not in placed]
    return done


def dvc_command() -> list[str]:
    """``dvc`` from this interpreter's environment (the project venv). The console script, not
    ``python -m dvc``, which would put the repository first on ``sys.path``."""
    exe = Path(sys.executable).parent / "dvc"
    return [str(exe)] if exe.is_file() else [sys.executable, "-m", "dvc"]


def stage_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """Environment for DVC and its stage commands: this venv first on PATH (stages call ``python``),
    no analytics."""
    env = dict(os.environ)
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    env.setdefault("DVC_NO_ANALYTICS", "1")
    env.update(extra or {})
    return env


def dvc_graph(repo: str | os.PathLike) -> StageGraph:
    """The stage graph of the repository at ``repo``, as DVC resolves it (matrix items expanded)."""
    proc = subprocess.run(
        # the folder's own dvc.yaml: DVC would otherwise show every set's pipeline in the checkout
        [*dvc_command(), "dag", "--dot", "dvc.yaml"],
        cwd=repo,
        env=stage_env(),
        capture_output=True,
        text=True,
    )
    if proc.returncode != 0:
        raise RuntimeError(f"dvc dag failed in {repo} ({proc.returncode}): {proc.stderr.strip()}")
    return parse_dot(proc.stdout)


# ---------------------------------------------------------------- matrix items
def repo_matrix_items(repo: str | os.PathLike) -> dict[str, dict[str, Any]]:
    """``{"train@tiny-infonce-1": {"backbone": "tiny", "loss": "infonce", "seed": 1}, ...}``: every
    matrix item the stage table defines for the ``params.yaml`` of ``repo``, named as DVC names it
    (:func:`focalcse.stage_table.matrix_items`)."""
    from focalcse.config import load_params
    from focalcse.stage_table import matrix_items

    return matrix_items(load_params(Path(repo) / "params.yaml"))


# ---------------------------------------------------------------- planning
@dataclass
class Plan:
    """The stages to run (topological order), their upstream within the plan, and what was left out."""

    stages: list[str]
    upstream: dict[str, set[str]]
    skipped: dict[str, str] = field(default_factory=dict)  # stage -> why it is not run


def _matches(stage: str, patterns: Iterable[str]) -> bool:
    """``train`` matches ``train`` and every ``train@...`` item; a full item name matches itself."""
    return any(stage == p or stage.split("@", 1)[0] == p for p in patterns)


def plan_stages(
    graph: StageGraph,
    items: dict[str, dict[str, Any]] | None = None,
    stages: Sequence[str] | None = None,
    backbones: Sequence[str] | None = None,
    seeds: Sequence[int] | None = None,
    with_ancestors: bool = True,
) -> Plan:
    """Choose the stages a flow runs.

    Args:
        graph: DVC's stage graph.
        items: matrix item values (:func:`repo_matrix_items`), for the backbone / seed filters.
        stages: stage names or matrix-stage names (``train`` = every ``train@...``); None = all.
        backbones, seeds: keep only matrix items with these values (items without such a dimension
            are kept). A stage downstream of a left-out item is not run either: its input would be
            incomplete (e.g. ``significance`` after only some seeds).
        with_ancestors: also run the selected stages' upstream stages (up-to-date ones are skipped
            by DVC in a second).
    """
    items = items or {}
    wanted = [s for s in graph.stages if stages is None or _matches(s, stages)]
    unknown = [p for p in stages or () if not any(_matches(s, [p]) for s in graph.stages)]
    if unknown:
        raise ValueError(f"no DVC stage named {unknown}; stages: {', '.join(graph.stages)}")
    selected = set(wanted)
    if with_ancestors:
        for s in wanted:
            selected |= graph.ancestors(s)
    skipped: dict[str, str] = {}
    for s in graph.stages:
        values = items.get(s, {})
        if backbones is not None and "backbone" in values and values["backbone"] not in backbones:
            skipped[s] = f"backbone {values['backbone']} not selected"
        elif seeds is not None and "seed" in values and values["seed"] not in seeds:
            skipped[s] = f"seed {values['seed']} not selected"
    for s in graph.stages:  # topological: a left-out ancestor is known before its descendants
        if s not in skipped and (bad := sorted(graph.upstream.get(s, set()) & set(skipped))):
            skipped[s] = f"depends on left-out {bad[0]}" + (
                f" and {len(bad) - 1} more" if len(bad) > 1 else ""
            )
    order = [s for s in graph.stages if s in selected and s not in skipped]
    keep = set(order)
    return Plan(
        stages=order,
        upstream={s: graph.upstream.get(s, set()) & keep for s in order},
        skipped={s: why for s, why in skipped.items() if s in selected},
    )


# ---------------------------------------------------------------- running one stage
@dataclass
class StageResult:
    stage: str
    returncode: int
    action: str  # ran | skipped (unchanged) | restored (from the run-cache) | failed
    seconds: float
    output: str

    def to_dict(self) -> dict[str, Any]:
        return {"stage": self.stage, "action": self.action, "seconds": round(self.seconds, 3)}


def _action(stage: str, output: str, returncode: int) -> str:
    if returncode != 0:
        return "failed"
    if f"Stage '{stage}' is cached - skipping run" in output:
        return "restored"
    if f"Running stage '{stage}'" in output:
        return "ran"
    return "skipped"


_PROGRESS_RE = re.compile(r"\d+%\|.*\|.*(?:it/s|s/it|\?it|examples/s)")


def is_progress_line(line: str) -> bool:
    """A tqdm progress-bar refresh (``train ...:  17%|█▋   | 1/6 [00:00<00:00, 24.5it/s]``)."""
    return bool(_PROGRESS_RE.search(line))


def run_dvc_stage(
    repo: str | os.PathLike,
    stage: str,
    force: bool = False,
    on_line: Callable[[str], None] | None = None,
    env: dict[str, str] | None = None,
    progress_every_s: float = 30.0,
    pull: bool = False,
    single_item: bool = True,
) -> StageResult:
    """``dvc repro --single-item <stage>`` in ``repo``, streaming output lines to ``on_line``.

    Upstream stages are not checked (the caller runs them first, in topological order); with
    ``single_item=False`` DVC brings them up to date first. ``pull`` adds ``--pull``: DVC fetches the
    default remote's run-cache and restores a stage whose command, deps and params it has seen there
    instead of running it (see :mod:`focalcse.ops.workpool`). Progress-bar
    refreshes (tqdm redraws with a carriage return; they arrive here as lines) are passed on at most
    once per ``progress_every_s`` and kept out of the captured output, so that logs and error tails
    stay readable.
    """
    cmd = [*dvc_command(), "--wait-for-lock", "repro", stage]
    if single_item:
        cmd.append("--single-item")
    if pull:
        cmd.append("--pull")
    if force:
        cmd.append("--force")
    start = time.perf_counter()
    lines: list[str] = []
    last_progress = -math.inf
    with subprocess.Popen(
        cmd,
        cwd=repo,
        env=env or stage_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        errors="replace",
        bufsize=1,
    ) as proc:
        assert proc.stdout is not None
        for line in proc.stdout:
            line = line.rstrip("\n")
            if is_progress_line(line):
                now = time.monotonic()
                if now - last_progress < progress_every_s and "100%|" not in line:
                    continue
                last_progress = now
            else:
                lines.append(line)
            if on_line is not None and line.strip():
                on_line(line)
        returncode = proc.wait()
    output = "\n".join(lines)
    return StageResult(
        stage, returncode, _action(stage, output, returncode), time.perf_counter() - start, output
    )


def check_stage(result: StageResult, tail_lines: int = 40) -> StageResult:
    """Raise :class:`StageError` (classified) if the stage failed; return it otherwise."""
    if result.returncode != 0:
        tail = "\n".join(result.output.splitlines()[-tail_lines:])
        raise StageError(
            result.stage, result.returncode, classify_failure(result.returncode, result.output), tail
        )
    return result


# ---------------------------------------------------------------- parameter sets
def select_param_set(repo: str | os.PathLike, name: str | None) -> tuple[str, Path]:
    """The parameter set ``name`` and the folder it runs in: ``(name, folder)``.

    ``None``/``""`` or the checkout's ``params.yaml``'s ``tracking.experiment`` is the default set,
    run in ``repo`` itself; any other name is ``params/<name>.yaml`` composed over ``params.yaml`` and
    run in its own folder ``sets/<name>/`` (:func:`focalcse.ops.dvc_yaml.write_set` writes its
    ``params.yaml`` and ``dvc.yaml`` there, validated first), so it never touches the default's or
    another set's outputs. Either way the set is validated here, before any ``dvc`` command reads a
    ``dvc.yaml``: DVC refuses some bad sweep values (a backbone named like a path) with its own,
    misleading advice.
    """
    from focalcse.config import ConfigError, load_params
    from focalcse.ops.dvc_yaml import write_set
    from focalcse.paramsets import set_dir

    root = Path(repo)
    current = yaml.safe_load((root / "params.yaml").read_text()) or {}
    current_name = str((current.get("tracking") or {}).get("experiment", ""))
    if not name or name == current_name:
        try:
            load_params(root / "params.yaml")
        except ConfigError as err:
            raise ValueError(str(err)) from err
        return current_name, root
    try:
        print(write_set(root, name))
    except ConfigError as err:
        raise ValueError(str(err)) from err
    return name, set_dir(root, name)


def exp_run_args(sets: dict[str, Any], name: str | None = None) -> list[str]:
    """``dvc exp run --queue`` arguments for one experiment: ``-S key=value`` per parameter."""
    args = ["exp", "run", "--queue"]
    if name:
        args += ["--name", name]
    for key, value in sets.items():
        args += ["-S", f"{key}={dvc_str(value)}"]
    return args


def ablation_experiments(temperatures: Sequence[float], ms: Sequence[float]) -> list[tuple[str, dict]]:
    """One experiment per τ (``train.temperature``) and one per m (``train.m``); git-ref-safe names."""
    exps = [(f"tau-{t:g}", {"train.temperature": t}) for t in temperatures]
    exps += [(f"m-{m:g}", {"train.m": m}) for m in ms]
    return exps


def parse_queue_status(text: str) -> dict[str, str]:
    """``{experiment name: status}`` from ``dvc queue status`` (``Queued``, ``Running``, ``Success``,
    ``Failed``); ``dvc exp run --run-all`` exits 0 even when experiments fail, so the flow reads this."""
    out: dict[str, str] = {}
    for line in text.splitlines():
        parts = line.split()
        if len(parts) >= 4 and re.fullmatch(r"[0-9a-f]{7,40}", parts[0]):
            out[parts[1]] = parts[-1]
    return out
