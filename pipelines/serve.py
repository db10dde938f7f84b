"""Register the flows as deployments on a Prefect server and execute their runs (``make serve``).

``reproduce`` runs on a cron schedule (default nightly at 03:00, the server's time zone UTC unless
``--timezone``); ``ablation`` runs on demand. Both appear under *Deployments* in the UI of
``prefect server start``; ``prefect deployment run reproduce/reproduce`` (``make flow``) triggers one
now. The process executes the runs itself (a Prefect runner) until it gets SIGINT / SIGTERM.

    PREFECT_API_URL=http://127.0.0.1:4200/api python -m pipelines.serve --cron "0 3 * * *"
"""

from __future__ import annotations

import argparse
from typing import Any

from pipelines.flows import ablation, reproduce

DEFAULT_CRON = "0 3 * * *"


def build_deployments(
    cron: str = DEFAULT_CRON,
    timezone: str = "UTC",
    param_set: str | None = None,
    concurrency: int = 2,
    repo: str | None = None,
) -> list[Any]:
    """The two deployments (``reproduce/reproduce`` scheduled, ``ablation/ablation`` on demand)."""
    from prefect.schedules import Cron

    common = {"param_set": param_set, "concurrency": concurrency, "repo": repo}
    return [
        reproduce.to_deployment(
            name="reproduce",
            schedules=[Cron(cron, timezone=timezone)],
            parameters=common,
            description="The DVC graph, stage by stage (dvc repro --single-item); DVC skips what is up to date.",
            tags=["focalcse", "dvc"],
        ),
        ablation.to_deployment(
            name="ablation",
            parameters=common,
            description="tau / m sweeps: the ablate_tau / ablate_m stages, or queued DVC experiments.",
            tags=["focalcse", "dvc", "ablation"],
        ),
    ]


def main(argv: list[str] | None = None) -> None:
    from prefect import serve

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cron", default=DEFAULT_CRON, help=f"reproduce schedule (default {DEFAULT_CRON!r})")
    parser.add_argument("--timezone", default="UTC")
    parser.add_argument("--param-set", default=None, help="params/<name>.yaml for scheduled runs")
    parser.add_argument("--concurrency", type=int, default=2)
    parser.add_argument("--repo", default=None, help="repository to run in (default: this checkout)")
    parser.add_argument("--limit", type=int, default=None, help="flow runs executed at the same time")
    args = parser.parse_args(argv)
    deployments = build_deployments(args.cron, args.timezone, args.param_set, args.concurrency, args.repo)
    serve(*deployments, limit=args.limit)


if __name__ == "__main__":
    main()
