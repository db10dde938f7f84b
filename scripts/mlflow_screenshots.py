"""Headless-Chromium screenshots of the MLflow UI for a project's tracking store.

Starts ``mlflow server`` on 127.0.0.1 (one worker, job execution off) over the given store, finds the
experiment by name and, through ``MlflowClient``, a training run with a logged model (MLflow 3), then
takes PNG screenshots of:

* ``experiment-default.png``  ``#/experiments/<id>``: what a browser with no MLflow settings yet opens;
* ``experiment-runs.png``     ``#/experiments/<id>?workflowType=machine_learning``: the runs table;
* ``run-logged-models.png``   ``#/experiments/<id>/runs/<run>``: the run's overview, a tall window so
  that its "Logged models (N)" table, at the bottom of the page, is in the picture;
* ``experiment-models.png``   ``#/experiments/<id>/models``: the experiment's "Models" tab;
* ``logged-model.png``        ``#/experiments/<id>/models/<model id>``: the logged model's own page.

Why ``?workflowType=machine_learning``: in MLflow 3.17.2's UI the ``mlflow.experimentKind`` tag does
not decide where ``#/experiments/<id>`` lands. The sidebar switch "GenAI | Model training" does (kept
in the browser's localStorage, key ``mlflow.workflowType``, default ``genai``; the URL parameter
``workflowType`` overrides it), so a fresh browser opens ``#/experiments/<id>`` on the GenAI "Overview"
(traces, latency, tokens), not on the runs. ``experiment-default.png`` shows that; the summary's
``landing_tab`` says which tab it was.

Each page is loaded once with ``--screenshot`` and ``--dump-dom`` together; the DOM (page title, text)
is checked for what the page should show (not a loading skeleton), and the PNG for not being blank. A
page that fails (or on which Chromium hangs) is retried once with twice the virtual-time budget, then
the script exits 1.
The server, and every Chromium, are stopped by process group at the end, also on error.

    .venv/bin/python scripts/mlflow_screenshots.py \\
        --backend-store-uri sqlite:///mlflow.db \\
        --artifacts-destination mlartifacts --experiment cpu-default --out docs/img

Prints the paths written, then a JSON summary (experiment id, run id, model id, number of runs, the
URLs). About 45 s on 2 CPU cores (server start-up and five Chromium page loads). Needs
``chromium`` (``--chromium``); Pillow, if installed, for the blank-image check.
"""

from __future__ import annotations

import argparse
import contextlib
import html
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from focalcse.testing.mlflow_server import MlflowServer, ServerError, free_port, stop_group  # noqa: E402

ML = "workflowType=machine_learning"  # the sidebar's "Model training" side, for this page load only


class ScreenshotError(RuntimeError):
    """A failure worth one clear line (no traceback)."""


# ---------------------------------------------------------------- pure helpers (unit-tested)


@dataclass
class Page:
    """One screenshot: the file, the URL, the window and what its DOM must show."""

    file: str
    url: str
    window: tuple[int, int]
    title: str | None = None  # a regex one of the page's <title>s must match
    texts: list[str] = field(default_factory=list)  # plain strings the page's visible text must contain
    patterns: list[str] = field(default_factory=list)  # regexes the visible text must match


def parse_window(value: str) -> tuple[int, int]:
    m = re.fullmatch(r"\s*(\d+)\s*[,x]\s*(\d+)\s*", value)
    if not m:
        raise argparse.ArgumentTypeError(f"window size {value!r}: expected W,H such as 1600,1000")
    return int(m.group(1)), int(m.group(2))


def chromium_command(
    chromium: str, url: str, png: Path, window: tuple[int, int], budget_ms: int, profile: Path
) -> list[str]:
    """The flags that render MLflow's single-page app: the virtual-time budget lets its API calls and
    lazy chunks finish before the picture is taken; ``--dump-dom`` (stdout) goes with the same load."""
    return [
        chromium,
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--hide-scrollbars",
        "--no-first-run",
        "--no-default-browser-check",
        "--lang=en-US",
        f"--user-data-dir={profile}",  # a fresh profile: no localStorage from an earlier page
        f"--window-size={window[0]},{window[1]}",
        f"--virtual-time-budget={budget_ms}",
        f"--screenshot={png}",
        "--dump-dom",
        url,
    ]


