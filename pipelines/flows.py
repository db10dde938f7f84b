"""Prefect flows over the DVC graph: ``reproduce`` (every stage) and ``ablation`` (τ / m sweeps).

DVC stays the source of truth: each Prefect task is ``dvc repro --single-item <stage>`` for one stage
(or matrix item), in the topological order ``dvc dag`` gives, so DVC still skips unchanged stages,
restores from its run-cache and writes ``dvc.lock``. Prefect adds per-stage state and logs in its UI,
retries with exponential backoff for transient failures only, and runs independent stages (the
train / evaluate matrix items) ``concurrency`` at a time. The planning and failure classification
live in :mod:`focalcse.ops.orchestration`.

Run once, without a server (Prefect starts a temporary one)::

    python -m pipelines.flows reproduce --concurrency 2
    python -m pipelines.flows ablation --queue-experiments --temperatures 0.03 0.1
"""

from __future__ import annotations

import argparse
import json
import subprocess
import time
from pathlib import Path
from typing import Any

from prefect import flow, get_run_logger, task
from prefect.cache_policies import NO_CACHE
from prefect.futures import as_completed
from prefect.tasks import exponential_backoff

from focalcse.ops.orchestration import (
    Plan,
    StageError,
    ablation_experiments,
    check_stage,
    dvc_command,
    dvc_graph,
    exp_run_args,
    parse_queue_status,
    plan_stages,
    repo_matrix_items,
    run_dvc_stage,
    select_param_set,
    stage_env,
)

REPO = Path(__file__).resolve().parents[1]
RETRY_BACKOFF_S = 10  # first retry after ~10 s, then 20 s, 40 s (±50 % jitter)
ABLATION_STAGES = ("ablate_tau", "ablate_m")


def retry_if_transient(task: Any, task_run: Any, state: Any) -> bool:
    """Prefect ``retry_condition_fn``: retry a stage only when its failure was classified transient."""
    exc = state.data if isinstance(state.data, BaseException) else None
    return isinstance(exc, StageError) and exc.transient


@task(
    name="dvc-stage",
    task_run_name="{stage}",
    retries=2,
    retry_delay_seconds=exponential_backoff(backoff_factor=RETRY_BACKOFF_S),
    retry_jitter_factor=0.5,
    retry_condition_fn=retry_if_transient,
    cache_policy=NO_CACHE,  # DVC decides what is up to date
)
def dvc_stage(repo: str, stage: str, force: bool = False) -> dict[str, Any]:
    """``dvc repro --single-item <stage>``; the output goes to the task's log."""
    logger = get_run_logger()
    result = run_dvc_stage(repo, stage, force=force, on_line=logger.info)
    try:
        check_stage(result)
    except StageError as err:
        logger.error(
            f"{stage}: {err.kind} failure (exit {err.returncode}); "
            + ("retried while retries remain" if err.transient else "not retried")
        )
        raise
    logger.info(f"{stage}: {result.action} in {result.seconds:.1f} s")
    return result.to_dict()


def run_plan(
    repo: Path,
    plan: Plan,
    concurrency: int,
    retries: int,
    force: bool = False,
    retry_delay_s: float = RETRY_BACKOFF_S,
    stage_task: Any = None,
    task_kwargs: dict[str, Any] | None = None,
) -> dict[str, str]:
    """Submit each stage once its upstream stages completed, at most ``concurrency`` at a time.

    A failed stage's descendants are not run (``not_run``); independent branches go on (like
    ``dvc repro --keep-going``). Returns ``{stage: action}``; raises if any stage failed.
    ``stage_task`` (default :func:`dvc_stage`) is called as ``(repo, stage, force, **task_kwargs)``
    and returns a dict with an ``action``.
    """
    logger = get_run_logger()
    if concurrency < 1:
        raise ValueError(f"concurrency = {concurrency}: expected an integer >= 1")
    for stage, why in plan.skipped.items():
        logger.info(f"{stage}: left out ({why})")
    runner = (stage_task or dvc_stage).with_options(
        retries=retries, retry_delay_seconds=exponential_backoff(backoff_factor=retry_delay_s)
    )
    status: dict[str, str] = {}
    running: dict[Any, str] = {}
    pending = list(plan.stages)
    while pending or running:
        for stage in list(pending):
            ups = plan.upstream[stage]
            if any(status.get(u) in ("failed", "not_run") for u in ups):
                status[stage] = "not_run"
                pending.remove(stage)
                logger.warning(f"{stage}: not run (an upstream stage failed)")
            elif len(running) < concurrency and all(u in status for u in ups):
                running[runner.submit(str(repo), stage, force, **(task_kwargs or {}))] = stage
                pending.remove(stage)
        if not running:
            break
        future = next(as_completed(list(running)))
        stage = running.pop(future)
        try:  # the local result; the API's copy of the state may lag behind
            status[stage] = future.result()["action"]
        except Exception:  # noqa: BLE001 - logged by the task; its descendants are not run
            status[stage] = "failed"
    failed = sorted(s for s, a in status.items() if a == "failed")
    if failed:
        not_run = sorted(s for s, a in status.items() if a == "not_run")
        raise RuntimeError(f"stage(s) failed: {', '.join(failed)}; not run: {', '.join(not_run) or 'none'}")
    return status


