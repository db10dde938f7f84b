"""The numbers docs/performance.md shows, rendered from the committed benchmark files.

Each function returns Markdown for one cog block of ``docs/performance.md`` (``make docs`` refreshes
them; ``tests/test_docs_fresh.py`` fails on a stale one). A file argument is a path relative to the
repository root (the working directory), usually one of ``benchmarks/*.json`` as
``benchmarks/bench.py``, ``benchmarks/profile_step.py`` and ``benchmarks/levers.py`` wrote it.
Nothing is measured here: a block only formats what its file holds, so a rerun of a benchmark
changes the document at the next ``make docs`` and nowhere else.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from focalcse.report.render import Table, table_markdown

# The training benchmark's sides in the order the tables show them: each precision's
# sentence-transformers side, then ours, then ours with the padded forward.
TRAIN_SIDES = ("st-bf16", "ours-bf16", "ours-bf16-padded", "st-fp32", "ours-fp32", "ours-fp32-padded")
BOLD_SIDES = ("ours-bf16", "ours-fp32")  # the shipped configuration at each precision


def load(path: str | Path) -> dict[str, Any]:
    """A committed benchmark file (relative to the working directory)."""
    p = Path(path)
    p = p if p.is_absolute() else Path.cwd() / p
    if not p.is_file():
        raise FileNotFoundError(f"benchmark file {p} not found (expected a committed benchmarks/*.json)")
    return json.loads(p.read_text())


def _md(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    return table_markdown(Table("", list(header), [list(r) for r in rows]))


def signed(x: float, digits: int = 2) -> str:
    """``+0.07`` / ``−0.14`` (a typographic minus, as the prose writes it)."""
    return format(x, f"+.{digits}f").replace("-", "−")


def num(x: float, digits: int = 2) -> str:
    return format(x, f".{digits}f").replace("-", "−")


def ratio(x: float) -> str:
    return f"{x:.2f}×"


def _bold(text: str, on: bool) -> str:
    return f"**{text}**" if on else text


def _train(path: str | Path) -> tuple[dict[str, Any], dict[str, dict[str, Any]]]:
    report = load(path)
    if "train" not in report:
        raise KeyError(f"{path} holds no training benchmark (no 'train' section)")
    return report, report["train"]


def _like(side: dict[str, Any], precision: str) -> float | None:
    return side.get(f"speedup_vs_st_{precision}")


def _reps(side: dict[str, Any], precision: str) -> list[float]:
    return list(side.get(f"speedup_vs_st_{precision}_per_rep") or [])


# ---------------------------------------------------------------- training throughput
def train_table(path: str | Path = "benchmarks/train_results.json") -> str:
    """The like-for-like training table: sentences/s, the ratio against sentence-transformers at the
    same precision (each repetition's in brackets), against its fp32 default, the median step, peak
    RSS (its growth in training) and STS-B dev after the run's steps."""
    report, tr = _train(path)
    steps = report["config"]["train_steps"]
    rows = []
    for name in [s for s in TRAIN_SIDES if s in tr] + [s for s in tr if s not in TRAIN_SIDES]:
        s = tr[name]
        who, precision = name.split("-")[:2]
        bold = name in BOLD_SIDES
        like = _like(s, precision)
        if name.endswith("-compiled") and f"st-{precision}" in tr:  # against its own eager side
            eager = tr[f"st-{precision}"]["sentences_per_second"]
            like_cell = f"{ratio(s['sentences_per_second'] / eager)} of eager"
        elif who == "st":
            like_cell = "1.00×"
        elif like is None:
            like_cell = "–"
        else:
            reps = ", ".join(f"{r:.2f}" for r in _reps(s, precision))
            like_cell = _bold(ratio(like), bold) + (f" ({reps})" if reps else "")
        rows.append(
            [
                _bold(name, bold),
                _bold(f"{s['sentences_per_second']:.1f}", bold),
                like_cell,
                ratio(s["speedup_vs_st_fp32"]),
                f"{s['median_step_ms']:.0f}",
                f"{s['peak_rss_mb']:.0f} ({s['train_rss_growth_mb']:+.0f})",
                f"{s['stsb_dev_after']:.2f}",
            ]
        )
    return _md(
        [
            "side",
            "sentences/s",
            "vs ST at the same precision (each rep)",
            "vs ST fp32, its default",
            "median step ms",
            "peak RSS MB (growth in training)",
            f"STS-B dev after {steps} steps",
        ],
        rows,
    )


def _targets(report: dict[str, Any]) -> dict[str, float]:
    return {p: report["targets"][f"train_speedup_{p}"] for p in ("bf16", "fp32")}


def train_headline(path: str | Path = "benchmarks/train_results.json") -> str:
    """The opening figures: ours against sentence-transformers at the same precision, each target met
    or not in every repetition, and what skipping the padding alone gives."""
    report, tr = _train(path)
    targets = _targets(report)
    parts, verdicts = [], []
    for precision in ("bf16", "fp32"):
        ours, st = tr[f"ours-{precision}"], tr[f"st-{precision}"]
        reps = _reps(ours, precision)
        parts.append(
            f"**{ratio(_like(ours, precision))}** {'as many sentences per second ' if precision == 'bf16' else ''}"
            f"in {precision} ({ours['sentences_per_second']:.1f} against "
            f"{st['sentences_per_second']:.1f} sentences/s; the repetitions' ratios "
            f"{', '.join(f'{r:.2f}' for r in reps)})"
        )
        met = [r >= targets[precision] for r in reps]
        verdicts.append(
            f"≥ {targets[precision]:g}× {precision}: "
            + ("met in every repetition" if all(met) else f"met in {sum(met)} of {len(met)} repetitions")
        )
    pad = [
        f"{ratio(tr[f'ours-{p}']['sentences_per_second'] / tr[f'ours-{p}-padded']['sentences_per_second'])} in {p} "
        f"({tr[f'ours-{p}']['sentences_per_second']:.1f} against {tr[f'ours-{p}-padded']['sentences_per_second']:.1f})"
        for p in ("bf16", "fp32")
        if f"ours-{p}-padded" in tr
    ]
    text = (
        "Against sentence-transformers at the same precision, batch, data and clipping, focalcse's trainer "
        f"runs {parts[0]} and {parts[1]}. Targets: " + "; ".join(verdicts) + "."
    )
    if pad:
        text += " The unpadded forward gives " + " and ".join(pad) + " over our padded one."
    return text


def train_best(path: str | Path, bars: dict[str, float]) -> str:
    """Ours against sentence-transformers at its best (the faster of its eager and ``torch_compile``
    sides at the same precision), each against ``bars`` (precision -> ratio asked), and what the
    compilation costs: each side's start-up beyond the steady state and one CPU-default item's time."""
    report, tr = _train(path)
    parts = []
    for precision in ("bf16", "fp32"):
        ours = tr.get(f"ours-{precision}")
        if ours is None or f"speedup_vs_st_{precision}_best" not in ours:
            continue
        best = ours[f"speedup_vs_st_{precision}_best"]
        rival = ours[f"st_{precision}_best_side"]
        bar = bars.get(precision)
        verdict = (
            ""
            if bar is None
            else f"; the median {'at or above' if best >= bar else 'below'} the {bar:g}× asked"
        )
        reps = [
            a / b
            for a, b in zip(
                ours.get("sentences_per_second_per_rep") or [],
                tr[rival].get("sentences_per_second_per_rep") or [],
                strict=False,
            )
        ]
        each = f"; the repetitions' ratios {', '.join(f'{r:.2f}' for r in reps)}" if len(reps) > 1 else ""
        parts.append(
            f"**{ratio(best)}** in {precision} ({ours['sentences_per_second']:.1f} against "
            f"{tr[rival]['sentences_per_second']:.1f} sentences/s of `{rival}`{each}{verdict})"
        )

    def excess(name: str, s: dict[str, Any]) -> str:  # each repetition's start-up, for a compiled side
        each = s.get("startup_excess_seconds_per_rep") or []
        return (
            f"; reps {', '.join(f'{e:.1f}' for e in each)} s" if name.endswith("-compiled") and each else ""
        )

    timed = [
        f"`{name}` {s['startup_excess_seconds']:.1f} s{excess(name, s)} ({s['item_seconds']:.0f} s)"
        for name, s in tr.items()
        if "item_seconds" in s
    ]
    steps = {s["item_steps"] for s in tr.values() if "item_steps" in s}
    text = "Against sentence-transformers at its best: " + " and ".join(parts) + "."
    if timed:
        text += (
            " Start-up beyond the steady state (the run less its steps at the median step time; for a "
            f"compiled side, mostly compilation), and in brackets one CPU-default item of {'/'.join(map(str, sorted(steps)))} steps at that "
            "rate, start-up included: " + ", ".join(timed) + "."
        )
    return text


def side_moved(before: str | Path, after: str | Path) -> str:
    """Each side both training files hold: sentences/s in the first and in the second, and the ratio.
    Sentence-transformers' sides ran the same code in both, so their move is the machine's."""
    a, b = _train(before)[1], _train(after)[1]
    cells = [
        f"`{side}` {a[side]['sentences_per_second']:.1f} → {b[side]['sentences_per_second']:.1f} "
        f"({ratio(b[side]['sentences_per_second'] / a[side]['sentences_per_second'])})"
        for side in a
        if side in b
    ]
    return (
        f"Sentences/s from [{Path(before).name}](../{before}) to [{Path(after).name}](../{after}), same "
        f"machine kind: {', '.join(cells)}. Sentence-transformers ran the same code in both, so its "
        "sides' move is the machine's from one run to the other; the ratios above compare sides of one run."
    )


def train_best_brief(path: str | Path) -> str:
    """One line for the README: ours against sentence-transformers at its best, per precision, with the
    machine and the commit the benchmark ran."""
    report, tr = _train(path)
    parts = [
        f"**{ratio(tr[f'ours-{p}'][f'speedup_vs_st_{p}_best'])}** in {p}"
        for p in ("bf16", "fp32")
        if f"speedup_vs_st_{p}_best" in tr.get(f"ours-{p}", {})
    ]
    m = report["machine"]
    commit = (report.get("note") or "").rpartition("commit ")[2] or "not recorded"
    return (
        f"Training runs {' and '.join(parts)} as many sentences per second as sentence-transformers at its "
        "best setting (the faster of its eager and `torch_compile` trainers), same backbone, batch, data and "
        f"precision ({m['cpu_model']}, {m['cpu_count']} cores, commit {commit}; "
        "[docs/performance.md](docs/performance.md))."
    )


def item_timing(before: str | Path, after: str | Path, bench: str | Path, side: str = "ours-bf16") -> str:
    """One CPU-default train item rerun with ``dvc repro --force -s`` by two codes (two
    ``scripts/probe.py determinism`` files): the stage's wall time per run, and for the later code the
    item's own steps (its train metrics: sentences/s, median step) against the benchmark's ``side``."""
    a, c = load(before), load(after)
    _, tr = _train(bench)

    def walls(r: dict[str, Any]) -> str:
        w = [run["wall_s"] for run in r["runs"]]
        return f"{min(w)}–{max(w)} s" if min(w) != max(w) else f"{w[0]} s"

    runs = c["runs"]
    rates = [run["sentences_per_second"] for run in runs if "sentences_per_second" in run]
    steps = [run["step_seconds_median"] for run in runs if "step_seconds_median" in run]
    text = (
        f"`{c['item']}` (`{c['command']}`: start-up, the dev evaluations and saving included) took "
        f"{walls(a)} at `{a['commit']}` ({len(a['runs'])} runs) and {walls(c)} at `{c['commit']}` "
        f"({len(runs)} runs), {c['cpu_model']}."
    )
    if rates and steps:
        text += (
            f" Inside the item at `{c['commit']}`, its steps ran {min(rates):.1f}–{max(rates):.1f} sentences/s "
            f"(median step {1e3 * min(steps):.0f}–{1e3 * max(steps):.0f} ms) against the benchmark's `{side}` "
            f"{tr[side]['sentences_per_second']:.1f} sentences/s (median step {tr[side]['median_step_ms']:.0f} ms)."
        )
    return text


def _items(source: str) -> dict[str, dict[str, Any]]:
    """Train items' metrics: a snapshot file (``{"items": {name: fields}}``) or a glob of metrics files
    (each with its ``git_commit`` from the ``.meta.json`` beside it)."""
    if source.endswith(".json") and Path(source).is_file():
        return load(source)["items"]
    items = {}
    for path in sorted(p for p in Path().glob(source) if not p.name.endswith(".meta.json")):
        doc = json.loads(path.read_text())
        meta = path.with_suffix(".meta.json")
        doc["git_commit"] = json.loads(meta.read_text()).get("git_commit", "?") if meta.is_file() else "?"
        items[path.stem] = doc
    return items


def item_rates(source: str) -> str:
    """The spread of a run's train items' sentences/s (and of their median step, where recorded), each
    item named, with the commit that produced them (``source``: see :func:`_items`)."""
    items = _items(source)
    rates = {k: v["sentences_per_second"] for k, v in items.items()}
    commits = sorted({str(v.get("git_commit", "?"))[:7] for v in items.values()})
    lo, hi = min(rates.values()), max(rates.values())
    each = ", ".join(f"{rates[k]:.0f}" for k in rates)
    text = f"{lo:.1f} to {hi:.1f} sentences/s ({each}, in the order of {', '.join(f'`{k}`' for k in rates)}"
    steps = [v["step_seconds_median"] for v in items.values() if v.get("step_seconds_median")]
    if steps:
        text += f"; median step {1e3 * min(steps):.0f}–{1e3 * max(steps):.0f} ms"
    return text + f"; code of {', '.join(f'`{c}`' for c in commits)})"


def train_machine(path: str | Path = "benchmarks/train_results.json") -> str:
    """Where and how the training benchmark ran: its command, CPU, library versions and wall time."""
    report = load(path)
    m = report["machine"]
    flags = ", ".join(m.get("cpu_bf16") or []) or "none"
    return (
        f"`{report['command']}`: {m['cpu_model']}, {m['cpu_count']} cores (bf16 flags: {flags}), torch "
        f"{m['torch']}, {m['torch_threads']} threads, transformers {m['transformers']}, sentence-transformers "
        f"{m['sentence_transformers']}; {report['wall_seconds']:.0f} s, finished {report['finished']}."
    )


def train_targets_sentence(path: str | Path = "benchmarks/train_results.json") -> str:
    """Each target against each repetition's ratio, what the padding alone costs, and the memory gap."""
    report, tr = _train(path)
    targets = _targets(report)
    lows, misses = [], []
    for p in ("bf16", "fp32"):
        reps = _reps(tr[f"ours-{p}"], p)
        lows.append(f"{min(reps):.2f}× {p}")
        misses += [p for r in reps if r < targets[p]]
    verdict = (
        "both met, every repetition at or above its target"
        if not misses
        else f"not met in every repetition ({', '.join(sorted(set(misses)))})"
    )
    gap = {p: tr[f"ours-{p}"]["peak_rss_mb"] - tr[f"st-{p}"]["peak_rss_mb"] for p in ("bf16", "fp32")}
    memory = (
        f"{gap['bf16']:+.0f} MB peak RSS against sentence-transformers in bf16, {gap['fp32']:+.0f} MB in fp32"
    )
    return (
        f"Targets: ≥ {targets['bf16']:g}× in bf16 and ≥ {targets['fp32']:g}× in fp32 against "
        f"sentence-transformers at the same precision: {verdict} (lowest: {', '.join(lows)}). Memory: {memory}."
    )


def train_history(runs: Sequence[tuple[str, str]]) -> str:
    """One row per committed run of the training benchmark: ``runs`` is ``(file, label)`` pairs, the
    label naming the code that ran; the last row (the current file) in bold."""
    rows = []
    for i, (path, label) in enumerate(runs):
        tr = _train(path)[1]
        last = i == len(runs) - 1
        cells = [label]
        for p in ("bf16", "fp32"):
            ours, st = tr[f"ours-{p}"], tr[f"st-{p}"]
            cells += [
                f"{ours['sentences_per_second']:.1f} / {st['sentences_per_second']:.1f}",
                ratio(_like(ours, p)),
            ]
        padded = tr.get("ours-bf16-padded")
        rows.append(
            [_bold(c, last) for c in cells] + [f"{padded['sentences_per_second']:.1f}" if padded else "–"]
        )
    return _md(
        ["code", "ours bf16 / ST bf16", "ratio", "ours fp32 / ST fp32", "ratio", "ours bf16 padded"], rows
    )


def train_spread(paths: Sequence[str], side: str) -> str:
    """The lowest and highest sentences/s one side had across several runs of the benchmark."""
    rates = [_train(p)[1][side]["sentences_per_second"] for p in paths]
    return f"{min(rates):.1f} to {max(rates):.1f} sentences/s"


def train_same_quality(a: str | Path, b: str | Path) -> str:
    """Whether our sides' STS-B dev after training is exactly equal in two runs of the benchmark (the
    training computed the same numbers), compared as the files' floats."""
    ta, tb = _train(a)[1], _train(b)[1]
    sides = [s for s in ta if s.startswith("ours-") and s in tb]
    differ = [s for s in sides if ta[s]["stsb_dev_after"] != tb[s]["stsb_dev_after"]]
    if not differ:
        return (
            f"Our {len(sides)} sides' STS-B dev after training is exactly equal in `{Path(a).name}` and "
            f"`{Path(b).name}` (the files' floats compared): the two codes trained the same numbers."
        )
    return (
        f"Our sides' STS-B dev after training differs between `{Path(a).name}` and `{Path(b).name}` for "
        + ", ".join(
            f"{s} ({ta[s]['stsb_dev_after']:.4f} against {tb[s]['stsb_dev_after']:.4f})" for s in differ
        )
        + "."
    )


# ---------------------------------------------------------------- quality, unpadded against padded
def _summary(s: dict[str, Any] | None) -> str:
    return f"{s['mean']:.2f} ± {s['std']:.2f}" if s else ""


def _quality(report: dict[str, Any]) -> dict[str, Any]:
    return report.get("quality", report)  # a bench.py file, or a combined file at the top level


def quality_table(rows: Sequence[tuple[str, str, str]], treatment: str, baseline: str) -> str:
    """STS-B dev, ``treatment`` against ``baseline`` over seeds: ``rows`` is ``(label, file, test key)``
    triples; each row shows both sides' mean ± sd (when the file holds those seeds' scores alone), the
    paired difference, its 95 % CI and p (the file's paired t)."""
    out = []
    for i, (label, path, key) in enumerate(rows):
        q = _quality(load(path))
        t = q[key]
        if (t["treatment"], t["baseline"]) != (treatment, baseline):
            raise ValueError(
                f"{path}:{key} compares {t['treatment']} with {t['baseline']}, not {treatment} with {baseline}"
            )
        whole = key == "test"  # the file's own seeds; a sub-range test has no per-side summary here
        last = i == len(rows) - 1
        out.append(
            [
                _bold(label, last),
                _summary(q["summary"][treatment]) if whole else "",
                _summary(q["summary"][baseline]) if whole else "",
                _bold(signed(t["mean_diff"]), last),
                _bold(f"{num(t['ci_low'])} to {signed(t['ci_high'])}", last),
                f"{t['p_value']:.2f}",
            ]
        )
    return _md(
        ["seeds", treatment, baseline, f"difference ({treatment} − {baseline})", "95 % CI, paired t", "p"],
        out,
    )


def quality_deltas(path: str | Path, treatment: str, baseline: str, groups: Sequence[tuple[int, int]]) -> str:
    """Each seed's difference ``treatment − baseline`` from a file's per-seed scores, grouped by seed
    ranges ``(first, last)``."""
    q = _quality(load(path))
    seeds = list(q["seeds"])
    diffs = dict(
        zip(seeds, (a - b for a, b in zip(q["dev"][treatment], q["dev"][baseline], strict=True)), strict=True)
    )
    parts = []
    for first, last in groups:
        chunk = [signed(diffs[s]) for s in seeds if first <= s <= last]
        parts.append(f"{', '.join(chunk)} (seeds {first}–{last})")
    return "Per-seed differences: " + ", ".join(parts) + "."


def quality_brief(path: str | Path, key: str = "test", bound: float = 0.2) -> str:
    """One paired test of a quality file in a phrase: the difference, its CI and p, and whether the CI
    lies within ``±bound``."""
    t = _quality(load(path))[key]
    inside = -bound <= t["ci_low"] and t["ci_high"] <= bound
    return (
        f"{signed(t['mean_diff'])} over {t['n']} seeds (95 % CI {num(t['ci_low'])} to {signed(t['ci_high'])}, "
        f"p = {t['p_value']:.2f}; " + ("within" if inside else "**wider than**") + f" the ±{bound:g} asked)"
    )


def quality_before_check(
    pair: str | Path, check: str | Path = "benchmarks/quality_2b4af07_seed1.json"
) -> str:
    """Is the paired baseline (an older code's run) what the code just before the change gives? ``check``
    is that code's run of the same side on a seed of the pair; its score against the baseline's."""
    pr, ck = load(pair), load(check)
    q = ck["quality"]
    side = next(iter(q["dev"]))
    seed, got = q["seeds"][0], q["dev"][side][0]
    base = dict(zip(pr["seeds"], pr["dev"]["baseline"], strict=True))[seed]
    commit = (ck.get("note") or "").rpartition("commit ")[2] or "?"
    same = "the same score, float for float" if got == base else f"{got!r} against {base!r}"
    return (
        f"The baseline's code is the one the levers changed: `{side}` seed {seed} trained by the code just "
        f"before them (commit {commit}, [{Path(check).name}](../{check})) gives {same} as in the baseline "
        f"({base:.2f})."
    )


def value(path: str | Path, key: str, spec: str = ".2f", suffix: str = "") -> str:
    """One number of a benchmark file, by its dotted key (``"eval.sides.ours-bf16.seconds"``)."""
    node: Any = load(path)
    for part in key.split("."):
        if not isinstance(node, dict) or part not in node:
            raise KeyError(f"{path} has no {key!r} (missing {part!r})")
        node = node[part]
    return format(node, spec) + suffix


def ci_reading(rows: Sequence[tuple[str, str, str]], bound: float = 0.2) -> str:
    """Which of the tests' 95 % intervals lie within ``±bound`` (``rows``: ``(label, file, test key)``)."""
    wider, within = [], []
    for label, path, key in rows:
        t = _quality(load(path))[key]
        edge = t["ci_high"] if abs(t["ci_high"]) >= abs(t["ci_low"]) else t["ci_low"]
        (within if -bound <= t["ci_low"] and t["ci_high"] <= bound else wider).append(
            f"{label} ({signed(edge)})"
        )
    parts = []
    if wider:
        parts.append(f"wider than the ±{bound:g} asked with seeds {' and '.join(wider)}")
    if within:
        parts.append(f"within it with seeds {' and '.join(within)}")
    return "The 95 % interval is " + "; ".join(parts) + "."


def detects(path: str | Path, key: str = "test") -> str:
    """Whether a quality file's paired t detects a difference at its α."""
    t = _quality(load(path))[key]
    word = "detects a difference" if t["significant"] else "detects no difference"
    return f"{word} at α = {t['alpha']:g} (p = {t['p_value']:.2f}, {t['n']} seeds)"


def largest_seed_difference(path: str | Path, treatment: str, baseline: str) -> str:
    """The largest single-seed difference ``treatment − baseline`` of a file's per-seed scores."""
    q = _quality(load(path))
    diffs = [a - b for a, b in zip(q["dev"][treatment], q["dev"][baseline], strict=True)]
    return f"±{max(abs(d) for d in diffs):.2f}"


def same_scores(a: str | Path, b: str | Path, side: str) -> str:
    """Whether one side's per-seed scores are exactly equal in two files, over the seeds both hold."""
    qa, qb = _quality(load(a)), _quality(load(b))
    sa = dict(zip(qa["seeds"], qa["dev"][side], strict=True))
    sb = dict(zip(qb["seeds"], qb["dev"][side], strict=True))
    common = sorted(set(sa) & set(sb))
    if not common:
        raise ValueError(f"{a} and {b} share no seed")
    differ = [s for s in common if sa[s] != sb[s]]
    span = (
        f"seeds {common[0]}–{common[-1]}"
        if common == list(range(common[0], common[-1] + 1))
        else f"{len(common)} seeds"
    )
    if not differ:
        return f"{side}'s scores are exactly equal in `{Path(a).name}` and `{Path(b).name}` ({span}, the files' floats)"
    return f"{side}'s scores differ between `{Path(a).name}` and `{Path(b).name}` on {len(differ)} of {len(common)} seeds"


def quality_walls(paths: Sequence[str]) -> str:
    """The wall times of the benchmark runs behind a table, in seconds."""
    walls = [f"{load(p)['wall_seconds']:.0f} s" for p in paths]
    return walls[0] if len(walls) == 1 else ", ".join(walls[:-1]) + " and " + walls[-1]


# ---------------------------------------------------------------- levers and profiles
def levers_table(path: str | Path = "benchmarks/levers.json") -> str:
    """Each cheap lever timed on its own (the file's median of its repetitions, ms)."""
    report = load(path)
    rows = [[name, f"{ms:.1f}"] for name, ms in report["ms"].items()]
    return _md([f"lever ({report['threads']} threads, median of {report['reps']})", "ms"], rows)


def lever_ms(name: str, path: str | Path = "benchmarks/levers.json") -> str:
    """One lever's time, as the table shows it."""
    ms = load(path)["ms"]
    if name not in ms:
        raise KeyError(f"lever {name!r} is not in {path} (it has {sorted(ms)})")
    return f"{ms[name]:.1f}"


def step_levers_table(path: str | Path = "benchmarks/step_levers.json") -> str:
    """``benchmarks/step_levers.py``'s pairs (each lever after what it replaced, in the file's order):
    milliseconds before and after, and the ratio."""
    r = load(path)
    names = list(r["ms"])
    rows = []
    for before, after in zip(names[::2], names[1::2], strict=True):
        what, _, how_before = before.partition(", ")
        _, _, how_after = after.partition(", ")
        a, b = r["ms"][before], r["ms"][after]
        rows.append(
            [
                what,
                f"{a:.2f} ({how_before.removesuffix(' (before)')})",
                f"{b:.2f} ({how_after})",
                ratio(a / b),
            ]
        )
    head = [f"lever ({r['threads']} threads, median of {r['reps']}; ms)", "before", "after", "before / after"]
    return (
        _md(head, rows)
        + f"\n\n{r['machine']['cpu_model']}, torch {r['machine']['torch']}, `{r['command']}`, commit {r['commit']}."
    )


def _part(report: dict[str, Any], part: str) -> str:
    steps = report["steps"]
    return f"{report['seconds'][part] / steps:.3f} ({100 * report['share'][part]:.1f} %)"


def profile_pair_table(
    padded: str | Path, unpadded: str | Path, labels: tuple[str, str] = ("padded", "unpadded")
) -> str:
    """Seconds per step and share of the hooked step for each part, before against after (two
    ``profile_step.py`` files; by default the padded forward against the unpadded one)."""
    a, b = load(padded), load(unpadded)
    parts = list(dict.fromkeys([*a["seconds"], *b["seconds"]]))
    rows = [
        [p, _part(a, p) if p in a["seconds"] else "–", _part(b, p) if p in b["seconds"] else "–"]
        for p in parts
    ]
    return _md(["part of the step", *labels], rows)


def profile_medians(
    padded: str | Path, unpadded: str | Path, labels: tuple[str, str] = ("padded", "unpadded")
) -> str:
    """The two files' median step without the hooks and their ratio."""
    a, b = load(padded)["step_seconds_plain"], load(unpadded)["step_seconds_plain"]
    return f"**{a:.3f} s {labels[0]}, {b:.3f} s {labels[1]}** ({ratio(a / b)})"


def profile_compiled(compiled: str | Path, eager: str | Path) -> str:
    """``profile_step.py --compile`` against the same code's eager profile: median steps, and the first
    step (compilation included)."""
    c, e = load(compiled), load(eager)
    return (
        f"{c['precision']}: {c['step_seconds_plain']:.3f} s a step compiled against {e['step_seconds_plain']:.3f} s "
        f"eager ({ratio(e['step_seconds_plain'] / c['step_seconds_plain'])} of eager's speed), the first step "
        f"{c['first_step_seconds']:.1f} s (compilation included; {e['first_step_seconds']:.1f} s eager)"
    )


def _seconds(report: dict[str, Any], *parts: str) -> float:
    return sum(report["seconds"].get(p, 0.0) for p in parts) / report["steps"]


def _share(report: dict[str, Any], *parts: str) -> float:
    return 100 * sum(report["share"].get(p, 0.0) for p in parts)


DENSE = ("forward: Q/K/V + attention-output projections", "forward: FFN")
ATTENTION = "forward: attention"
ELEMENTWISE = "forward: layer norms + element-wise"
PACKING = "forward: packing (pack / re-pad around attention; unpadded only)"


def _pct_range(a: float, b: float) -> str:
    lo, hi = sorted((round(a), round(b)))
    return f"{lo} %" if lo == hi else f"{lo}–{hi} %"


def profile_reading(padded: str | Path, unpadded: str | Path) -> str:
    """What the padded-against-unpadded profiles show: the dense layers' and the backward's shares,
    and each part that unpadding moved (seconds per step)."""
    a, b = load(padded), load(unpadded)

    def moved(*parts: str) -> str:
        return f"{_seconds(a, *parts):.3f} → {_seconds(b, *parts):.3f} s"

    return (
        f"What bounds the bf16 step here is not the dense layers: the projections and the FFN are "
        f"{_pct_range(_share(a, *DENSE), _share(b, *DENSE))} of it, the backward "
        f"{_pct_range(_share(a, 'backward'), _share(b, 'backward'))}. Unpadding shrinks the dense layers "
        f"({moved(*DENSE)}), the attention ({moved(ATTENTION)}) and the layer norms and element-wise ops "
        f"(dropout among them: {moved(ELEMENTWISE)}), and adds the packing around attention "
        f"({_seconds(b, PACKING):.3f} s); the backward went {moved('backward')}. The step gains "
        f"{ratio(a['step_seconds_plain'] / b['step_seconds_plain'])}."
    )


def profile_shares(path: str | Path = "benchmarks/profile_step.json") -> str:
    """One profile's shares of the dense layers, the attention with the element-wise modules, and the optimizer."""
    r = load(path)
    opt = next(p for p in r["share"] if p.startswith("optimizer"))
    return (
        f"the projections and the FFN together took {_share(r, *DENSE):.0f} % of the step, the attention and "
        f"the layer norms / element-wise modules {_share(r, ATTENTION, ELEMENTWISE):.0f} %, the optimizer "
        f"{_share(r, opt):.1f} %"
    )


def profile_table(path: str | Path = "benchmarks/profile_step.json") -> str:
    """One ``profile_step.py`` file: seconds per step and share of the hooked step for each part."""
    report = load(path)
    steps = report["steps"]
    rows = [
        [part, f"{seconds / steps:.3f}", f"{100 * report['share'][part]:.1f} %"]
        for part, seconds in report["seconds"].items()
    ]
    return _md(["part of the step", "s per step", "share"], rows)


def profile_median(path: str | Path = "benchmarks/profile_step.json") -> str:
    report = load(path)
    return f"{report['step_seconds_plain']:.3f} s without the hooks, {report['step_seconds_hooked']:.3f} s with them"


# ---------------------------------------------------------------- padding
def train_padding(path: str | Path = "benchmarks/padding.json") -> str:
    """How much of a training batch is padding (``padding.py``), and the most that removing it all
    could speed up the per-token work."""
    r = load(path)["train"]
    sides = [r["random_sample"], r["pipeline_sample"]]
    shares = [100 * s["padding_share"] for s in sides]
    ups = [s["max_speedup"] for s in sides]
    lo, hi = f"{min(ups):.2f}", f"{max(ups):.2f}"
    return (
        f"At `max_seq_len` {r['max_seq_len']} with all-MiniLM-L6-v2's tokenizer, {shares[0]:.1f} % of a batch's "
        f"tokens are padding on {sides[0]['what']} of the stand-in corpus and {shares[1]:.1f} % on "
        f"{sides[1]['what']} (batches of {r['batch_size']} in the trainer's order; "
        f"[benchmarks/padding.json](../benchmarks/padding.json)), so removing all of it could speed the "
        f"per-token work by at most {lo if lo == hi else f'{lo}–{hi}'}×."
    )


def eval_padding(path: str | Path = "benchmarks/padding.json") -> str:
    """The evaluation's padding: its length-sorted batches against the same batches unsorted."""
    e = load(path)["eval"]
    s, u = e["sorted"], e["unsorted"]
    return (
        f"its batches of {e['batch_size']} are {100 * s['padding_share']:.2f} % padding ({s['real_tokens']:,} real "
        f"tokens of {s['padded_positions']:,} over the {len(e['tasks'])} tasks' {e['unique_sentences']:,} unique "
        f"sentences; {100 * u['padding_share']:.0f} % unsorted)"
    )


def eval_sentences(path: str | Path = "benchmarks/padding.json") -> str:
    """The 7 tasks' sentence count and unique sentences, in thousands."""
    e = load(path)["eval"]
    return f"{e['sentences'] / 1000:.1f}k STS sentences, {e['unique_sentences'] / 1000:.1f}k unique"


def item_peak_memory(pattern: str = "metrics/train/*-seed*.json") -> str:
    """The range of ``peak_memory_mb`` over the checkout's training-item metrics files."""
    files = sorted(p for p in Path.cwd().glob(pattern) if not p.name.endswith(".meta.json"))
    peaks = [json.loads(p.read_text())["peak_memory_mb"] for p in files]
    if not peaks:
        raise FileNotFoundError(f"no training metrics matched {pattern} under {Path.cwd()}")
    return f"{min(peaks):.0f}–{max(peaks):.0f} MB over its {len(peaks)} training items"


# ---------------------------------------------------------------- the earlier full-preset run
def full_preset_table(
    results: str | Path = "benchmarks/results.json", quality: str | Path = "benchmarks/quality.json"
) -> str:
    """The full preset's four targets (``results.json``) and the 5-seed quality check (``quality.json``)."""
    r = load(results)
    targets, tr, ev, lo = r["targets"], r["train"], r["eval"], r["loss"]
    ours, st = tr["ours-bf16"], tr["st-fp32"]
    q = _quality(load(quality))
    t = q["test"]
    mark = {True: "met", False: "not met"}
    train_x = ours["speedup_vs_st_fp32"]
    ev_ours, ev_st = ev["sides"]["ours-bf16"], ev["sides"]["st-fp32"]
    eval_x = ev_ours["speedup_vs_st_fp32"]
    max_diff = ev_ours["max_abs_diff"]
    paired, whole = lo["paired_step_ratio"], lo["step_ratio_focal_over_infonce"]
    half = max(abs(t["ci_low"]), abs(t["ci_high"]))
    rows = [
        [
            f"training ≥ {targets['train_speedup']:g}× sentence-transformers (its default fp32 recipe)",
            f"{ours['sentences_per_second']:.1f} against {st['sentences_per_second']:.1f} sentences/s: "
            f"**{ratio(train_x)}**; peak RSS {ours['peak_rss_mb']:.0f} MB against {st['peak_rss_mb']:.0f} MB",
            mark[train_x >= targets["train_speedup"]],
        ],
        [
            "... at the same or better STS-B dev after the same steps",
            f"{len(q['seeds'])} seeds × {q['steps']} steps: {_summary(q['summary'][t['treatment']])} against "
            f"{_summary(q['summary'][t['baseline']])}; difference {signed(t['mean_diff'])} (95% CI "
            f"{num(t['ci_low'])} to {signed(t['ci_high'])}, paired t p = {t['p_value']:.2f})",
            f"the same within ±{half:.2f}; "
            + ("better" if t["significant"] and t["mean_diff"] > 0 else "not better"),
        ],
        [
            f"7-task STS evaluation ≥ {targets['eval_speedup']:g}× faster, every task within "
            f"{targets['eval_max_abs_diff']:g} of fp32",
            f"{ev_ours['seconds']:.1f} s against {ev_st['seconds']:.1f} s: **{ratio(eval_x)}**; largest task "
            f"difference {max_diff:.3f}",
            mark[eval_x >= targets["eval_speedup"] and max_diff <= targets["eval_max_abs_diff"]],
        ],
        [
            f"Focal-InfoNCE step ≤ {targets['focal_step_ratio']:g}× InfoNCE",
            f"{paired:.3f} (paired steps), {whole:.3f} (whole runs)",
            mark[max(paired, whole) <= targets["focal_step_ratio"]],
        ],
    ]
    return _md(["target", "measured", ""], rows)


def full_preset_like_for_like(results: str | Path = "benchmarks/results.json") -> str:
    """The same run's like-for-like figures: ours bf16 against sentence-transformers bf16, fp32 against
    fp32, and the evaluation's fp32 path alone."""
    r = load(results)
    tr, ev = r["train"], r["eval"]["sides"]
    return (
        f"against that setting focalcse is only **{ratio(tr['ours-bf16']['speedup_vs_st_bf16'])}** faster "
        f"({tr['st-bf16']['sentences_per_second']:.1f} sentences/s), and in fp32 against fp32 it is "
        f"{ratio(tr['ours-fp32']['speedup_vs_st_fp32'])} faster. For evaluation, the fp32 path alone is "
        f"{ratio(ev['ours-fp32']['speedup_vs_st_fp32'])} faster than sentence-transformers"
    )


# ---------------------------------------------------------------- roofline
def roofline_table(path: str | Path = "benchmarks/roofline.json") -> str:
    """The machine's matmul TFLOP/s per shape and precision (``benchmarks/roofline.py``)."""
    r = load(path)
    peak = r["peak_tflops"]
    shapes = list(peak["bf16"])
    return _md(["GEMM", *peak], [[s, *[f"{peak[p][s]:.3f}" for p in peak]] for s in shapes])


def roofline_sentence(
    path: str | Path = "benchmarks/roofline.json", sides: Sequence[str] | None = None
) -> str:
    """The step's matmul FLOPs, what our trainer's step achieves, and its share of the measured peak
    (of the achieved ``sides`` only, when given)."""
    r = load(path)
    if sides is not None:
        r = {**r, "achieved": {k: v for k, v in r["achieved"].items() if k in sides}}
    f = r["step_flops"]
    parts = []
    for side, a in r["achieved"].items():
        prec = side.split("-")[1]
        peak = max(r["peak_tflops"][prec].values())
        parts.append(
            f"`{side}` {a['median_step_seconds']:.3f} s a step, {a['tflops']:.3f} TFLOP/s, "
            f"{100 * a['share_of_peak']:.0f} % of the best {prec} GEMM ({peak:.3f} TFLOP/s; at most "
            f"{1 / a['share_of_peak']:.2f}× faster if every FLOP ran at that rate)"
        )
    return (
        f"{r['cpu']['cpu_model']}, {r['threads']} threads, torch {r['torch']} (`{r['command']}`, commit "
        f"{r['commit']}): a training step of {r['batch']['sentences']} sentences × {r['batch']['views']} views "
        f"({f['packed_tokens']:.0f} packed tokens on average over the sample's {r['batch']['batches']} batches) is "
        f"{f['step'] / 1e9:.0f} GFLOP of matmuls ({f['forward'] / 1e9:.1f} forward, of which attention "
        f"{f['forward_attention'] / 1e9:.1f}; the backward counted as twice the forward). Against the step "
        f"times of {_step_sources(r)}: " + "; ".join(parts) + "." + _roofline_bytes(r)
    )


def _step_sources(r: dict) -> str:
    """The file(s) a roofline JSON took its step times from: a training benchmark or profiles."""
    files = r.get("profile_json") or [r["train_json"]]
    return ", ".join(f"[{p}](../{p})" for p in files)


_BYTE_PARTS = {
    "elementwise": "element-wise",
    "attention": "attention probabilities",
    "packing": "packing and casts",
    "matmul": "matmul operands",
    "optimizer": "optimizer",
}


def _roofline_bytes(r: dict) -> str:
    """The step's estimated bytes, the measured element-wise rate and the time floor they give, per
    side (absent from files written before the script counted bytes)."""
    if "step_bytes" not in r:
        return ""
    parts = []
    for side, a in r["achieved"].items():
        prec = side.split("-")[1]
        moved = r["step_bytes"][prec]
        rate = max(r["elementwise_gbps"][prec].values())
        split = ", ".join(f"{_BYTE_PARTS[k]} {moved[k] / 1e9:.2f}" for k in _BYTE_PARTS)
        parts.append(
            f"`{side}` moves about {moved['step'] / 1e9:.2f} GB a step ({split}); at the best {prec} "
            f"element-wise rate measured, {rate:.1f} GB/s, that is at least {a['bytes_floor_seconds']:.3f} s, "
            f"{100 * a['bytes_floor_seconds'] / a['median_step_seconds']:.0f} % of its step (the matmuls at "
            f"their peak: {a['matmul_floor_seconds']:.3f} s)"
        )
    return (
        " Bytes moved, estimated by counting every operation as reading its inputs and writing its "
        "output once (no cache reuse, no fusion; the backward twice the forward): " + "; ".join(parts) + "."
    )


def no_bf16_sentence(bf16: str | Path, fp32: str | Path) -> str:
    """A training step in bf16 and in fp32 on a CPU without bf16 matmul instructions, from two
    ``profile_step.py`` files of one machine: why the check stage refuses bf16 there."""
    b, f = load(bf16), load(fp32)
    for r in (b, f):
        if r["machine"].get("cpu_bf16"):
            raise ValueError(f"{r['command']}: this CPU has bf16 instructions {r['machine']['cpu_bf16']}")
    if b["machine"]["cpu_model"] != f["machine"]["cpu_model"]:
        raise ValueError(f"{bf16} and {fp32} come from different CPUs")
    return (
        f"On {b['machine']['cpu_model']} (no AVX512-BF16, no AMX), torch {b['torch']}, commit {b['commit']}: "
        f"a training step of the CPU default (batch {b['batch']}, {b['threads']} threads) took "
        f"**{b['step_seconds_plain']:.1f} s in bf16** against **{f['step_seconds_plain']:.2f} s in fp32**, "
        f"{ratio(b['step_seconds_plain'] / f['step_seconds_plain'])} as long (median of {b['steps']} and "
        f"{f['steps']} steps; `{b['command']}`, `{f['command']}`)"
    )
