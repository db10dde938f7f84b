"""Multi-machine runs: worker checkouts pinned to one commit, and DVC's run-cache on a shared remote.

The coordinator flow (``pipelines/pool.py``, ``reproduce-pool``) runs the cheap stages itself and sends
each train / evaluate / ablate item to a Prefect work pool as its own flow run. The worker that picks
an item up

1. makes (once) a checkout of the coordinator's commit and parameter set (:func:`worker_checkout`);
   all checkouts on a worker share one DVC cache, so a model trained there is not fetched again;
2. restores the item's stale upstream stages (the sampled corpus, the STS data, the trained model)
   from the shared remote's run-cache (:func:`restore_upstream`), then runs the item
   (``dvc repro --pull --single-item``);
3. runs ``dvc push --run-cache``: the item's outputs and its run-cache entry go to the shared remote.

The coordinator then runs ``dvc repro --pull --single-item <item>`` in its own checkout: the command,
dependencies and params are the same, so DVC finds the worker's run-cache entry ("Stage ... is cached -
skipping run, checking out outputs") and writes ``dvc.lock`` as if the item had run locally. DVC, not
this module, decides what is up to date and where data lives; nothing here imports Prefect.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

from focalcse.layout import Layout
from focalcse.ops.orchestration import (
    DETERMINISTIC,
    TRANSIENT,
    StageError,
    check_stage,
    dvc_command,
    dvc_graph,
    run_dvc_stage,
    stage_env,
)

WORKDIR_ENV = "FOCALCSE_WORKDIR"  # where a worker keeps its checkouts and shared DVC cache
DEFAULT_WORKDIR = Path("~/.cache/focalcse/pool")
# Files the pipeline itself rewrites in a checkout; they may differ from the commit.
_LAYOUT = Layout()
# What a run of the default set may change. Narrower than focalcse.provenance.PIPELINE_OUTPUTS (which
# also takes sets/ as outputs): a set folder's params.yaml and dvc.yaml say what workers run, so an
# uncommitted edit there must stop the pool.
PIPELINE_OUTPUTS = ("dvc.lock", f"{_LAYOUT.metrics_dir}/", f"{_LAYOUT.reports_dir}/")
_COMMIT_RE = re.compile(r"[0-9a-f]{40}")


class CheckoutError(RuntimeError):
    """The coordinator's commit cannot be used by workers (dirty tree, unknown commit, no remote)."""


def git(repo: str | os.PathLike, *args: str, strip: bool = True) -> str:
    """``git <args>`` in ``repo``; stdout (stripped). Raises :class:`CheckoutError` with git's message."""
    proc = subprocess.run(["git", *args], cwd=repo, capture_output=True, text=True)
    if proc.returncode != 0:
        raise CheckoutError(
            f"git {' '.join(args)} in {repo} failed: {proc.stderr.strip() or proc.stdout.strip()}"
        )
    return proc.stdout.strip() if strip else proc.stdout


def head_commit(repo: str | os.PathLike) -> str:
    return git(repo, "rev-parse", "HEAD")


def origin_url(repo: str | os.PathLike) -> str:
    """The URL workers clone from: the ``origin`` remote of the coordinator's repository."""
    try:
        return git(repo, "remote", "get-url", "origin")
    except CheckoutError:
        raise CheckoutError(
            f"{repo} has no `origin` git remote: workers check out the coordinator's commit from a "
            "shared git remote; add one (git remote add origin URL) or pass git_url"
        ) from None


def uncommitted_changes(repo: str | os.PathLike, allowed: Sequence[str] = PIPELINE_OUTPUTS) -> list[str]:
    """Tracked files that differ from ``HEAD``, except pipeline outputs (``allowed`` prefixes).

    Workers only see the commit, so a changed ``params.yaml``, ``dvc.yaml`` or source file would make
    them run something else than the coordinator asked for.
    """
    # -z: "XY path\0" per entry, a rename's source path as its own entry after it; no quoting
    entries = git(repo, "status", "--porcelain=v1", "-z", "--untracked-files=no", strip=False).split("\0")
    paths, skip = [], False
    for entry in entries:
        if skip or not entry:
            skip = False
            continue
        paths.append(entry[3:])
        skip = entry[0] in "RC"
    return [p for p in paths if not any(p == a or p.startswith(a) for a in allowed)]


