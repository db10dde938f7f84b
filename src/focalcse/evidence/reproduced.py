"""``focalcse reproduced``: did a rerun reproduce the committed results?

``make reproduce`` overwrites the committed result files in the work tree, so the committed ones are
read back from git (``git show <rev>:<path>``, :func:`committed_tree`) and both trees are compared
table by table (:data:`TABLES`): the tables of the report and the result files they are built from,
every path from :class:`focalcse.layout.Layout`. Per table: the number of values compared, the
largest absolute difference, the tolerance, whether every verdict word is the same, and the files or
values that one side lacks. A table passes when its largest difference is within its tolerance,
every verdict is the same and nothing is missing on either side.

The verdict of a paired test is the one the significance step recorded (``significant_holm``, set by
:func:`focalcse.eval.significance.add_holm`: Holm p < α), never recomputed from the p-values here.

The tolerance lives in one file, :attr:`focalcse.layout.Layout.reproduction_tolerance_file`: the
``--json`` record of a comparison between two runs of the default; each table's tolerance is that
comparison's largest difference on the table. Each side of the record names its code commits, its
train / evaluate code (a fingerprint of the md5s its ``dvc.lock`` records), its precisions and its CPU
models, and the printout says plainly when the results it checks differ from those in any of these
(:func:`tolerance_notes`). Without the file every value must match exactly."""

from __future__ import annotations

import io
import json
import math
import subprocess
import tarfile
import tempfile
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from focalcse.core.frameworks import default_framework
from focalcse.eval.significance import GEOMETRY_FAMILY
from focalcse.layout import Layout, companion_file, result_files
from focalcse.lockfile import code_fingerprint, lock_stages
from focalcse.results import read_result

Numbers = dict[str, float]
Words = dict[str, str]
Extract = Callable[[Mapping[str, Any]], tuple[Numbers, Words]]
WORK_TREE = "the work tree"
LOCK_FILE = "dvc.lock"
SHOWN = 5  # differences listed per kind and table; the rest are counted


# ---------------------------------------------------------------- what a table holds
def _number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _pick(doc: Mapping[str, Any], keys: tuple[str, ...], prefix: str = "") -> Numbers:
    return {f"{prefix}{k}": float(doc[k]) for k in keys if _number(doc.get(k))}


def verdict(test: Mapping[str, Any]) -> str:
    """The significance step's decision on one paired test, in the report's words: ``significant``
    when it set ``significant_holm``, ``not significant`` when it did not, ``no verdict`` for a test
    in no Holm family or with an undefined Holm p (the report gives those no verdict either)."""
    p = test.get("p_holm")
    if "significant_holm" not in test or not _number(p) or math.isnan(p):
        return "no verdict"
    return "significant" if test["significant_holm"] else "not significant"


def _backbone_entries(doc: Mapping[str, Any]) -> Iterator[tuple[str, Mapping[str, Any]]]:
    """``(framework/backbone, entry)`` of a ``significance.json``: the reference framework's (the top
    level; named as the registry's default framework, the reference of every committed set), then each
    other framework's."""
    for b, entry in doc.get("backbones", {}).items():
        yield f"{default_framework()}/{b}", entry
    for f, fdoc in (doc.get("frameworks") or {}).items():
        for b, entry in fdoc.get("backbones", {}).items():
            yield f"{f}/{b}", entry


def _is_geometry(key: str) -> bool:
    return key in GEOMETRY_FAMILY


def _summaries(geometry: bool) -> Extract:
    """Mean and std over seeds of every score (``geometry``: alignment and uniformity only; else
    every other score)."""

    def extract(doc: Mapping[str, Any]) -> tuple[Numbers, Words]:
        out: Numbers = {}
        for part, entry in _backbone_entries(doc):
            for loss, scores in entry.get("losses", {}).items():
                for key, s in scores.items():
                    if _is_geometry(key) == geometry:
                        out |= _pick(s, ("mean", "std"), f"{part}/{loss} {key} ")
        return out, {}

    return extract


TEST_SPREAD = ("mean_diff", "ci_low", "ci_high", "sd_diff", "mdd_80")  # in the unit of the score


