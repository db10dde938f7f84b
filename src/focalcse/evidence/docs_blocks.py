"""The numbers README.md and docs/*.md show, rendered from the committed result files.

Each function returns Markdown for one generated block of a document (cogapp markers,
``make docs`` refreshes them, ``tests/test_docs_fresh.py`` fails on a stale one). A block names the
*result set* it reads, a folder relative to the repository root (the working directory):

* ``"default"``: the checkout's own outputs, every path from :class:`focalcse.layout.Layout`
  (``metrics/significance.json``, ``metrics/summary.json``, the per-item files, ``reports/provenance.json``);
* a set's own folder (``"sets/cpu-long"``, where ``make reproduce PARAMS=cpu-long`` runs): the same
  paths under it;
* any other folder (``"docs/<name>-run"``, ...): a committed copy of a run's ``significance.json``,
  ``summary.json``, ``report.md`` and ``provenance.json``.

A sentence that compares two sets states its test: Welch's t over the per-seed paired differences
of the two sets (each set's mean and standard deviation of Focal-InfoNCE − InfoNCE over its seeds),
computed here with scipy; the verdict word follows that p at the set's α.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from focalcse import lockfile
from focalcse.config import Params, load_params
from focalcse.core.frameworks import default_framework
from focalcse.layout import Layout, is_companion
from focalcse.lockfile import CODE_STAGES
from focalcse.report.data import ReportData, load_report_data
from focalcse.report.labels import column_label, framework_label, loss_label
from focalcse.report.prose import band_line, band_sentence, last_step_note
from focalcse.report.provenance import FULL_RUN_HOW, PROVENANCE_FILE, provenance_lines, rerun_text
from focalcse.report.render import fmt, fmt_diff, fmt_p, fmt_seconds, fmt_summary, table_markdown
from focalcse.report.tables import ablation_table, claim_checks, seed_band, table3

# the framework at the top level of every committed set's significance.json (each set's reference, its
# first framework: the registry's default, the paper's own)
REFERENCE = default_framework()
DEFAULT = "default"
# every committed result set, as README's and docs/results.md's "what was measured where" list them
COMMITTED_SETS = ("default", "sets/cpu-long", "sets/frameworks", "sets/hcl")
STS_KEYS = ("STS12", "STS13", "STS14", "STS15", "STS16", "STSBenchmark", "SICKRelatedness", "avg")
GEOMETRY = ("alignment", "uniformity")


# ---------------------------------------------------------------- the result sets
@dataclass(frozen=True)
class ResultSet:
    """One committed set's files; ``layout`` for a full output tree (``default``, a set's folder)."""

    name: str
    significance_file: Path
    summary_file: Path
    provenance_file: Path
    layout: Layout | None = None


def result_set(name: str, root: str | Path | None = None) -> ResultSet:
    """The files of set ``name`` under ``root`` (default: the working directory): ``default`` (the
    checkout's own), a set's folder (``sets/<name>``, laid out as the checkout), or a folder holding a
    set's summary files (``significance.json``, ``summary.json``, ``provenance.json``)."""
    base = Path.cwd() if root is None else Path(root)
    if name == DEFAULT:
        lay = Layout.at(base)
        return ResultSet(
            name, lay.significance_file, lay.summary_file, lay.reports_dir / PROVENANCE_FILE, lay
        )
    folder = base / name
    if (folder / "dvc.yaml").is_file():  # a set's own folder (sets/<name>/): laid out as the checkout
        lay = Layout.at(folder)
        return ResultSet(
            name, lay.significance_file, lay.summary_file, lay.reports_dir / PROVENANCE_FILE, lay
        )
    if not (folder / "significance.json").is_file():
        raise FileNotFoundError(f"result set {name!r}: {folder / 'significance.json'} not found")
    return ResultSet(name, folder / "significance.json", folder / "summary.json", folder / PROVENANCE_FILE)


def _read(path: Path) -> Any:
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such result file (expected a committed result of its set)")
    return json.loads(path.read_text())


def significance(name: str, framework: str = REFERENCE) -> dict[str, Any]:
    """Set ``name``'s ``significance.json``, the part of ``framework`` in the reference's shape."""
    sig = ReportData(
        significance=_read(result_set(name).significance_file), reference=REFERENCE
    ).significance_of(framework)
    if sig is None:
        raise ValueError(f"result set {name!r} has no {framework} entry in its significance.json")
    return sig


def _entry(sig: dict[str, Any], backbone: str | None) -> tuple[str, dict[str, Any]]:
    backbones = sig["backbones"]
    b = backbone or next(iter(backbones))
    if b not in backbones:
        raise ValueError(f"significance.json has no backbone {b!r} (it has {', '.join(backbones)})")
    return b, backbones[b]


def _default_data(name: str = DEFAULT) -> tuple[Params, ReportData]:
    """The params and report data of ``name``: the checkout's own or a set folder's."""
    rs = result_set(name)
    if rs.layout is None:
        raise FileNotFoundError(f"result set {name!r}: a committed copy holds no per-item files")
    params = load_params(rs.layout.root / "params.yaml")
    return params, load_report_data(params, rs.layout)


# ---------------------------------------------------------------- small formatters
def _p(test: dict[str, Any], key: str = "p_value") -> str:
    """A p-value in prose: 2 significant digits."""
    return format(test[key], ".2g")


def _holm_word(test: dict[str, Any]) -> str:
    return "significant after Holm" if test.get("significant_holm") else "not significant after Holm"


def sd_diff(test: dict[str, Any]) -> float:
    """The standard deviation over seeds of a paired test's differences: recorded (``sd_diff``), or
    from its t statistic (t = mean / (sd / √n)), as older files record only that."""
    if test.get("sd_diff") is not None:
        return float(test["sd_diff"])
    return abs(test["mean_diff"]) * math.sqrt(test["n"]) / abs(test["statistic"])


# ---------------------------------------------------------------- tables
def sts_table(name: str, framework: str = REFERENCE, title: str = "", backbone: str | None = None) -> str:
    """Table 2 of set ``name`` as README and results.md show it: per loss mean ± std over seeds, then
    per loss tested against the baseline its Δ, raw paired-t p and Holm p (``*``: below α)."""
    sig = significance(name, framework)
    b, entry = _entry(sig, backbone)
    keys = [k for k in STS_KEYS if any(k in s for s in entry["losses"].values())]
    label = title or f"{b}, {framework_label(framework)}"
    rows = [
        [loss_label(loss), *(fmt_summary(entry["losses"][loss].get(k)) for k in keys)]
        for loss in _losses(sig, entry)
    ]
    base = loss_label(sig["baseline"])
    for loss, tests in entry.get("ttest", {}).items():
        pair = f"{loss_label(loss)} − {base}" if len(entry["ttest"]) > 1 else "Δ"
        rows.append([pair, *(fmt_diff(tests.get(k)) for k in keys)])
        rows.append(["p, paired t (raw)", *(fmt_p(tests.get(k)) for k in keys)])
        rows.append(["p, Holm-adjusted", *(fmt_p(tests.get(k), "p_holm", "significant_holm") for k in keys)])
    return _md([label, *(column_label(k) for k in keys)], rows)


def _losses(sig: dict[str, Any], entry: dict[str, Any]) -> list[str]:
    """The set's losses, the baseline first (as the tables show them)."""
    return sorted(entry["losses"], key=lambda loss: loss != sig["baseline"])


def _md(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    from focalcse.report.render import Table

    return table_markdown(Table("", list(header), [list(r) for r in rows]))


def frameworks_table(name: str, backbone: str | None = None) -> str:
    """Table 3 over frameworks (README): per framework its baseline-loss row (mean ± std) and, per
    tested loss, Δ and Holm p of alignment, uniformity (STS-B dev), STS-B and the 7-task average."""
    sig = _read(result_set(name).significance_file)
    frameworks = [REFERENCE, *(sig.get("frameworks") or {})]
    keys = (*GEOMETRY, "STSBenchmark", "avg")
    digits = {"alignment": 3, "uniformity": 2, "STSBenchmark": 2, "avg": 2}
    rows = []
    for f in frameworks:
        part = significance(name, f)
        b, entry = _entry(part, backbone)
        base = entry["losses"][part["baseline"]]
        rows.append([framework_label(f), *(fmt_summary(base.get(k), digits[k]) for k in keys)])
        for loss, tests in entry.get("ttest", {}).items():
            rows.append(
                [
                    f"{framework_label(f)} + {loss_label(loss)} (Δ, Holm p)",
                    *(
                        f"{fmt_diff(tests.get(k), 3 if k != 'avg' and k != 'STSBenchmark' else 2)}, "
                        f"{_p(tests[k], 'p_holm')}"
                        for k in keys
                    ),
                ]
            )
    header = [f"{b}, mean ± std over {len(entry['seeds'][part['baseline']])} seeds", "ALGN ↓", "UNIF ↓"]
    return _md([*header, column_label("STSBenchmark"), "Avg. (7 tasks)"], rows)


def table3_default() -> str:
    """Table 3 of the checkout's own outputs (alignment, uniformity on STS-B dev, STS-B), as the report."""
    params, data = _default_data()
    b = params.sweep.backbones[0]
    return table_markdown(table3(params, data, b))


def ablation_tables() -> str:
    """Tables 4 and 5 of the checkout's own outputs, each with the report's seed-band sentence."""
    params, data = _default_data()
    band = seed_band(params, data)
    out = []
    for kind in ("tau", "m"):
        points = data.ablation.get(kind, [])
        if points:
            out += [
                table_markdown(ablation_table(params, data, kind)),
                "",
                band_sentence(kind, points, band),
                "",
            ]
    out.append(band_line(params, band))
    return "\n".join(out)


# ---------------------------------------------------------------- sentences
def per_seed_deltas(key: str = "avg", loss: str = "focal_infonce") -> list[float]:
    """The checkout's own per-seed differences ``loss`` − baseline on ``key``, from the eval files."""
    params, data = _default_data()
    sig = data.significance
    b = params.sweep.backbones[0]
    seeds = sig["backbones"][b]["paired_seeds"][loss]
    return [data.evals[(b, loss, s)][key] - data.evals[(b, sig["baseline"], s)][key] for s in seeds]


def claims_sentence(name: str = DEFAULT) -> str:
    """The report's claims table of set ``name`` (:func:`focalcse.report.tables.claim_checks`) as one
    sentence per framework: each measure's measured direction next to the paper's, and its reading."""
    params, data = _default_data(name)
    parts: dict[str, list[str]] = {}
    for b in data.significance["backbones"]:
        for c in claim_checks(params, data, b):
            measure = {"avg": "the 7-task average", "STSBenchmark": "STS-B"}.get(c.measure, c.measure)
            p = fmt_p(c.test, "p_holm").removesuffix(" *")
            parts.setdefault(framework_label(c.framework), []).append(
                f"{measure} {c.measured} (paper: {c.claim}; Holm p {p}: {c.reading})"
            )
    said = "; ".join(
        f"{fw}: {', '.join(items)}" if len(parts) > 1 else ", ".join(items) for fw, items in parts.items()
    )
    return f"With Focal-InfoNCE against InfoNCE, in `{name}`: {said}."


def gap_sentence(name: str, loss: str = "focal_infonce", framework: str = REFERENCE) -> str:
    """``loss`` against the baseline in set ``name``: the average's Δ with its p and Holm p, the
    per-seed differences where the set holds per-item files, and how many columns stay below α after Holm."""
    sig = significance(name, framework)
    _, entry = _entry(sig, None)
    tests = entry["ttest"][loss]
    avg = tests["avg"]
    base = loss_label(sig["baseline"])
    text = (
        f"{loss_label(loss)} − {base} on the 7-task average: {fmt_diff(avg)} "
        f"(paired t over {avg['n']} seeds, p {_p(avg)}, Holm {_p(avg, 'p_holm')}, {_holm_word(avg)})"
    )
    if name == DEFAULT and framework == REFERENCE:
        deltas = per_seed_deltas("avg", loss)
        text += "; per seed " + ", ".join(format(d, "+.2f") for d in deltas)
        ahead = all(d > 0 for d in deltas)
        text += " (ahead on every seed)" if ahead else ""
    holm = [k for k in sig["holm_family"] if k in tests]
    below = [k for k in holm if tests[k].get("significant_holm")]
    text += f". {len(below)} of the {len(holm)} columns {'is' if len(below) == 1 else 'are'} below {sig['alpha']} after Holm"
    if 0 < len(below) < len(holm):
        text += f" ({', '.join(column_label(k) for k in below)})"
    return text + "."


def geometry_sentence(name: str, loss: str = "focal_infonce", framework: str = REFERENCE) -> str:
    """Alignment and uniformity (STS-B dev) of ``loss`` against the baseline, each with Holm p over
    their 2-test family and the verdict."""
    sig = significance(name, framework)
    _, entry = _entry(sig, None)
    tests, base = entry["ttest"][loss], sig["baseline"]
    parts = []
    for k in GEOMETRY:
        if k not in tests:
            continue
        ours, theirs = entry["losses"][loss][k], entry["losses"][base][k]
        parts.append(
            f"{k} {fmt(ours['mean'], 3)} ± {fmt(ours['std'], 3)} against {fmt(theirs['mean'], 3)} "
            f"({fmt_diff(tests[k], 3)}, Holm {_p(tests[k], 'p_holm')}, {_holm_word(tests[k])})"
        )
    who = f"{framework_label(framework)} + {loss_label(loss)}" if framework != REFERENCE else loss_label(loss)
    return f"On STS-B dev, {who} against {loss_label(base)}: " + "; ".join(parts) + "."


def frameworks_verdict(name: str, loss: str = "focal_infonce") -> str:
    """Per framework of set ``name``: the STS-B and average gains and the alignment / uniformity
    differences, each with its Holm p and verdict."""
    sig = _read(result_set(name).significance_file)
    out = []
    for f in [REFERENCE, *(sig.get("frameworks") or {})]:
        _, entry = _entry(significance(name, f), None)
        t = entry["ttest"][loss]
        out.append(
            f"{framework_label(f)}: STS-B {fmt_diff(t['STSBenchmark'])} (Holm {_p(t['STSBenchmark'], 'p_holm')}, "
            f"{_holm_word(t['STSBenchmark'])}), average {fmt_diff(t['avg'])} (Holm {_p(t['avg'], 'p_holm')}, "
            f"{_holm_word(t['avg'])}), alignment {fmt_diff(t['alignment'], 3)} (Holm "
            f"{_p(t['alignment'], 'p_holm')}), uniformity {fmt_diff(t['uniformity'], 3)} (Holm "
            f"{_p(t['uniformity'], 'p_holm')})."
        )
    return "\n".join(f"* {line}" for line in out)


def welch(a: dict[str, Any], b: dict[str, Any]) -> float:
    """Two-sided Welch t-test p of two paired tests' per-seed differences (mean, sd, n of each)."""
    from scipy.stats import ttest_ind_from_stats

    return float(
        ttest_ind_from_stats(
            a["mean_diff"], sd_diff(a), a["n"], b["mean_diff"], sd_diff(b), b["n"], equal_var=False
        ).pvalue
    )


def compare_table(
    before: str, after: str, loss: str = "focal_infonce", before_framework: str = REFERENCE
) -> str:
    """Set ``after`` against set ``before``: per column each set's mean score per loss, how far it
    moved, each set's Δ (``loss`` − baseline) and the Welch t p of the two sets' per-seed differences."""
    sa, sb = significance(before, before_framework), significance(after)
    (_, ea), (_, eb) = _entry(sa, None), _entry(sb, None)
    keys = [k for k in STS_KEYS if k in eb["ttest"][loss] and k in ea["ttest"][loss]]
    rows = []
    for lo in _losses(sb, eb):
        if lo not in ea["losses"]:
            continue
        rows.append([f"{loss_label(lo)}, {before}", *(fmt_summary(ea["losses"][lo][k]) for k in keys)])
        rows.append(
            [
                f"{loss_label(lo)}, moved by",
                *(format(eb["losses"][lo][k]["mean"] - ea["losses"][lo][k]["mean"], "+.2f") for k in keys),
            ]
        )
    ta, tb = ea["ttest"][loss], eb["ttest"][loss]
    rows.append([f"Δ, {before}", *(fmt_diff(ta[k]) for k in keys)])
    rows.append([f"Δ, {after}", *(fmt_diff(tb[k]) for k in keys)])
    rows.append(
        [
            "Δ moved, Welch p",
            *(f"{tb[k]['mean_diff'] - ta[k]['mean_diff']:+.2f}, {welch(ta[k], tb[k]):.2g}" for k in keys),
        ]
    )
    return _md(["", *(column_label(k) for k in keys)], rows)


def compare_sentence(
    before: str,
    after: str,
    key: str = "avg",
    loss: str = "focal_infonce",
    before_framework: str = REFERENCE,
) -> str:
    """One comparison of two sets on column ``key``: each set's Δ and the Welch t of their per-seed
    differences, with the verdict at α (the difference of the Δs detected or not)."""
    sa, sb = significance(before, before_framework), significance(after)
    ta, tb = _entry(sa, None)[1]["ttest"][loss][key], _entry(sb, None)[1]["ttest"][loss][key]
    p = welch(ta, tb)
    alpha = sb["alpha"]
    verdict = (
        f"the two differ (p < {alpha})"
        if p < alpha
        else f"no difference between them is detected at α = {alpha} (with {ta['n']} and {tb['n']} seeds)"
    )
    return (
        f"{loss_label(loss)} − {loss_label(sb['baseline'])} on {column_label(key)}: {fmt_diff(ta)} in "
        f"`{before}` (Holm {_p(ta, 'p_holm')}), {fmt_diff(tb)} in `{after}` (Holm {_p(tb, 'p_holm')}); "
        f"Welch t over the two sets' per-seed differences: p {p:.2g}, {verdict}."
    )


def grad_norm_sentence(threshold: float = 1.0) -> str:
    """How often the checkout's own training runs clipped: pre-clip gradient norms above ``threshold``
    (``grad_norm`` in the loss curves), per loss the range over seeds of the count and of the maximum."""
    params, data = _default_data()
    parts = []
    for loss in params.sweep.losses:
        counts, maxima, steps = [], [], set()
        for (_, lo, _), (curve, _) in sorted(data.curves.items()):
            norms = [r["grad_norm"] for r in curve if lo == loss and r.get("grad_norm") is not None]
            if norms:
                counts.append(sum(n > threshold for n in norms))
                maxima.append(max(norms))
                steps.add(len(norms))
        if counts:
            parts.append(
                f"at {_range(counts, 'd')} of {_and_steps(steps)} steps for {loss_label(loss)} "
                f"(maximum {_range(maxima, '.1f')})"
            )
    return (
        f"Pre-clip gradient norms (`grad_norm` in `metrics/curves/loss/`) exceed {threshold:g} "
        + ", ".join(parts)
        + "."
    )


def _range(values: Sequence[float], spec: str) -> str:
    """``lo–hi`` of ``values`` in format ``spec``; one value where both ends print alike."""
    lo, hi = format(min(values), spec), format(max(values), spec)
    return lo if lo == hi else f"{lo}–{hi}"


def _and_steps(steps: set[int]) -> str:
    return "/".join(str(s) for s in sorted(steps))


def last_step_sentence(name: str = DEFAULT) -> str:
    """Whether set ``name``'s runs picked their last STS-B dev checkpoint (the report's sentence)."""
    params, data = _default_data(name)
    return last_step_note(params, data, params.sweep.backbones[0]) or "No run recorded its best step."


# ---------------------------------------------------------------- provenance
def provenance(name: str) -> str:
    """Set ``name``'s ``provenance.json`` as bullets (commit, parameter set, CPU, command, wall time, date)."""
    record = _read(result_set(name).provenance_file)
    lines = provenance_lines(record)
    for later in record.get("recomputed") or []:
        cpu = f" on {later['cpu_model']}" if later.get("cpu_model") else ""
        lines.append(f"Later: {later['what']}, at `{later['commit'][:7]}`{cpu} (from {later['source']})")
    return "\n".join(f"* {line}" for line in lines)


def provenance_field(name: str, key: str) -> Any:
    """One field of set ``name``'s provenance record (None when unrecorded)."""
    return _read(result_set(name).provenance_file).get(key)


def _lock_stages(name: str) -> dict[str, Any] | None:
    """The stage entries of set ``name``'s ``dvc.lock`` (``None`` for a committed copy without one)."""
    rs = result_set(name)
    return lockfile.lock_stages(rs.layout.root / "dvc.lock") if rs.layout is not None else None


def code_md5s(name: str, stages: Sequence[str] = CODE_STAGES) -> dict[str, str] | None:
    """Every code file the ``stages`` items of set ``name`` depend on, with the md5 its ``dvc.lock``
    records (:func:`focalcse.lockfile.code_md5s`); ``None`` for a set without a ``dvc.lock``."""
    lock = _lock_stages(name)
    return None if lock is None else lockfile.code_md5s(lock, stages)


def model_md5s(name: str) -> dict[str, str] | None:
    """Each train item of set ``name`` with the md5 of its model folder in the set's ``dvc.lock``
    (``None`` for a committed copy without one)."""
    lock = _lock_stages(name)
    return None if lock is None else lockfile.model_md5s(lock)


def _eval_doc(name: str, lock: dict[str, Any], train_item: str) -> Any:
    """The evaluation file of set ``name``'s ``train_item`` (its ``evaluate@`` twin's JSON output,
    from the set's ``dvc.lock`` stages ``lock``)."""
    root = result_set(name).layout.root  # type: ignore[union-attr]
    entry = lock.get("evaluate@" + train_item.split("@", 1)[1]) or {}
    paths = [o["path"] for o in entry.get("outs") or [] if not is_companion(o["path"])]
    return _read(root / paths[0]) if paths and (root / paths[0]).is_file() else None


def shared_items_sentence(a: str, b: str) -> str:
    """The train items sets ``a`` and ``b`` both hold, model md5 against model md5 (their dvc.lock)."""
    ma, mb = model_md5s(a), model_md5s(b)
    if ma is None or mb is None:
        return f"Whether `{a}` and `{b}` trained the same models is not recorded (a copy has no dvc.lock)."
    shared = sorted(set(ma) & set(mb))
    if not shared:
        return f"`{a}` and `{b}` share no train item."
    differ = [s for s in shared if ma[s] != mb[s]]
    items = ", ".join(f"`{s}`" for s in shared) if len(shared) <= 2 else f"{len(shared)} train items"
    if not differ:
        la, lb = _lock_stages(a) or {}, _lock_stages(b) or {}
        docs = [(_eval_doc(a, la, s), _eval_doc(b, lb, s)) for s in shared]
        if any(x is None or y is None for x, y in docs):
            said = "(their evaluation files are not in both sets, so the scores were not compared)"
        else:
            unequal = sum(x != y for x, y in docs)
            said = (
                f"yet {unequal} of their evaluation files differ"
                if unequal
                else "and every field of their evaluation files is equal"
            )
        return (
            f"The {items} that `{a}` and `{b}` both hold have the same model md5 in both dvc.lock files, "
            f"{said}."
        )
    return (
        f"Of the {items} that `{a}` and `{b}` both hold, {len(differ)} have another model md5 in each "
        f"dvc.lock ({', '.join(f'`{s}`' for s in differ[:3])}{', ...' if len(differ) > 3 else ''})."
    )


def checkout_code_sentence(names: Sequence[str], stages: Sequence[str] = CODE_STAGES) -> str:
    """Is this checkout's ``stages`` code the code that produced each committed set of ``names``? Each
    code file a set's ``dvc.lock`` records (directories aside), md5 by md5 against the file as it is
    now: a code change that can move a result shows here, per set, until the set is regenerated."""
    import hashlib

    current: dict[str, str | None] = {}

    def now(root: Path, path: str) -> str | None:
        if path not in current:
            f = root / path
            current[path] = hashlib.md5(f.read_bytes()).hexdigest() if f.is_file() else None
        return current[path]

    same, moved = [], {}
    total = set()
    for name in names:
        rs = result_set(name)
        root = rs.layout.root if rs.layout else Path(".")
        while root.name and (root / "..").resolve() != root.resolve() and not (root / "src").is_dir():
            root = root.parent  # a set folder's code paths are the repository's
        files = {p: m for p, m in (code_md5s(name, stages) or {}).items() if not m.endswith(".dir")}
        total |= set(files)
        changed = sorted(p for p, m in files.items() if now(root, p) != m)
        if changed:
            moved[name] = changed
        else:
            same.append(name)
    what = " and ".join(stages)
    if not moved:
        return (
            f"This checkout's {what} code is the code that produced every committed set "
            f"({', '.join(f'`{n}`' for n in names)}): all {len(total)} code files their dvc.lock files "
            "record have the same md5 here."
        )
    groups: dict[tuple[str, ...], list[str]] = {}  # sets with the same files moved, named together
    for n, files in moved.items():
        groups.setdefault(tuple(files), []).append(n)
    parts = [
        f"{', '.join(f'`{n}`' for n in sets)} ({len(files)} of {'its' if len(sets) == 1 else 'their'} code "
        f"files differ here: {', '.join(f'`{p}`' for p in files)})"
        for files, sets in groups.items()
    ]
    text = (
        f"**This checkout's {what} code is not the code that produced** {'; '.join(parts)}. Rerunning "
        f"{'it' if len(moved) == 1 else 'them'} on this code gives other models and numbers until "
        f"{'it is' if len(moved) == 1 else 'they are'} regenerated."
    )
    if same:
        text += f" {', '.join(f'`{n}`' for n in same)} ran this checkout's {what} code (every recorded md5 equal)."
    return text


def code_sentence(a: str, b: str, stages: Sequence[str] = CODE_STAGES) -> str:
    """Did sets ``a`` and ``b`` train and evaluate with the same code on the same CPU kind? The code
    files their ``train``/``evaluate`` items depend on, md5 by md5 from the two ``dvc.lock`` files, and
    each set's CPU from its provenance record."""
    ca, cb = code_md5s(a, stages), code_md5s(b, stages)
    ra, rb = _read(result_set(a).provenance_file), _read(result_set(b).provenance_file)
    commits = f"`{a}` at `{str(ra.get('commit'))[:7]}`, `{b}` at `{str(rb.get('commit'))[:7]}`"
    what = " and ".join(stages)
    if ca is None or cb is None:
        code = f"whether their {what} code was the same is not recorded ({commits}; a copy has no dvc.lock)"
    else:
        shared = sorted(set(ca) & set(cb))
        differ = [p for p in shared if ca[p] != cb[p] or ca[p] == "mixed"]
        only = sorted(set(ca) ^ set(cb))
        if not differ and not only:
            code = (
                f"their {what} items ran the same code: all {len(shared)} code files they depend on have "
                f"the same md5 in both dvc.lock files ({commits})"
            )
        else:
            listed = ", ".join(f"`{p}`" for p in (differ + only)[:3])
            code = (
                f"their {what} items ran different code: {len(differ)} of {len(shared)} shared code files "
                f"differ and {len(only)} are in one set only (e.g. {listed}; {commits})"
            )
    cpu_a, cpu_b = ra.get("cpu_model"), rb.get("cpu_model")
    same_kind = cpu_a and cpu_a == cpu_b and ra.get("cpu_flags") == rb.get("cpu_flags")
    if same_kind:
        cpu = f"on the same CPU kind ({cpu_a}, the same flags)"
    else:
        cpu = f"CPU {cpu_a or 'not recorded'} against {cpu_b or 'not recorded'}"
    return f"`{a}` and `{b}`: {code}; {cpu}."


def sets_table(names: Sequence[str]) -> str:
    """One row per set: where its results are, its commit, parameter set, CPU, command and wall time
    (its ``provenance.json``; ``not recorded`` where the record has no value)."""
    rows = []
    for name in names:
        rs = result_set(name)
        rec = _read(rs.provenance_file)
        rows.append(
            [
                f"`{rs.provenance_file.parent.relative_to(Path.cwd()).as_posix()}/`",
                f"`{str(rec['commit'])[:7]}`" if rec.get("commit") else "not recorded",
                f"`{rec['param_set']}`" if rec.get("param_set") else "not recorded",
                rec.get("cpu_model") or "not recorded",
                f"`{rec['command']}`" if rec.get("command") else "not recorded",
                _wall_cell(rec),
            ]
        )
    return _md(["results", "commit", "parameter set", "CPU", "command", "wall time (full run)"], rows)


def _wall_cell(rec: dict[str, Any]) -> str:
    """A full run's wall time, and any later partial rerun beside it (never in its place)."""
    wall = rec.get("wall_seconds")
    cell = (
        f"{fmt_seconds(wall)} ({wall:.0f} s)"
        if wall is not None
        else f"no full run recorded ({FULL_RUN_HOW})"
    )
    if rec.get("rerun"):
        cell += f"; later rerun: {rerun_text(rec['rerun'])}"
    return cell


def timing_table(names: Sequence[str]) -> str:
    """Where each set's time went, per framework: the set's wall time (its provenance), and per item
    the training seconds, sentences per second and peak memory (``metrics/train/*.json``) and the
    evaluation seconds (``metrics/eval/*.meta.json``). A committed copy without per-item files is
    left out."""
    rows = []
    for name in names:
        if result_set(name).layout is None:
            continue
        wall = _read(result_set(name).provenance_file).get("wall_seconds")
        params, data = _default_data(name)
        runs = {params.sweep.reference: (data.trains, data.evals)}
        runs |= {
            f: (data.framework_trains[f], data.framework_evals.get(f, {})) for f in data.framework_trains
        }
        for fw, (trains, evals) in runs.items():
            items = list(trains.values())
            if not items:
                continue
            eval_walls = [
                e["meta"]["wall_time_s"] for e in evals.values() if "wall_time_s" in e.get("meta", {})
            ]
            rows.append(
                [
                    f"`{name}`",
                    f"{fmt_seconds(wall)} ({wall:.0f} s)" if wall is not None else "not recorded",
                    framework_label(fw),
                    f"{len(items)} × {_range([i['steps'] for i in items], 'd')} steps",
                    _range([i["train_seconds"] for i in items], ".0f"),
                    _range([i["sentences_per_second"] for i in items], ".0f"),
                    _range([i["peak_memory_mb"] / 1024 for i in items], ".1f"),
                    _range(eval_walls, ".0f") if eval_walls else "-",
                ]
            )
    header = [
        "set",
        "wall time",
        "framework",
        "train items",
        "training s / item",
        "sentences/s",
        "peak RSS GB",
        "evaluate s / item",
    ]
    return _md(header, rows)


TEST_SUITE_FILE = "docs/test-suite.json"  # the last timed `.ci/run` from a fresh clone
DETERMINISM_FILE = "docs/determinism.json"


def determinism_sentence(path: str | Path = DETERMINISM_FILE, root: str | Path | None = None) -> str:
    """What the determinism repeat measured (``docs/determinism.json``: one item trained n times from
    scratch, each run's model md5 and final loss): how many runs, how many distinct model md5s."""
    rec = _read((Path.cwd() if root is None else Path(root)) / path)
    runs = rec["runs"]
    md5s = list(dict.fromkeys(r["model_md5"] for r in runs))
    losses = list(dict.fromkeys(r["final_loss"] for r in runs))
    same = len(md5s) == 1 and len(losses) == 1
    verdict = (
        f"all {len(runs)} gave the same model folder (`{md5s[0]}`) and final loss {losses[0]!r}"
        if same
        else f"they gave {len(md5s)} distinct model folders ({', '.join(f'`{m}`' for m in md5s)}) and "
        f"{len(losses)} distinct final losses"
    )
    # the item's md5 in the default set's dvc.lock as committed now (the probe recorded the one at its
    # time, which a later regeneration replaces)
    committed = (model_md5s("default") or {}).get(rec["item"]) if root is None else rec.get("committed_md5")
    if committed:
        verdict += (
            "; the committed dvc.lock holds the same model md5"
            if md5s == [committed]
            else f"; the committed dvc.lock holds `{committed}` (its set ran other code or another CPU kind)"
        )
    return (
        f"`{rec['item']}` trained {len(runs)} times from scratch (`{rec['command']}`) at commit "
        f"`{rec['commit']}` on the {rec['cpu']} kind: {verdict}."
    )


def suite_sentence(path: str | Path = TEST_SUITE_FILE, root: str | Path | None = None) -> str:
    """The last timed test run (``docs/test-suite.json``: `.ci/run` from a fresh clone): its commit,
    CPU kind, counts, pytest and total wall time against the 25-minute target."""
    rec = _read((Path.cwd() if root is None else Path(root)) / path)
    counts = ", ".join(f"{rec[k]} {k}" for k in ("passed", "skipped", "failed", "error") if rec.get(k))
    total, target = rec["total_seconds"], rec["target_seconds"]
    return (
        f"`{rec['command']}` from a fresh clone of `{rec['commit']}` ({rec['setup']}) on the {rec['cpu']} "
        f"kind ({rec['cores']} cores), {rec['date']}: {counts or 'no tests'}; pytest {rec['pytest_seconds']} s "
        f"on {rec['workers']} pytest-xdist workers, {total} s in all "
        + (
            f"(under the {target // 60}-minute target)."
            if total < target
            else f"(over the {target // 60}-minute target)."
        )
        + (f" Failed: {', '.join(f'`{t}`' for t in rec['failures'])}." if rec.get("failures") else "")
        + (
            f" The machine's speed meanwhile: `{ref['command']}` took {ref['before_s']} s before the run and "
            f"{ref['after_s']} s after it (median of 3)."
            if (ref := rec.get("reference"))
            else ""
        )
    )


def tolerance_sentence(root: str | Path | None = None) -> str:
    """Where `focalcse reproduced`'s tolerance comes from (the recorded cross-CPU-kind comparison, or
    exact matching without one), as the command prints it."""
    from focalcse.evidence.reproduced import load_tolerance, tolerance_text

    return tolerance_text(load_tolerance(Layout.at(Path.cwd() if root is None else Path(root))))


RERUN_FILE = "docs/rerun-new-draw.json"


def rerun_sentence(path: str | Path = RERUN_FILE) -> str:
    """A ``focalcse reproduced --json`` record of two committed runs, in words: per table PASS or FAIL
    against the tolerance, the largest difference, and the verdicts that changed."""
    rec = _read(Path(path))
    c, a = rec["compared"], rec["against"]

    def code(side: dict[str, Any]) -> str:
        return ", ".join(f"`{x[:7]}`" for x in side.get("code_commits") or []) or "not recorded"

    failed = [n for n, t in rec["tables"].items() if not t["ok"]]
    worst = ", ".join(
        f"{n} {t['max_diff']:.3g} (tolerance {t['tolerance']:.3g})"
        for n, t in rec["tables"].items()
        if t["max_diff"] is not None
    )
    changed = [v for t in rec["tables"].values() for v in t.get("verdicts_changed") or []]
    verdicts = sum(t.get("verdicts") or 0 for t in rec["tables"].values())
    return (
        f"`focalcse reproduced --of {c['name']} --against {a['name']}` (code {code(c)} against {code(a)}): "
        f"{len(failed)} of {len(rec['tables'])} tables outside the tolerance; the largest differences: {worst}. "
        f"{len(changed)} of the {verdicts} verdicts compared changed."
    )