def pick_logged_model(models: list[Any], run_ids: set[str], run_id: str | None = None) -> Any | None:
    """The newest READY logged model whose source run is one of ``run_ids`` (or is ``run_id``)."""

    def ready(m: Any) -> bool:
        return str(getattr(m, "status", "")).upper().endswith("READY")

    cands = [m for m in models if m.source_run_id and m.source_run_id in run_ids]
    if run_id is not None:
        cands = [m for m in cands if m.source_run_id == run_id]
    if not cands:
        return None
    return max(cands, key=lambda m: (ready(m), m.creation_timestamp or 0, m.model_id))


def build_pages(
    base: str,
    experiment_id: str,
    run_id: str,
    run_name: str,
    model_id: str,
    model_name: str,
    window: tuple[int, int],
    run_window: tuple[int, int],
) -> list[Page]:
    exp = f"{base}/#/experiments/{experiment_id}"
    return [
        Page("experiment-default.png", exp, window, title=rf"Experiment {experiment_id} - MLflow"),
        Page(
            "experiment-runs.png",
            f"{exp}?{ML}",
            window,
            title=rf"^Runs - Experiment {experiment_id} - MLflow",
            texts=[run_name],
            patterns=[r"\d+ matching runs?"],
        ),
        Page(
            "run-logged-models.png",
            f"{exp}/runs/{run_id}?{ML}",
            run_window,
            title=rf"^Run {run_id} - MLflow",
            texts=[model_name],
            patterns=[r"Logged models \([1-9]\d*\)"],
        ),
        Page(
            "experiment-models.png",
            f"{exp}/models?{ML}",
            window,
            title=rf"^Logged Models - Experiment {experiment_id} - MLflow",
            texts=[model_name, run_name],
        ),
        Page(
            "logged-model.png",
            f"{exp}/models/{model_id}?{ML}",
            window,
            title=rf"^Model {model_id} - MLflow",
            texts=[model_name, run_name],
        ),
    ]


def dom_titles(dom: str) -> list[str]:
    return [html.unescape(t).strip() for t in re.findall(r"<title[^>]*>(.*?)</title>", dom, flags=re.S)]


def dom_text(dom: str) -> str:
    """The page's text, tags, scripts and styles removed, white space collapsed."""
    body = re.sub(r"<(script|style|title)\b[^>]*>.*?</\1>", " ", dom, flags=re.S | re.I)
    return re.sub(r"\s+", " ", html.unescape(re.sub(r"<[^>]+>", " ", body))).strip()


def page_problems(page: Page, dom: str) -> list[str]:
    """What the page's DOM lacks; empty when it shows what it should."""
    problems = []
    titles = dom_titles(dom)
    if page.title and not any(re.search(page.title, t) for t in titles):
        problems.append(f"no <title> matching {page.title!r} (titles: {titles})")
    text = dom_text(dom)
    problems += [f"text {t!r} not on the page" for t in page.texts if t not in text]
    problems += [f"no text matching {p!r}" for p in page.patterns if not re.search(p, text)]
    return problems


def landing_tab(dom: str, experiment_id: str) -> str | None:
    """The tab a page titled ``<Tab> - Experiment <id> - MLflow`` is on (``Overview``, ``Runs``, ...)."""
    for t in dom_titles(dom):
        m = re.match(rf"(.+?) - Experiment {re.escape(str(experiment_id))} - MLflow$", t)
        if m:
            return m.group(1)
    return None


def image_problem(png: Path) -> str | None:
    """None for a PNG with content; a reason for a missing, empty or near-uniform one. Without Pillow
    only the file's existence and size are checked."""
    if not png.is_file() or png.stat().st_size == 0:
        return f"{png} was not written"
    try:
        from PIL import Image
    except ImportError:
        return None
    with Image.open(png) as im:
        gray = im.convert("L")
        hist = gray.histogram()
    total = sum(hist)
    # a white page with a spinner or a few skeleton bars: nearly every pixel one shade
    if max(hist) / total > 0.985:
        return f"{png} is blank ({max(hist) / total:.1%} of its pixels are one shade)"
    return None