def _tests(geometry: bool | None, keys: tuple[str, ...], words: bool = False) -> Extract:
    """``keys`` of every paired test (``geometry`` True / False: only alignment and uniformity / only
    the other scores; None: all), and with ``words`` each test's :func:`verdict`."""

    def extract(doc: Mapping[str, Any]) -> tuple[Numbers, Words]:
        nums: Numbers = {}
        said: Words = {}
        for part, entry in _backbone_entries(doc):
            for loss, tests in entry.get("ttest", {}).items():
                for key, test in tests.items():
                    if geometry is not None and _is_geometry(key) != geometry:
                        continue
                    label = f"{part}/{loss}-{doc.get('baseline', 'baseline')} {key}"
                    nums |= _pick(test, keys, f"{label} ")
                    if words:
                        said[label] = verdict(test)
        return nums, said

    return extract


def _summary_stats(stats: tuple[str, ...]) -> Extract:
    """The leaves ``stats`` (``avg`` / ``std`` / ``p`` / ``p_holm``) of ``summary.json``, at any depth."""

    def walk(node: Mapping[str, Any], path: str) -> Iterator[tuple[str, float]]:
        for k, v in node.items():
            if k == "meta":
                continue
            if isinstance(v, Mapping):
                yield from walk(v, f"{path}{k}/")
            elif k in stats and _number(v):
                yield f"{path.rstrip('/')} {k}", float(v)

    return lambda doc: (dict(walk(doc, "")), {})


def _sts_scores(doc: Mapping[str, Any]) -> tuple[Numbers, Words]:
    """An evaluation's task scores and average, and the same weighted by subset size (``wmean``)."""
    nums = {k: float(v) for k, v in doc.items() if _number(v) and not _is_geometry(k)}
    nums |= _pick(doc.get("wmean") or {}, tuple(doc.get("wmean") or ()), "wmean ")
    return nums, {}


def _geometry(doc: Mapping[str, Any]) -> tuple[Numbers, Words]:
    return _pick(doc, GEOMETRY_FAMILY), {}


def _dev_selection(keys: tuple[str, ...]) -> Extract:
    """``keys`` (STS-B scores) of a train or ablation item, and which step it kept (the report's
    "best STS-B dev checkpoint" column and its last-step note)."""

    def extract(doc: Mapping[str, Any]) -> tuple[Numbers, Words]:
        step = f"best step {doc.get('best_step', '?')} of {doc.get('steps', '?')}"
        return _pick(doc, keys), {"kept": step}

    return extract


def _hard_negatives(doc: Mapping[str, Any]) -> tuple[Numbers, Words]:
    """Every model's mean cosine and each chosen pair's cosines; which pairs were chosen."""
    nums = _pick(doc.get("mean_cos") or {}, tuple(doc.get("mean_cos") or ()), "mean_cos ")
    for pair in doc.get("pairs", []):
        cos = pair.get("cos") or {}
        nums |= _pick(cos, tuple(cos), f"pair {pair.get('index')} cos ")
    return nums, {"pairs": " ".join(str(p.get("index")) for p in doc.get("pairs", []))}


@dataclass(frozen=True)
class Table:
    """One table of the report: the result files it is built from, each with what is read from it."""

    name: str  # its key in the --json record and the tolerance file
    title: str
    parts: tuple[tuple[Callable[[Layout], list[Path]], Extract], ...]


def _significance(layout: Layout) -> list[Path]:
    return [layout.significance_file]


def _summary(layout: Layout) -> list[Path]:
    return [layout.summary_file]


def _evals(layout: Layout) -> list[Path]:
    return result_files(layout.eval_dir)


def _ablations(layout: Layout) -> list[Path]:
    return result_files(layout.ablation_dir)


STSB = ("STSBenchmark", "stsb_dev_best", "stsb_dev_start")
TABLES: tuple[Table, ...] = (
    Table("sts_per_run", "STS score of every evaluated run", ((_evals, _sts_scores),)),
    Table(
        "sts_means",
        "Table 2: mean ± std over seeds",
        ((_significance, _summaries(geometry=False)), (_summary, _summary_stats(("avg", "std")))),
    ),
    Table(
        "deltas",
        "Table 2: Δ, its 95% interval, sd of the paired Δ, detectable Δ",
        ((_significance, _tests(geometry=False, keys=TEST_SPREAD)),),
    ),
    Table(
        "p_values",
        "Tables 2-3: p, Holm p, verdicts",
        (
            (_significance, _tests(geometry=None, keys=("p_value", "p_holm"), words=True)),
            (_summary, _summary_stats(("p", "p_holm"))),
        ),
    ),
    Table(
        "geometry",
        "Table 3: alignment and uniformity",
        (
            (_evals, _geometry),
            (_ablations, _geometry),
            (_significance, _summaries(geometry=True)),
            (_significance, _tests(geometry=True, keys=TEST_SPREAD)),
        ),
    ),
    Table("ablation", "Tables 4-5: ablation points (STS-B)", ((_ablations, _dev_selection(STSB)),)),
    Table(
        "training",
        "STS-B dev of every trained run",
        ((lambda lay: result_files(lay.train_metrics_dir), _dev_selection(STSB[1:])),),
    ),
    Table(
        "hard_negatives",
        "Hard negatives: cosines",
        ((lambda lay: result_files(lay.hard_negatives_dir), _hard_negatives),),
    ),
)