@flow(name="reproduce", log_prints=True)
def reproduce(
    param_set: str | None = None,
    backbones: list[str] | None = None,
    seeds: list[int] | None = None,
    stages: list[str] | None = None,
    concurrency: int = 2,
    retries: int = 2,
    retry_delay_s: float = RETRY_BACKOFF_S,
    force: bool = False,
    repo: str | None = None,
) -> dict[str, str]:
    """Run the DVC graph stage by stage.

    Args:
        param_set: ``params/<name>.yaml`` to use (composed over ``params.yaml``) or the current
            ``params.yaml``'s ``tracking.experiment``; None = ``params.yaml`` as it is.
        backbones, seeds: run only these matrix items (and no aggregate downstream of a left-out one).
        stages: stage names (``train`` = all its items) to run, with their upstream; None = all.
        concurrency: stages run at the same time (independent matrix items).
        retries: retries per stage, for transient failures only.
        retry_delay_s: the first retry's delay; it doubles for each further retry.
        force: ``dvc repro --force`` each stage.
        repo: the repository (default: this checkout).
    """
    logger = get_run_logger()
    name, root = select_param_set(Path(repo or REPO).resolve(), param_set)
    graph = dvc_graph(root)
    plan = plan_stages(graph, repo_matrix_items(root), stages=stages, backbones=backbones, seeds=seeds)
    logger.info(f"parameter set {name!r}: {len(plan.stages)} stage(s) in {root}: {', '.join(plan.stages)}")
    start = time.perf_counter()
    status = run_plan(root, plan, concurrency, retries, force, retry_delay_s)
    logger.info(f"done in {time.perf_counter() - start:.1f} s: {json.dumps(status)}")
    return status


@task(name="dvc-exp-queue", task_run_name="queue {name}", cache_policy=NO_CACHE)
def queue_experiment(repo: str, name: str, sets: dict[str, Any]) -> str:
    """``dvc exp run --queue -S key=value ...`` for one experiment."""
    proc = subprocess.run(
        [*dvc_command(), *exp_run_args(sets, name)], cwd=repo, env=stage_env(), capture_output=True, text=True
    )
    get_run_logger().info(proc.stdout + proc.stderr)
    if proc.returncode != 0:
        raise RuntimeError(f"dvc exp run --queue {name} failed ({proc.returncode}): {proc.stderr.strip()}")
    return name


@task(name="dvc-exp-run-all", cache_policy=NO_CACHE)
def run_queued(repo: str, names: list[str], jobs: int) -> dict[str, Any]:
    """``dvc exp run --run-all --jobs N`` (blocks until the queue is empty); fails if any of ``names``
    failed (``dvc queue status``). Returns their statuses and ``dvc exp show --json``."""
    logger = get_run_logger()
    with subprocess.Popen(
        [*dvc_command(), "exp", "run", "--run-all", "--jobs", str(jobs)],
        cwd=repo,
        env=stage_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        errors="replace",
    ) as proc:
        assert proc.stdout is not None
        for line in proc.stdout:
            logger.info(line.rstrip("\n"))
        code = proc.wait()
    queue = subprocess.run(
        [*dvc_command(), "queue", "status"], cwd=repo, env=stage_env(), capture_output=True, text=True
    )
    status = {n: parse_queue_status(queue.stdout).get(n, "unknown") for n in names}
    logger.info(f"experiments: {status}")
    failed = [n for n, st in status.items() if st != "Success"]
    if code != 0 or failed:
        raise RuntimeError(
            f"dvc exp run --run-all (exit {code}): not successful: {failed}; see `dvc queue logs <name>`"
        )
    show = subprocess.run(
        [*dvc_command(), "exp", "show", "--json"], cwd=repo, env=stage_env(), capture_output=True, text=True
    )
    exps = json.loads(show.stdout) if show.returncode == 0 and show.stdout.strip() else []
    return {"status": status, "experiments": exps}