# ---------------------------------------------------------------- processes


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def shoot(
    chromium: str, page: Page, png: Path, budget_ms: int, timeout: float, tmp: Path
) -> tuple[str, str | None]:
    """One Chromium page load, the screenshot to ``png``: returns (DOM, None), or ("", why) when
    Chromium hung. (It does hang, rather than take an early picture, when the virtual-time budget is
    too short for the page: seen with budgets of 1 s and less; 3 s was enough here.)"""
    profile = Path(tempfile.mkdtemp(prefix="chromium-", dir=tmp))
    cmd = chromium_command(chromium, page.url, png, page.window, budget_ms, profile)
    with contextlib.suppress(FileNotFoundError):
        png.unlink()  # no stale picture from an earlier run passes for this one
    proc = subprocess.Popen(
        cmd,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
        # its org.chromium.Chromium.* singleton folders, left in TMPDIR by a killed Chromium, go too
        env={**os.environ, "TMPDIR": str(tmp)},
    )
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        return "", f"chromium did not finish within {timeout:.0f} s"
    finally:
        stop_group(proc, grace=5)  # helpers (zygote, crashpad) that outlive the browser process
        shutil.rmtree(profile, ignore_errors=True)
    if proc.returncode != 0:
        raise ScreenshotError(f"chromium exited with {proc.returncode} on {page.url}:\n{err[-2000:]}")
    return out, None


# ---------------------------------------------------------------- MLflow


def find_items(tracking_uri: str, experiment: str, run_id: str | None) -> dict[str, Any]:
    from mlflow import MlflowClient
    from mlflow.entities import ViewType

    client = MlflowClient(tracking_uri=tracking_uri)
    exp = client.get_experiment_by_name(experiment)
    if exp is None:
        names = [e.name for e in client.search_experiments(view_type=ViewType.ALL)]
        raise ScreenshotError(f"no experiment named {experiment!r} in the store (experiments: {names})")

    runs, token = [], None
    while True:
        page = client.search_runs([exp.experiment_id], max_results=1000, page_token=token)
        runs += list(page)
        token = page.token
        if not token:
            break
    run_ids = {r.info.run_id for r in runs}
    if run_id is not None and run_id not in run_ids:
        raise ScreenshotError(f"run {run_id} is not an active run of experiment {experiment!r}")

    def models_in(experiment_ids: list[str]) -> list[Any]:
        out, token = [], None
        while True:
            page = client.search_logged_models(
                experiment_ids=experiment_ids, max_results=100, page_token=token
            )
            out += list(page)
            token = page.token
            if not token:
                return out

    models = models_in([exp.experiment_id])
    # Logged models of this experiment's runs kept under another experiment: the run pages (which ask
    # for the run's experiment's models) do not list them, so say so.
    others = [e.experiment_id for e in client.search_experiments() if e.experiment_id != exp.experiment_id]
    elsewhere = [m for m in models_in(others) if m.source_run_id in run_ids] if others else []
    if elsewhere:
        where = sorted({m.experiment_id for m in elsewhere})
        log(
            f"warning: {len(elsewhere)} logged model(s) from runs of experiment {experiment!r} are "
            f"kept in experiment(s) {where} instead; those runs' pages show 'Logged models (0)'"
        )

    model = pick_logged_model(models, run_ids, run_id)
    if model is None:
        which = f"run {run_id}" if run_id else f"experiment {experiment!r} ({len(runs)} runs)"
        raise ScreenshotError(
            f"no logged model in {which}: search_logged_models(experiment_ids=[{exp.experiment_id!r}]) "
            f"found {len(models)} model(s), none from its runs"
        )
    run = next(r for r in runs if r.info.run_id == model.source_run_id)
    return {
        "experiment_id": exp.experiment_id,
        "experiment": exp.name,
        "experiment_kind": exp.tags.get("mlflow.experimentKind"),
        "runs": len(runs),
        "run_id": run.info.run_id,
        "run_name": run.info.run_name,
        "model_id": model.model_id,
        "model_name": model.name,
        "logged_models": len(models),
        "logged_models_elsewhere": len(elsewhere),
    }


# ---------------------------------------------------------------- main


