"""Multi-machine runs on a Prefect work pool: train / evaluate / ablate items as separate flow runs.

Every machine runs a Prefect *process worker* on one work pool; all of them reach the same Prefect
server, the same MLflow tracking server, the same git remote and the same DVC remote (S3, SSH, a
shared folder ...). The coordinator flow ``reproduce-pool`` runs in your checkout:

* the cheap stages (``sample``, ``prepare_sts``, ``significance``, ``report`` ...) run locally, and
  their outputs and run-cache entries are pushed to the DVC remote;
* each item of ``remote_stages`` (default: every ``train@``, ``evaluate@``, ``ablate_tau@`` and
  ``ablate_m@`` item) becomes a flow run of the ``dvc-stage-item`` deployment, which any worker of the
  pool picks up: it checks out the coordinator's commit, restores the item's upstream stages from the
  remote's run-cache, runs the item (logging to the shared MLflow server) and pushes the result;
* once that flow run completed, the coordinator restores the item from the run-cache
  (``dvc repro --pull --single-item``) instead of running it, so its ``dvc.lock``, models and metrics
  are the same as after a local ``dvc repro``. The mechanics are in :mod:`focalcse.ops.workpool`.

The coordinator's commit must be pushed to the git remote workers clone from (``origin`` unless
``git_url``); uncommitted changes to anything but pipeline outputs are refused.

Once per pool (``--source``: where workers get this code; a git URL for several machines)::

    python -m pipelines.pool deploy --pool focalcse --source https://github.com/you/focalcse.git

On every machine, in a checkout with the project's venv::

    FOCALCSE_DATA_MIRROR=... MLFLOW_TRACKING_URI=http://mlflow-host:5000 \\
      prefect worker start --pool focalcse --name gpu-1 --limit 1

Then, in your checkout (or trigger the ``reproduce-pool`` flow from the UI)::

    python -m pipelines.pool run --dvc-remote s3://bucket/focalcse --concurrency 8
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import socket
import time
from pathlib import Path
from typing import Any

from prefect import flow, get_run_logger, task
from prefect.cache_policies import NO_CACHE
from prefect.tasks import exponential_backoff

from focalcse.ops import workpool
from focalcse.ops.orchestration import (
    DETERMINISTIC,
    TRANSIENT,
    StageError,
    check_stage,
    dvc_graph,
    plan_stages,
    repo_matrix_items,
    run_dvc_stage,
    select_param_set,
    stage_env,
)
from focalcse.paramsets import WORK_DIR
from pipelines.flows import REPO, RETRY_BACKOFF_S, retry_if_transient, run_plan

STAGE_FLOW = "dvc-stage-item"
DEFAULT_DEPLOYMENT = f"{STAGE_FLOW}/pool"
DEFAULT_POOL = "focalcse"
REMOTE_STAGES = ("train", "evaluate", "ablate_tau", "ablate_m")


# ---------------------------------------------------------------- on a worker
@flow(name=STAGE_FLOW, flow_run_name="{stage}", log_prints=True)
def stage_item(
    stage: str,
    commit: str,
    git_url: str,
    param_set: str | None = None,
    dvc_remote: str | None = None,
    tracking_uri: str | None = None,
    force: bool = False,
) -> dict[str, Any]:
    """Run one DVC stage item at ``commit`` on this worker and push its result to the DVC remote.

    Args:
        stage: the item (``train@simcse-all-MiniLM-L6-v2-focal_infonce-1``).
        commit: the coordinator's commit; git_url: where to clone it from.
        param_set: ``params/<name>.yaml`` to use, as the coordinator did (None = the commit's params.yaml).
        dvc_remote: a DVC remote URL for this checkout (None = the repository's default remote).
        tracking_uri: MLflow tracking URI for the stage (None = the worker's ``MLFLOW_TRACKING_URI``).
        force: ``dvc repro --force`` the item (its upstream stages are still restored).
    """
    logger = get_run_logger()
    checkout = workpool.worker_checkout(git_url, commit, label=workpool.label_for(param_set))
    _, here = select_param_set(checkout, param_set)  # the checkout, or the set's folder sets/<name>/
    if dvc_remote:
        workpool.set_remote(checkout, dvc_remote)
    extra = {"PYTHONPATH": str(checkout / "src")}  # the commit's code, not the worker venv's editable install
    if tracking_uri:
        extra["MLFLOW_TRACKING_URI"] = tracking_uri
    env = stage_env(extra)
    if not env.get("MLFLOW_TRACKING_URI", "").startswith(("http://", "https://")):
        logger.warning(
            "MLFLOW_TRACKING_URI is not a tracking server: this item's MLflow run stays in "
            f"{checkout / 'mlflow.db'} on {socket.gethostname()}"
        )
    logger.info(f"{stage} at {commit[:12]} in {checkout} on {socket.gethostname()} (pid {os.getpid()})")
    # the corpus, the STS data, the trained model ...: from the remote's run-cache
    upstream = workpool.restore_upstream(here, stage, env, on_line=logger.info)
    if ran := sorted(s for s, action in upstream.items() if action == "ran"):
        logger.warning(f"not in the DVC remote's run-cache, so run here first: {', '.join(ran)}")
    result = check_stage(run_dvc_stage(here, stage, force=force, on_line=logger.info, env=env, pull=True))
    workpool.push_run_cache(here, stage, env)
    logger.info(f"{stage}: {result.action} in {result.seconds:.1f} s; pushed to the DVC remote")
    return {**result.to_dict(), "host": socket.gethostname(), "checkout": str(checkout), "commit": commit}


# ---------------------------------------------------------------- on the coordinator
def _remote_failure(stage: str, flow_run: Any) -> StageError:
    """A :class:`StageError` for a flow run that did not complete: a crash (worker killed, machine
    lost) is transient; a failure is transient only if the worker classified it so."""
    state = flow_run.state
    message = (state.message if state else "") or ""
    transient = bool(state and state.is_crashed()) or f"({TRANSIENT}," in message
    name = state.name if state else "no state"
    return StageError(
        stage,
        1,
        TRANSIENT if transient else DETERMINISTIC,
        f"flow run {flow_run.name} ({flow_run.id}): {name}: {message}",
    )


@task(
    name="pool-stage",
    task_run_name="{stage}",
    retries=2,
    retry_delay_seconds=exponential_backoff(backoff_factor=RETRY_BACKOFF_S),
    retry_jitter_factor=0.5,
    retry_condition_fn=retry_if_transient,
    cache_policy=NO_CACHE,
)
def pool_stage(
    repo: str,
    stage: str,
    force: bool = False,
    remote_stages: tuple[str, ...] = REMOTE_STAGES,
    deployment: str = DEFAULT_DEPLOYMENT,
    item: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """One stage of the coordinator's plan: on the pool (then restored here) or locally (then pushed)."""
    from prefect.deployments import run_deployment

    logger = get_run_logger()
    env = stage_env()
    if stage.split("@", 1)[0] in remote_stages:
        start = time.perf_counter()
        flow_run = run_deployment(
            deployment,
            parameters={"stage": stage, "force": force, **(item or {})},
            timeout=None,
            as_subflow=True,
        )
        if not flow_run.state or not flow_run.state.is_completed():
            err = _remote_failure(stage, flow_run)
            logger.error(f"{stage}: {err.kind} failure on the pool: {err.tail}")
            raise err
        remote_s = time.perf_counter() - start
        result = check_stage(run_dvc_stage(repo, stage, on_line=logger.info, env=env, pull=True))
        if result.action == "ran":  # the worker's entry was not found: it ran here instead
            logger.warning(
                f"{stage}: not in the DVC remote's run-cache after flow run {flow_run.name}; ran locally"
            )
            workpool.push_run_cache(repo, stage, env)
        logger.info(f"{stage}: flow run {flow_run.name} in {remote_s:.1f} s, then {result.action} here")
        return {**result.to_dict(), "flow_run": flow_run.name, "remote_seconds": round(remote_s, 3)}
    result = check_stage(run_dvc_stage(repo, stage, force=force, on_line=logger.info, env=env))
    workpool.push_run_cache(repo, stage, env)  # workers restore what they need from the remote
    logger.info(f"{stage}: {result.action} here in {result.seconds:.1f} s; pushed to the DVC remote")
    return result.to_dict()


@flow(name="reproduce-pool", log_prints=True)
def reproduce_pool(
    deployment: str = DEFAULT_DEPLOYMENT,
    remote_stages: list[str] | None = None,
    param_set: str | None = None,
    backbones: list[str] | None = None,
    seeds: list[int] | None = None,
    stages: list[str] | None = None,
    concurrency: int = 4,
    retries: int = 2,
    retry_delay_s: float = RETRY_BACKOFF_S,
    force: bool = False,
    git_url: str | None = None,
    dvc_remote: str | None = None,
    repo: str | None = None,
) -> dict[str, str]:
    """Run the DVC graph with the heavy items on the work pool behind ``deployment``.

    Args:
        deployment: the ``dvc-stage-item`` deployment (``python -m pipelines.pool deploy``).
        remote_stages: stage names whose items run on the pool (default train, evaluate, ablate_tau,
            ablate_m); the others run here.
        param_set, backbones, seeds, stages, retries, retry_delay_s, force: as in ``reproduce``.
        concurrency: stages in flight at once (pool items wait for a free worker).
        git_url: where workers clone the commit from (default: this repository's ``origin``).
        dvc_remote: DVC remote URL for this checkout and the workers' (default: the configured default remote).
        repo: the coordinator's checkout (default: this one).
    """
    root = Path(repo or REPO).resolve()
    # a set's folder (sets/<name>/) is written here and by each worker from the same commit
    allowed = workpool.PIPELINE_OUTPUTS + ((f"{WORK_DIR}/",) if param_set else ())
    commit = workpool.require_clean(root, allowed)
    url = git_url or workpool.origin_url(root)
    logger = get_run_logger()
    name, here = select_param_set(root, param_set)
    if dvc_remote:
        workpool.set_remote(root, dvc_remote)
    tracking = os.environ.get("MLFLOW_TRACKING_URI", "")
    item = {
        "commit": commit,
        "git_url": url,
        "param_set": param_set,
        "dvc_remote": dvc_remote,
        "tracking_uri": tracking if tracking.startswith(("http://", "https://")) else None,
    }
    plan = plan_stages(
        dvc_graph(here), repo_matrix_items(here), stages=stages, backbones=backbones, seeds=seeds
    )
    remote = tuple(remote_stages or REMOTE_STAGES)
    on_pool = [s for s in plan.stages if s.split("@", 1)[0] in remote]
    logger.info(
        f"parameter set {name!r} at {commit[:12]} ({url}): {len(plan.stages)} stage(s), "
        f"{len(on_pool)} on the pool via {deployment}"
    )
    start = time.perf_counter()
    status = run_plan(
        here,
        plan,
        concurrency,
        retries,
        force,
        retry_delay_s,
        stage_task=pool_stage,
        task_kwargs={"remote_stages": remote, "deployment": deployment, "item": item},
    )
    logger.info(f"done in {time.perf_counter() - start:.1f} s: {json.dumps(status)}")
    return status


# ---------------------------------------------------------------- registering the deployment
def deploy(pool: str = DEFAULT_POOL, source: str | None = None, name: str = "pool") -> str:
    """Create the process work pool ``pool`` if missing and deploy :func:`stage_item` to it.

    ``source`` is where workers load this code from: a git URL (each worker clones it) or a folder
    every worker can read (default: this checkout). Returns the deployment's name.
    """
    from prefect import get_client
    from prefect.client.schemas.actions import WorkPoolCreate
    from prefect.exceptions import ObjectAlreadyExists
    from prefect.workers.process import ProcessWorker

    template = ProcessWorker.get_default_base_job_template()
    # an existing pool keeps its settings
    with get_client(sync_client=True) as client, contextlib.suppress(ObjectAlreadyExists):
        client.create_work_pool(WorkPoolCreate(name=pool, type="process", base_job_template=template))
    entrypoint = "pipelines/pool.py:stage_item"
    stage_item.from_source(source=source or str(REPO), entrypoint=entrypoint).deploy(
        name=name,
        work_pool_name=pool,
        description="One DVC stage item at the coordinator's commit; outputs go to the DVC remote's run-cache.",
        tags=["focalcse", "dvc", "pool"],
        print_next_steps=False,
    )
    return f"{STAGE_FLOW}/{name}"


def main(argv: list[str] | None = None) -> Any:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    dep = sub.add_parser("deploy", help="create the work pool and the dvc-stage-item deployment")
    dep.add_argument("--pool", default=DEFAULT_POOL)
    dep.add_argument(
        "--source", default=None, help="git URL or shared folder with this code (default: this checkout)"
    )
    dep.add_argument("--name", default="pool")
    run = sub.add_parser("run", help="run the reproduce-pool flow now, from this checkout")
    run.add_argument("--deployment", default=DEFAULT_DEPLOYMENT)
    run.add_argument("--remote-stages", nargs="+", default=None)
    run.add_argument("--param-set", default=None)
    run.add_argument("--backbones", nargs="+", default=None)
    run.add_argument("--seeds", nargs="+", type=int, default=None)
    run.add_argument("--stages", nargs="+", default=None)
    run.add_argument("--concurrency", type=int, default=4)
    run.add_argument("--retries", type=int, default=2)
    run.add_argument("--force", action="store_true")
    run.add_argument("--git-url", default=None)
    run.add_argument("--dvc-remote", default=None)
    run.add_argument("--repo", default=None)
    args = vars(parser.parse_args(argv))
    if args.pop("command") == "deploy":
        return deploy(**args)
    return reproduce_pool(**args)


if __name__ == "__main__":
    print(json.dumps(main(), indent=2, default=str))