@flow(name="ablation", log_prints=True)
def ablation(
    param_set: str | None = None,
    stages: list[str] | None = None,
    queue_experiments: bool = False,
    temperatures: list[float] | None = None,
    ms: list[float] | None = None,
    run_queue: bool = True,
    jobs: int = 1,
    concurrency: int = 2,
    retries: int = 2,
    retry_delay_s: float = RETRY_BACKOFF_S,
    repo: str | None = None,
) -> dict[str, Any]:
    """Sweep τ and m.

    By default runs the ``ablate_tau`` / ``ablate_m`` DVC matrix stages that exist (``stages``
    overrides the list) and their upstream, as :func:`reproduce` does. With ``queue_experiments``, queues one DVC
    experiment of the *full* graph per τ (``train.temperature``) and per m (``train.m``) —
    ``temperatures`` / ``ms`` default to the ``ablation`` params section — and, with ``run_queue``,
    runs the queue (``dvc exp run --run-all --jobs``); compare with ``dvc exp show``.
    """
    logger = get_run_logger()
    name, root = select_param_set(Path(repo or REPO).resolve(), param_set)
    if not queue_experiments:
        graph = dvc_graph(root)
        if stages is None:
            stages = [s for s in ABLATION_STAGES if graph.has(s)]
            if not stages:
                raise ValueError(f"no {' / '.join(ABLATION_STAGES)} stage in {root / 'dvc.yaml'}")
        plan = plan_stages(graph, repo_matrix_items(root), stages=stages)
        logger.info(f"parameter set {name!r}: {', '.join(plan.stages)}")
        return run_plan(root, plan, concurrency, retries, retry_delay_s=retry_delay_s)
    import yaml

    section = (yaml.safe_load((root / "params.yaml").read_text()) or {}).get("ablation") or {}
    temps = section.get("temperatures", []) if temperatures is None else temperatures
    m_values = section.get("ms", []) if ms is None else ms
    stamp = time.strftime("%m%d-%H%M%S")
    queued = [
        queue_experiment(str(root), f"{exp}-{stamp}", sets)
        for exp, sets in ablation_experiments(temps, m_values)
    ]
    result: dict[str, Any] = {"queued": queued}
    if run_queue and queued:
        result.update(run_queued(str(root), queued, jobs))
    return result


def main(argv: list[str] | None = None) -> Any:
    parser = argparse.ArgumentParser(description="Run a flow once (no deployment needed).")
    sub = parser.add_subparsers(dest="flow", required=True)
    for name in ("reproduce", "ablation"):
        p = sub.add_parser(name)
        p.add_argument("--param-set", default=None)
        p.add_argument("--stages", nargs="+", default=None)
        p.add_argument("--concurrency", type=int, default=2)
        p.add_argument("--retries", type=int, default=2)
        p.add_argument("--repo", default=None)
    rep = sub.choices["reproduce"]
    rep.add_argument("--backbones", nargs="+", default=None)
    rep.add_argument("--seeds", nargs="+", type=int, default=None)
    rep.add_argument("--force", action="store_true")
    abl = sub.choices["ablation"]
    abl.add_argument("--queue-experiments", action="store_true")
    abl.add_argument("--temperatures", nargs="+", type=float, default=None)
    abl.add_argument("--ms", nargs="+", type=float, default=None)
    abl.add_argument("--no-run-queue", dest="run_queue", action="store_false")
    abl.add_argument("--jobs", type=int, default=1)
    args = vars(parser.parse_args(argv))
    fn = reproduce if args.pop("flow") == "reproduce" else ablation
    return fn(**args)


if __name__ == "__main__":
    print(json.dumps(main(), indent=2, default=str))
