"""What the evaluate and report stages add: the scores on the item's train run, the summary run."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

from focalcse.config import Params
from focalcse.data.tasks import TASKS
from focalcse.layout import COMPANION_KEYS, companion_file, run_name, safe_name, stage_name
from focalcse.ops.tracking.process import identity_tags
from focalcse.ops.tracking.store import (
    _base_tags,
    client_and_experiment,
    enabled,
    flatten,
    folder_fingerprint,
    redact,
)


# ---------------------------------------------------------------- evaluation
def eval_metrics(result: dict[str, Any]) -> dict[str, float]:
    """The scalar metrics of an evaluation result: the tasks, ``sts_avg``, ``wmean_avg``,
    ``alignment``, ``uniformity``."""
    out = {k: float(result[k]) for k in TASKS if k in result}
    if "avg" in result:
        out["sts_avg"] = float(result["avg"])
    if isinstance(result.get("wmean"), dict) and "avg" in result["wmean"]:
        out["wmean_avg"] = float(result["wmean"]["avg"])
    for k in ("alignment", "uniformity"):
        if result.get(k) is not None:
            out[k] = float(result[k])
    return out


def find_train_run(client: Any, exp_id: str, model_dir: str | os.PathLike) -> str | None:
    """The latest finished train run whose model folder has the same fingerprint, or None."""
    fp = folder_fingerprint(model_dir)
    runs = client.search_runs(
        [exp_id],
        filter_string=f"tags.model_sha256 = '{fp}' and tags.focalcse_stage = 'train'",
        order_by=["attributes.start_time DESC"],
        max_results=1,
    )
    return runs[0].info.run_id if runs else None


def log_evaluation(
    params: Params,
    backbone: str,
    loss: str,
    seed: int,
    model_dir: str | os.PathLike,
    result: dict[str, Any],
    result_file: str | os.PathLike | None = None,
    *,
    framework: str,
) -> str | None:
    """Attach an evaluation to the train run that produced ``model_dir`` (by fingerprint); without
    one (model restored from DVC's cache or a remote), a new run with the same tags. Returns the run id."""
    if not enabled():
        return None
    from mlflow.entities import Metric, Param, RunTag

    client, exp_id, uri = client_and_experiment(params)
    run_id = find_train_run(client, exp_id, model_dir)
    stage = os.environ.get("DVC_STAGE", stage_name("evaluate", backbone, loss, seed, framework))
    tags = {"dvc_stage_evaluate": stage, "evaluated": "true"}
    if run_id is None:
        base = {
            **_base_tags(params, stage),
            "backbone": backbone,
            "loss": loss,
            "seed": str(seed),
            "framework": framework,
        }
        run = client.create_run(
            exp_id,
            tags={**base, "focalcse_stage": "evaluate", "linked_train_run": "none", **identity_tags()},
            run_name=run_name(backbone, loss, seed, framework),
        )
        run_id = run.info.run_id
        new = True
    else:
        new = False
    existing = client.get_run(run_id).data.params
    wanted = flatten(
        {
            "eval": {
                "tasks": list(params.eval.tasks),
                "batch_size": params.eval.batch_size,
                "precision": params.eval.precision,
            }
        }
    )
    fresh = [Param(k, v) for k, v in wanted.items() if k not in existing]
    changed = {k: v for k, v in wanted.items() if k in existing and existing[k] != v}
    if changed:  # MLflow params are immutable: record a re-evaluation with other settings as tags
        tags.update({f"re{k}": v for k, v in changed.items()})
    now = int(time.time() * 1000)
    client.log_batch(
        run_id,
        metrics=[Metric(k, v, now, 0) for k, v in eval_metrics(result).items()],
        params=fresh,
        tags=[RunTag(k, v) for k, v in tags.items()],
    )
    if result_file is not None and Path(result_file).is_file():
        companions = [companion_file(result_file, k) for k in COMPANION_KEYS]
        for f in [Path(result_file), *(c for c in companions if c.is_file())]:
            client.log_artifact(run_id, str(f), artifact_path="metrics")
    if new:
        client.set_terminated(run_id, status="FINISHED")
    print(f"MLflow run {run_id}: evaluation logged at {redact(uri)}")
    return run_id


# ---------------------------------------------------------------- summary
def log_summary_run(params: Params, files: list[Path]) -> str | None:
    """A ``summary`` run for the significance / report stage: ``files`` (tables, plots, JSON) as
    artifacts; from a ``significance.json`` also the per-backbone mean of each loss and the paired
    t-test p-value of the average as metrics. Returns the run id (None when tracking is off)."""
    if not enabled():
        return None
    from mlflow.entities import Metric

    client, exp_id, uri = client_and_experiment(params)
    tags = {**_base_tags(params, "report"), "focalcse_stage": "summary", **identity_tags()}
    run = client.create_run(exp_id, tags=tags, run_name="summary")
    run_id = run.info.run_id
    try:
        metrics: list[Any] = []
        now = int(time.time() * 1000)
        for f in map(Path, files):
            if not f.exists():
                raise FileNotFoundError(f"{f}: no such file to log in the summary run")
            if f.is_dir():
                client.log_artifacts(run_id, str(f), artifact_path=f.name)
            else:
                client.log_artifact(run_id, str(f))
            if f.suffix == ".json" and f.is_file():
                metrics += [Metric(k, v, now, 0) for k, v in _significance_metrics(f).items()]
        if metrics:
            client.log_batch(run_id, metrics=metrics)
    except BaseException:
        client.set_terminated(run_id, status="FAILED")
        raise
    client.set_terminated(run_id, status="FINISHED")
    print(f"MLflow summary run {run_id} at {redact(uri)}")
    return run_id


def _significance_metrics(path: Path) -> dict[str, float]:
    try:
        data = json.loads(path.read_text())
    except (ValueError, OSError):
        return {}
    out: dict[str, float] = {}
    for backbone, entry in (data.get("backbones") or {}).items() if isinstance(data, dict) else ():
        key = safe_name(backbone)
        for loss, summ in (entry.get("losses") or {}).items():
            for stat in ("mean", "std"):
                value = (summ.get("avg") or {}).get(stat)
                if isinstance(value, (int, float)) and value == value:
                    out[f"{key}.{loss}.avg_{stat}"] = float(value)
        for loss, tests in (entry.get("ttest") or {}).items():
            p = ((tests or {}).get("avg") or {}).get("p_value")
            if isinstance(p, (int, float)) and p == p:
                out[f"{key}.{loss}.ttest_avg_p"] = float(p)
    return out