def require_clean(repo: str | os.PathLike, allowed: Sequence[str] = PIPELINE_OUTPUTS) -> str:
    """``HEAD``'s commit, after checking that workers would see the same code and params."""
    changed = uncommitted_changes(repo, allowed)
    if changed:
        raise CheckoutError(
            f"uncommitted changes in {', '.join(changed)}: workers check out the commit, not your "
            "working tree; commit and push them first"
        )
    return head_commit(repo)


@contextlib.contextmanager
def _file_lock(path: Path) -> Iterator[None]:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def workdir(root: str | os.PathLike | None = None) -> Path:
    """A worker's directory for checkouts: ``root``, else ``$FOCALCSE_WORKDIR``, else ``~/.cache/focalcse/pool``."""
    return Path(root or os.environ.get(WORKDIR_ENV) or DEFAULT_WORKDIR).expanduser().resolve()


def _dvc(repo: Path, *args: str, env: dict[str, str] | None = None) -> str:
    proc = subprocess.run(
        [*dvc_command(), *args], cwd=repo, env=env or stage_env(), capture_output=True, text=True
    )
    if proc.returncode != 0:
        raise CheckoutError(f"dvc {' '.join(args)} in {repo} failed: {proc.stderr.strip()}")
    return proc.stdout


def worker_checkout(
    git_url: str, commit: str, root: str | os.PathLike | None = None, label: str = "default"
) -> Path:
    """A checkout of ``commit`` from ``git_url`` under the worker's :func:`workdir`, made once.

    One checkout per (commit, ``label``) — the label is the parameter set — so flow runs for
    different commits or parameter sets never share a working tree; flow runs for the same one share
    it (DVC's repository lock orders their commits). All checkouts share ``<workdir>/dvc-cache``.
    """
    if not _COMMIT_RE.fullmatch(commit):
        raise CheckoutError(f"commit {commit!r}: expected a full 40-hex git commit id")
    if not re.fullmatch(r"[\w.-]+", label):
        raise CheckoutError(f"label {label!r}: expected letters, digits, '.', '_' or '-'")
    base = workdir(root)
    dest = base / f"{commit[:12]}-{label}"
    with _file_lock(base / ".checkout.lock"):
        if (dest / ".git").is_dir():
            head = head_commit(dest)
            if head != commit:
                raise CheckoutError(f"{dest} is at {head}, expected {commit}; remove it to start over")
            return dest
        tmp = base / f".{dest.name}.partial"
        shutil.rmtree(tmp, ignore_errors=True)
        git(base, "clone", "--quiet", "--no-checkout", git_url, str(tmp))
        try:
            git(tmp, "checkout", "--quiet", "--detach", commit)
        except CheckoutError:
            shutil.rmtree(tmp, ignore_errors=True)
            raise CheckoutError(
                f"commit {commit} is not in {git_url}: push it there before running on the pool"
            ) from None
        _dvc(tmp, "cache", "dir", "--local", str(base / "dvc-cache"))
        tmp.rename(dest)  # only a complete checkout gets the final name
    return dest


def stale_stages(
    repo: str | os.PathLike, stages: Sequence[str], env: dict[str, str] | None = None
) -> set[str]:
    """The stages among ``stages`` whose outputs are missing or out of date (``dvc status``)."""
    if not stages:
        return set()
    return set(json.loads(_dvc(Path(repo), "--wait-for-lock", "status", "--json", *stages, env=env) or "{}"))


def restore_upstream(
    repo: str | os.PathLike,
    stage: str,
    env: dict[str, str] | None = None,
    on_line: Callable[[str], None] | None = None,
) -> dict[str, str]:
    """Bring ``stage``'s upstream stages up to date from the DVC remote's run-cache, one flow run at a
    time per checkout; returns ``{stage: action}`` for those that were not up to date.

    Done stage by stage (``--single-item``) and only for stale ones: ``dvc repro`` takes a write lock
    on a stage's outputs even when it is unchanged, which would collide with another item's command
    reading them (``... is busy``) when a worker runs several items at once. An upstream stage
    missing from the run-cache is run here (same inputs, same result), which only costs time.
    """
    graph = dvc_graph(repo)
    ancestors = graph.ancestors(stage)
    order = [s for s in graph.stages if s in ancestors]
    done: dict[str, str] = {}
    with _file_lock(dvc_dir(repo) / "tmp" / "focalcse-upstream.lock"):
        stale = stale_stages(repo, order, env)
        for name in order:
            if name in stale or graph.upstream.get(name, set()) & set(done):
                result = check_stage(run_dvc_stage(repo, name, on_line=on_line, env=env, pull=True))
                done[name] = result.action
    return done