def default_mlflow() -> str:
    here = Path(sys.executable).with_name("mlflow")
    return str(here) if here.exists() else (shutil.which("mlflow") or "mlflow")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--backend-store-uri", required=True, help="e.g. sqlite:////abs/path/mlflow.db")
    p.add_argument("--artifacts-destination", help="the server's artifact root, e.g. PATH/mlartifacts")
    p.add_argument("--experiment", default="cpu-default", help="experiment name (default: cpu-default)")
    p.add_argument("--run-id", help="this run's logged model (default: the newest logged model's run)")
    p.add_argument("--out", type=Path, required=True, help="folder for the PNG files")
    p.add_argument("--port", type=int, default=0, help="server port on 127.0.0.1; 0 = a free one")
    p.add_argument("--chromium", default="/usr/bin/chromium")
    p.add_argument("--mlflow", default=default_mlflow(), help="the mlflow executable (default: the venv's)")
    p.add_argument("--window-size", type=parse_window, default=(1600, 1000), help="W,H (default 1600,1000)")
    p.add_argument(
        "--run-window-size",
        type=parse_window,
        default=(1600, 2600),
        help="W,H for the run page, tall enough for its 'Logged models' table (default 1600,2600)",
    )
    p.add_argument("--virtual-time-budget", type=int, default=20000, help="ms of page time (default 20000)")
    p.add_argument("--start-timeout", type=float, default=120, help="s to wait for /health (default 120)")
    p.add_argument("--page-timeout", type=float, default=90, help="s per Chromium run (default 90)")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if not Path(args.chromium).exists() and not shutil.which(args.chromium):
        print(f"error: chromium not found: {args.chromium}", file=sys.stderr)
        return 2
    tmp = Path(tempfile.mkdtemp(prefix="mlflow-shots-"))
    server = MlflowServer(
        tmp, args.port or free_port(), args.backend_store_uri, args.artifacts_destination, args.mlflow
    )
    base = server.uri
    summary: dict[str, Any] = {}
    try:
        try:
            server.start(args.start_timeout)
        except ServerError as err:
            raise ScreenshotError(str(err)) from None
        log(f"started mlflow server (pid {server.proc.pid}) on {base}")
        summary = find_items(base, args.experiment, args.run_id)
        pages = build_pages(
            base,
            summary["experiment_id"],
            summary["run_id"],
            summary["run_name"],
            summary["model_id"],
            summary["model_name"],
            args.window_size,
            args.run_window_size,
        )
        args.out.mkdir(parents=True, exist_ok=True)
        failed: dict[str, list[str]] = {}
        for page in pages:
            png = args.out / page.file
            for attempt, budget in enumerate((args.virtual_time_budget, 2 * args.virtual_time_budget)):
                t0 = time.monotonic()
                dom, hung = shoot(args.chromium, page, png, budget, args.page_timeout, tmp)
                if hung:
                    problems = [hung]
                else:
                    problems = page_problems(page, dom)
                    bad_image = image_problem(png)
                    problems += [bad_image] if bad_image else []
                log(f"{page.file}: {time.monotonic() - t0:.1f} s, {problems or 'ok'}")
                if page.file == "experiment-default.png":
                    summary["landing_tab"] = landing_tab(dom, summary["experiment_id"])
                if not problems or attempt == 1:
                    break
            if problems:
                failed[page.file] = problems
            if png.is_file():
                print(png, flush=True)
        summary["pages"] = {p.file: p.url for p in pages}
        if summary.get("landing_tab") not in (None, "Runs"):
            log(
                f"note: #/experiments/{summary['experiment_id']} opened on {summary['landing_tab']!r} "
                f"in a fresh browser (the UI's GenAI / Model training switch, not the experiment's tag)"
            )
        if failed:
            summary["failed"] = failed
            raise ScreenshotError(f"pages not as expected: {json.dumps(failed)}")
        return 0
    except ScreenshotError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    finally:
        if server.proc is not None:
            pid = server.proc.pid
            log(f"stopped mlflow server (pid {pid}, exit {server.stop()})")
        shutil.rmtree(tmp, ignore_errors=True)
        if summary:
            print(json.dumps(summary, indent=2, default=str), flush=True)


if __name__ == "__main__":
    sys.exit(main())