def source_paths(layout: Layout) -> list[Path]:
    """Every file or folder the tables read (a committed tree needs only these)."""
    files = [layout.significance_file, layout.summary_file]
    dirs = [layout.eval_dir, layout.ablation_dir, layout.train_metrics_dir, layout.hard_negatives_dir]
    return [*dirs, *files, *(companion_file(f, "meta") for f in files)]


# ---------------------------------------------------------------- the two trees
def _git(root: Path, *args: str, text: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(["git", *args], cwd=root, capture_output=True, text=text)


def repo_root(folder: str | Path) -> Path:
    """The top of the git checkout holding ``folder``."""
    folder = Path(folder)
    if not folder.is_dir():
        raise ValueError(f"--root {folder}: not a folder")
    done = _git(folder, "rev-parse", "--show-toplevel")
    if done.returncode != 0:
        raise ValueError(f"--root {folder}: not inside a git checkout (the committed results come from git)")
    return Path(done.stdout.strip())


def commit_of(root: Path, rev: str) -> str:
    """The full hash of ``rev`` in the checkout at ``root``."""
    done = _git(root, "rev-parse", "--verify", "--quiet", f"{rev}^{{commit}}")
    if done.returncode != 0:
        raise ValueError(f"revision {rev!r}: not a commit of {root}")
    return done.stdout.strip()


def committed_tree(root: Path, rev: str, dest: Path) -> str:
    """Write the result files of commit ``rev`` (those of :func:`source_paths`) under ``dest``, at
    the paths they have in the checkout; return the commit's full hash."""
    sha = commit_of(root, rev)
    wanted = [str(p) for p in source_paths(Layout())] + [LOCK_FILE]  # the lock: which code ran
    listed = _git(root, "ls-tree", "-r", "-z", "--name-only", sha, "--", *wanted)
    names = [n for n in listed.stdout.split("\0") if n]
    if not names:
        return sha
    tar = _git(root, "archive", "--format=tar", sha, "--", *names, text=False)
    if tar.returncode != 0:
        raise ValueError(f"git archive {sha[:7]} in {root}: {tar.stderr.decode(errors='replace').strip()}")
    with tarfile.open(fileobj=io.BytesIO(tar.stdout)) as archive:
        archive.extractall(dest, filter="data")
    return sha


# ---------------------------------------------------------------- the comparison
@dataclass
class TableResult:
    table: Table
    tolerance: float
    values: int = 0
    max_diff: float | None = None  # None: no value of the table on both sides
    max_at: str | None = None
    max_values: tuple[float, float] | None = None  # (this side, the committed side)
    verdicts: int = 0
    changed: list[tuple[str, str, str]] = field(default_factory=list)  # (label, this, committed)
    missing: dict[str, list[str]] = field(default_factory=dict)  # side -> files it lacks
    missing_values: list[str] = field(default_factory=list)

    @property
    def within(self) -> bool:
        return self.max_diff is None or self.max_diff <= self.tolerance

    @property
    def ok(self) -> bool:
        return self.within and not self.changed and not any(self.missing.values()) and not self.missing_values


def _difference(a: float, b: float) -> float:
    if math.isnan(a) and math.isnan(b):
        return 0.0
    d = abs(a - b)
    return math.inf if math.isnan(d) else d


def _read(
    layout: Layout, table: Table, side: str
) -> tuple[dict[str, Numbers], dict[str, Words], dict[str, Any]]:
    """Per file (relative to the tree's root) of ``table``: its numbers and its words; and the
    documents read (``side``: the tree's name, for errors)."""
    nums: dict[str, Numbers] = {}
    words: dict[str, Words] = {}
    docs: dict[str, Any] = {}
    for files, extract in table.parts:
        for path in files(layout):
            if not path.is_file():
                continue
            rel = path.relative_to(layout.root).as_posix()
            if rel not in docs:
                try:
                    docs[rel] = read_result(path)
                except ValueError as err:
                    raise ValueError(f"{rel} in {side}: not a JSON result document ({err})") from None
            doc = docs[rel]
            n, w = extract(doc)
            nums.setdefault(rel, {}).update(n)
            words.setdefault(rel, {}).update(w)
    return nums, words, docs


def compare_table(
    table: Table, here: Layout, there: Layout, tolerance: float, sides: tuple[str, str]
) -> tuple[TableResult, dict[str, Any], dict[str, Any]]:
    """``table`` of ``here`` against ``there`` (``sides``: the two trees' names, for the missing
    lists); also every document read, per side."""
    res = TableResult(table, tolerance)
    nums_a, words_a, docs_a = _read(here, table, sides[0])
    nums_b, words_b, docs_b = _read(there, table, sides[1])
    res.missing = {
        sides[0]: sorted(set(nums_b) - set(nums_a)),
        sides[1]: sorted(set(nums_a) - set(nums_b)),
    }
    for rel in sorted(set(nums_a) & set(nums_b)):
        name = Path(rel).stem
        a, b = nums_a[rel], nums_b[rel]
        res.missing_values += [f"{name} {k}" for k in sorted(set(a) ^ set(b))]
        for key in sorted(set(a) & set(b)):
            res.values += 1
            d = _difference(a[key], b[key])
            if res.max_diff is None or d > res.max_diff:
                res.max_diff, res.max_at, res.max_values = d, f"{name} {key}", (a[key], b[key])
        wa, wb = words_a[rel], words_b[rel]
        res.missing_values += [f"{name} {k} (verdict)" for k in sorted(set(wa) ^ set(wb))]
        for key in sorted(set(wa) & set(wb)):
            res.verdicts += 1
            if wa[key] != wb[key]:
                res.changed.append((f"{name} {key}", wa[key], wb[key]))
    return res, docs_a, docs_b


def _provenance(layout: Layout, docs: Mapping[str, Mapping[str, Any]]) -> dict[str, list[str]]:
    """The CPU models and code commits that the ``meta`` of the runs (evaluation, training and
    ablation items; ``docs`` by path relative to the tree) records: where the models were trained and
    scored. The significance step's statistics depend on no CPU kind."""
    runs = [layout.eval_dir, layout.train_metrics_dir, layout.ablation_dir]
    prefixes = tuple(f"{d.relative_to(layout.root).as_posix()}/" for d in runs)
    metas = [d.get("meta") or {} for rel, d in docs.items() if rel.startswith(prefixes)]
    precisions = {
        f"{step} {m[key]['precision']}"
        for m in metas
        for step, key in (("train", "train_config"), ("eval", "eval_config"))
        if isinstance(m.get(key), dict) and m[key].get("precision")
    }
    return {
        "cpu_models": sorted(
            {str(m["hardware"]["cpu_model"]) for m in metas if (m.get("hardware") or {}).get("cpu_model")}
        ),
        "code_commits": sorted({str(m["git_commit"]) for m in metas if m.get("git_commit")}),
        "precisions": sorted(precisions),
        # the train and evaluate code its dvc.lock records (None without a lock)
        "code": code_fingerprint(lock_stages(layout.root / LOCK_FILE)),
    }


@dataclass(frozen=True)
class Tolerance:
    """Each table's tolerance and where it comes from (None: no record, every value must match)."""

    per_table: dict[str, float]
    source: dict[str, Any] | None
    path: Path

    def of(self, table: str) -> float:
        return self.per_table.get(table, 0.0)


def load_tolerance(layout: Layout) -> Tolerance:
    """The tolerance record (:attr:`Layout.reproduction_tolerance_file`), or exact matching without one."""
    path = layout.reproduction_tolerance_file
    if not path.is_file():
        return Tolerance({}, None, path)
    try:
        record = json.loads(path.read_text())
        per_table = {
            name: float(t["max_diff"]) for name, t in record["tables"].items() if t["max_diff"] is not None
        }
        source = {side: record[side] for side in ("compared", "against")}
    except (ValueError, KeyError, TypeError) as err:
        raise ValueError(f"{path}: not a `focalcse reproduced --json` record ({err!r})") from None
    incomplete = [n for n, t in record["tables"].items() if any(t.get("missing", {}).values())]
    if incomplete:
        raise ValueError(
            f"{path}: tables {', '.join(incomplete)} lack files on one side; a tolerance needs a complete comparison"
        )
    return Tolerance(per_table, source, path)


def _side_text(side: Mapping[str, Any], name: str | None = None) -> str:
    cpus = " and ".join(side.get("cpu_models") or ["CPU not recorded"])
    code = ", ".join(c[:7] for c in side.get("code_commits") or []) or "not recorded"
    precision = ", ".join(side.get("precisions") or []) or "precision not recorded"
    return f"{side['name'] if name is None else name} (code {code}, {precision}, {cpus})"


# each table's unit, as the tolerance sentence names it
UNITS = {
    "sts_per_run": "Spearman × 100",
    "sts_means": "Spearman × 100",
    "deltas": "Spearman × 100",
    "p_values": "p",
    "geometry": "alignment / uniformity",
    "ablation": "STS-B Spearman × 100",
    "training": "STS-B dev Spearman × 100",
    "hard_negatives": "cosine",
}


def tolerance_text(tol: Tolerance) -> str:
    """Where the tolerance comes from, in one sentence (printed, and quoted in README.md)."""
    if tol.source is None:
        return (
            f"No tolerance is recorded ({Layout().reproduction_tolerance_file.as_posix()} is absent), so "
            "every value must equal the committed one exactly."
        )
    figures = "; ".join(
        f"{name} {value:.3g} ({UNITS.get(name, 'its unit')})" for name, value in tol.per_table.items()
    )
    return (
        "Each table's tolerance is the largest difference measured between two runs of the default, "
        f"{_side_text(tol.source['compared'], 'a rerun')} against "
        f"{_side_text(tol.source['against'], 'the committed run')}: {figures}."
    )


def _all(cmp_sides: list[Mapping[str, Any]], key: str) -> set[str]:
    return {str(v) for side in cmp_sides for v in (side.get(key) or [])}


def tolerance_notes(cmp: Comparison) -> list[str]:
    """What the tolerance was not measured on, among what this comparison checks: other train /
    evaluate code, another precision, another CPU kind (one line each; none when it applies)."""
    if cmp.tolerance.source is None:
        return []
    measured = [cmp.tolerance.source["compared"], cmp.tolerance.source["against"]]
    checked = [cmp.compared, cmp.against]
    where = cmp.tolerance.path.name
    notes = []
    tol_prec, prec = _all(measured, "precisions"), _all(checked, "precisions")
    if not tol_prec:
        notes.append(f"the tolerance ({where}) does not record the precision it was measured on")
    elif prec and prec != tol_prec:
        notes.append(
            f"the tolerance was measured on {', '.join(sorted(tol_prec))} results, these are "
            f"{', '.join(sorted(prec))}: it does not say how far such results may differ"
        )
    tol_code = {str(s.get("code")) for s in measured if s.get("code")}
    code = {str(s.get("code")) for s in checked if s.get("code")}
    if not tol_code:
        notes.append(
            f"the tolerance ({where}) does not record which train / evaluate code it was measured on"
        )
    elif code - tol_code:
        notes.append(
            f"the tolerance was measured on other train / evaluate code (fingerprint {', '.join(sorted(tol_code))}) "
            f"than these results (fingerprint {', '.join(sorted(code))}, from their dvc.lock)"
        )
    tol_cpu, cpu = _all(measured, "cpu_models"), _all(checked, "cpu_models")
    if cpu - tol_cpu:
        notes.append(
            f"the tolerance was measured on {' and '.join(sorted(tol_cpu)) or 'no recorded CPU'} only; these "
            f"results ran on {' and '.join(sorted(cpu))}, whose kernels may differ in the last bits"
        )
    return notes


@dataclass
class Comparison:
    compared: dict[str, Any]
    against: dict[str, Any]
    tolerance: Tolerance
    tables: list[TableResult]

    @property
    def ok(self) -> bool:
        """Every table passes, and at least one value was compared (two empty trees prove nothing)."""
        return all(t.ok for t in self.tables) and any(t.values for t in self.tables)

    def to_dict(self) -> dict[str, Any]:
        """The ``--json`` record; a record between two CPU kinds is a tolerance file."""
        return {
            "compared": self.compared,
            "against": self.against,
            # the record's path as the layout names it (relative to the checkout), not this machine's
            "tolerance_source": None
            if self.tolerance.source is None
            else Layout().reproduction_tolerance_file.as_posix(),
            "ok": self.ok,
            "tables": {
                t.table.name: {
                    "title": t.table.title,
                    "values": t.values,
                    "max_diff": t.max_diff,
                    "max_at": t.max_at,
                    "max_values": t.max_values,
                    "tolerance": t.tolerance,
                    "within": t.within,
                    "verdicts": t.verdicts,
                    "verdicts_changed": [list(c) for c in t.changed],
                    "missing": t.missing,
                    "missing_values": t.missing_values,
                    "ok": t.ok,
                }
                for t in self.tables
            },
        }


def compare(
    here: Layout, there: Layout, compared: dict[str, Any], against: dict[str, Any], tol: Tolerance
) -> Comparison:
    """Every table of ``here`` (``compared``: its name and commit) against ``there``."""
    results, docs_a, docs_b = [], {}, {}
    for table in TABLES:
        res, a, b = compare_table(table, here, there, tol.of(table.name), (compared["name"], against["name"]))
        results.append(res)
        docs_a |= a
        docs_b |= b
    return Comparison(
        {**compared, **_provenance(here, docs_a)},
        {**against, **_provenance(there, docs_b)},
        tol,
        results,
    )


# ---------------------------------------------------------------- the printout
def _g(x: float | None) -> str:
    return "-" if x is None else f"{x:.4g}"


def _listed(items: list[str]) -> str:
    more = f" and {len(items) - SHOWN} more" if len(items) > SHOWN else ""
    return ", ".join(items[:SHOWN]) + more


def lines(cmp: Comparison) -> list[str]:
    """The printout: one row per table, then what failed."""
    a, b = cmp.compared["name"], cmp.against["name"]
    out = [
        f"{_side_text(cmp.compared)} against {_side_text(cmp.against)}",
        tolerance_text(cmp.tolerance),
        *(f"note: {n}" for n in tolerance_notes(cmp)),
        "",
        f"{'table':<16} {'values':>6} {'max |diff|':>10} {'tolerance':>9}  {'numbers':<7}  {'verdicts':<14} what",
    ]
    for t in cmp.tables:
        said = (
            "-"
            if not t.verdicts
            else ("same" if not t.changed else f"{len(t.changed)} changed") + f" ({t.verdicts})"
        )
        out.append(
            f"{t.table.name:<16} {t.values:>6} {_g(t.max_diff):>10} {_g(t.tolerance):>9}  "
            f"{'PASS' if t.within else 'FAIL':<7}  {said:<14} {t.table.title}"
        )
    for t in cmp.tables:
        if t.ok:
            continue
        out.append(f"{t.table.name}:")
        if not t.within and t.max_values is not None:
            out.append(
                f"  largest difference at {t.max_at}: {t.max_values[0]!r} in {a}, {t.max_values[1]!r} in {b}"
            )
        for label, x, y in t.changed[:SHOWN]:
            out.append(f"  verdict changed, {label}: {x} in {a}, {y} in {b}")
        if len(t.changed) > SHOWN:
            out.append(f"  and {len(t.changed) - SHOWN} more changed verdicts")
        for side, files in t.missing.items():
            if files:
                out.append(f"  missing in {side}: {_listed(files)}")
        if t.missing_values:
            out.append(f"  values on one side only: {_listed(t.missing_values)}")
    failed = [t.table.name for t in cmp.tables if not t.ok]
    out.append("")
    if failed:
        out.append(f"not reproduced: {', '.join(failed)}")
    elif not cmp.ok:
        out.append(f"not reproduced: no result file of any table in both {a} and {b}")
    else:
        out.append("reproduced: every table within its tolerance, every verdict the same")
    return out


def reproduced(root: str | Path = ".", against: str = "HEAD", of: str | None = None) -> Comparison:
    """The work tree's results (``of``: those of another commit instead) against those of commit
    ``against``, in the git checkout holding ``root``; the tolerance from the work tree's record."""
    top = repo_root(root)
    with tempfile.TemporaryDirectory(prefix="focalcse-reproduced-") as tmp:
        there = Layout.at(Path(tmp) / "against")
        against_side = {"name": against, "commit": committed_tree(top, against, there.root)}
        if of is None:
            here = Layout.at(top)
            compared = {"name": WORK_TREE, "root": str(top), "head": commit_of(top, "HEAD")}
        else:
            here = Layout.at(Path(tmp) / "of")
            compared = {"name": of, "commit": committed_tree(top, of, here.root)}
        return compare(here, there, compared, against_side, load_tolerance(Layout.at(top)))