def dvc_dir(folder: str | os.PathLike) -> Path:
    """The ``.dvc`` folder of the checkout holding ``folder`` (the checkout, or a set's folder in it)."""
    here = Path(folder).resolve()
    for candidate in (here, *here.parents):
        if (candidate / ".dvc").is_dir():
            return candidate / ".dvc"
    raise CheckoutError(f"{folder}: not inside a DVC repository (no .dvc folder at or above it)")


def set_remote(repo: str | os.PathLike, url: str, name: str = "pool") -> None:
    """Make ``url`` the default DVC remote of this checkout only (``.dvc/config.local``)."""
    _dvc(Path(repo), "remote", "add", "--local", "--force", "--default", name, url)


def push_run_cache(repo: str | os.PathLike, what: str, env: dict[str, str] | None = None) -> str:
    """``dvc push --run-cache``: outputs and run-cache entries to the default remote.

    Raises :class:`StageError` (``what`` names it): transient, since a remote that cannot be reached
    now may be reachable on a retry; a missing remote is deterministic.
    """
    proc = subprocess.run(
        [*dvc_command(), "push", "--run-cache"],
        cwd=repo,
        env=env or stage_env(),
        capture_output=True,
        text=True,
    )
    output = proc.stdout + proc.stderr
    if proc.returncode != 0:
        kind = DETERMINISTIC if "no remote specified" in output.lower() else TRANSIENT
        raise StageError(f"push after {what}", proc.returncode, kind, output.strip()[-2000:])
    # DVC resolves stage paths against the working directory: run it there, in its own process.
    proc = subprocess.run(
        [sys.executable, "-m", "focalcse.ops.workpool"],
        cwd=repo,
        env=env or stage_env(),
        capture_output=True,
        text=True,
    )
    if proc.returncode != 0:
        raise StageError(
            f"push after {what}", proc.returncode, TRANSIENT, (proc.stdout + proc.stderr)[-2000:]
        )
    return output + proc.stdout


def push_run_cache_outputs(repo: str | os.PathLike) -> int:
    """Push every object the local run-cache entries reference, ``cache: false`` outputs included.

    ``dvc push --run-cache`` (DVC 3.67) sends the entries and the workspace's cached outputs, but not
    the objects of ``cache: false`` outputs (our metrics files), which DVC commits to the cache only
    for the run-cache. Without them another checkout cannot restore the entry (``Some of the cache
    files do not exist neither locally nor on remote``) and runs the stage again. Returns the number
    of objects sent.
    """
    from dvc.repo import Repo

    with Repo(str(repo)) as dvc_repo:
        runs = Path(dvc_repo.cache.legacy.path) / "runs"
        entries = [(p.parent.name, p.name) for p in runs.glob("*/*/*") if p.is_file()]
        sent = 0
        for objs in dvc_repo.stage_cache.get_used_objs(entries).values():
            result = dvc_repo.cloud.push(objs)
            if result.failed:
                raise RuntimeError(f"could not push {len(result.failed)} object(s) to the DVC remote")
            sent += len(result.transferred)
    return sent


def label_for(param_set: str | None) -> str:
    """Checkout label for a parameter set (``default`` = the commit's ``params.yaml``)."""
    if not param_set:
        return "default"
    safe = re.sub(r"[^\w.-]", "_", param_set)
    return safe if safe == param_set else f"{safe}-{hashlib.sha1(param_set.encode()).hexdigest()[:6]}"


if __name__ == "__main__":  # used by push_run_cache, in the checkout
    print(f"{push_run_cache_outputs(Path.cwd())} object(s) of run-cache entries' uncached outputs pushed")
