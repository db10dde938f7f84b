"""docs/performance.md's rendered blocks (:mod:`focalcse.evidence.bench_blocks`): each reads the value
its committed benchmark file holds, checked here against independent computations (scipy's paired t
from the per-seed scores, ratios recomputed from the sentences/s, padding counted by hand), and a
changed benchmark value makes the document stale."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest
from scipy import stats

from focalcse.evidence import bench_blocks as b

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

import padding  # noqa: E402


@pytest.fixture(autouse=True)
def _at_root(monkeypatch):
    monkeypatch.chdir(ROOT)


def _rows(markdown: str) -> list[list[str]]:
    return [[c.strip() for c in line.strip("|").split("|")] for line in markdown.splitlines()[2:]]


def test_the_quality_table_is_scipys_paired_t_of_the_per_seed_scores():
    q = json.loads((ROOT / "benchmarks/quality_unpad_20.json").read_text())
    a, c = np.array(q["dev"]["ours-bf16"]), np.array(q["dev"]["ours-bf16-padded"])
    table = b.quality_table(
        [
            ("1–10", "benchmarks/quality_unpad_20.json", "test_seeds_1_10"),
            ("1–20", "benchmarks/quality_unpad_20.json", "test"),
        ],
        "ours-bf16",
        "ours-bf16-padded",
    )
    for row, n in zip(_rows(table), (10, 20), strict=True):
        d = a[:n] - c[:n]
        t = stats.ttest_rel(a[:n], c[:n])
        lo, hi = t.confidence_interval(0.95)
        assert row[3].strip("*") == b.signed(d.mean())
        assert row[4].strip("*") == f"{b.num(lo)} to {b.signed(hi)}"
        assert row[5] == f"{t.pvalue:.2f}"
    deltas = b.quality_deltas("benchmarks/quality_unpad_20.json", "ours-bf16", "ours-bf16-padded", [(1, 20)])
    assert deltas.count(",") == 19 and b.signed(float(a[-1] - c[-1])) in deltas
    assert b.largest_seed_difference("benchmarks/quality_unpad_20.json", "ours-bf16", "ours-bf16-padded") == (
        f"±{np.abs(a - c).max():.2f}"
    )


def test_the_training_table_ratios_are_the_sentences_per_second_divided():
    tr = json.loads((ROOT / "benchmarks/train_results.json").read_text())["train"]
    rows = {r[0].strip("*"): r for r in _rows(b.train_table())}
    assert set(rows) == set(tr)
    for side, s in tr.items():
        who, prec = side.split("-")[:2]
        assert rows[side][1].strip("*") == f"{s['sentences_per_second']:.1f}"
        st = tr[f"st-{prec}"]["sentences_per_second"]
        if who == "ours":
            assert rows[side][2].split(" ")[0].strip("*") == f"{s['sentences_per_second'] / st:.2f}×"
        assert rows[side][3] == f"{s['sentences_per_second'] / tr['st-fp32']['sentences_per_second']:.2f}×"
    head = b.train_headline()
    assert (
        f"{tr['ours-bf16']['sentences_per_second'] / tr['ours-bf16-padded']['sentences_per_second']:.2f}× in bf16"
        in head
    )


def test_ci_reading_and_detects_follow_the_files(tmp_path):
    def write(name, lo, hi, sig):
        t = {
            "treatment": "x",
            "baseline": "y",
            "mean_diff": (lo + hi) / 2,
            "ci_low": lo,
            "ci_high": hi,
            "p_value": 0.01 if sig else 0.5,
            "n": 5,
            "alpha": 0.05,
            "significant": sig,
        }
        path = tmp_path / name
        path.write_text(json.dumps({"quality": {"test": t}}))
        return str(path)

    inside, outside = write("a.json", -0.1, 0.15, False), write("b.json", -0.05, 0.31, True)
    text = b.ci_reading([("A", inside, "test"), ("B", outside, "test")])
    assert (
        "wider than the ±0.2 asked with seeds B (+0.31)" in text and "within it with seeds A (+0.15)" in text
    )
    assert b.detects(outside).startswith("detects a difference") and b.detects(inside).startswith(
        "detects no"
    )


def test_padding_stats_count_by_hand():
    lengths = [3, 5, 2, 2]
    got = padding.padding_stats(lengths, [[0, 1], [2, 3]])
    # batch 1 pads to 5: 10 positions, 8 real; batch 2 pads to 2: 4 positions, 4 real
    assert (got["real_tokens"], got["padded_positions"]) == (12, 14)
    assert got["padding_share"] == pytest.approx(2 / 14) and got["max_speedup"] == pytest.approx(14 / 12)


def test_the_committed_padding_file_is_consistent():
    rec = json.loads((ROOT / "benchmarks/padding.json").read_text())
    for side in (
        rec["train"]["pipeline_sample"],
        rec["train"]["random_sample"],
        rec["eval"]["sorted"],
        rec["eval"]["unsorted"],
    ):
        assert side["padding_share"] == pytest.approx(1 - side["real_tokens"] / side["padded_positions"])
    assert rec["eval"]["sorted"]["real_tokens"] == rec["eval"]["unsorted"]["real_tokens"]
    assert rec["eval"]["unique_sentences"] <= rec["eval"]["sentences"]
    assert f"{100 * rec['train']['pipeline_sample']['padding_share']:.1f} %" in b.train_padding()


def test_performance_md_renders_its_tables():
    text = (ROOT / "docs/performance.md").read_text()
    for name in (
        "train_table",
        "train_history",
        "quality_table",
        "levers_table",
        "profile_pair_table",
        "profile_table",
        "full_preset_table",
        "train_padding",
        "eval_padding",
    ):
        assert f"b.{name}(" in text, name


def test_a_missing_file_or_key_names_it(tmp_path):
    with pytest.raises(FileNotFoundError, match="nope.json"):
        b.load("benchmarks/nope.json")
    with pytest.raises(KeyError, match="no 'train.ghost"):
        b.value("benchmarks/train_results.json", "train.ghost.sentences_per_second")
    with pytest.raises(KeyError, match="lever 'ghost'"):
        b.lever_ms("ghost")


def test_editing_a_benchmark_value_makes_performance_md_stale(tmp_path, monkeypatch):
    from test_docs_fresh import cog_check, copy_checkout

    root = copy_checkout(tmp_path)
    assert cog_check(root, monkeypatch)[0] == 0
    path = root / "benchmarks/train_results.json"
    doc = json.loads(path.read_text())
    doc["train"]["ours-bf16"]["sentences_per_second"] += 5.0
    path.write_text(json.dumps(doc))
    status, out = cog_check(root, monkeypatch)
    assert status != 0 and "docs/performance.md" in out, out


def test_the_best_of_sentence_transformers_is_recomputed_from_the_sentences_per_second():
    tr = json.loads((ROOT / "benchmarks/train_compiled_results.json").read_text())["train"]
    text = b.train_best("benchmarks/train_compiled_results.json", {"bf16": 1.5, "fp32": 1.4})
    for prec in ("bf16", "fp32"):
        rival = max((f"st-{prec}", f"st-{prec}-compiled"), key=lambda s: tr[s]["sentences_per_second"])
        want = tr[f"ours-{prec}"]["sentences_per_second"] / tr[rival]["sentences_per_second"]
        verdict = "at or above" if round(want, 2) >= {"bf16": 1.5, "fp32": 1.4}[prec] else "below"
        reps = [
            a / b
            for a, b in zip(
                tr[f"ours-{prec}"]["sentences_per_second_per_rep"],
                tr[rival]["sentences_per_second_per_rep"],
                strict=True,
            )
        ]
        each = ", ".join(f"{r:.2f}" for r in reps)
        assert f"**{want:.2f}×** in {prec}" in text
        assert f"of `{rival}`; the repetitions' ratios {each}; the median {verdict} the" in text


def test_the_roofline_share_is_flops_over_step_time_over_the_best_gemm():
    r = json.loads((ROOT / "benchmarks/roofline.json").read_text())
    tr = json.loads((ROOT / r["train_json"]).read_text())["train"]
    text = b.roofline_sentence()
    for side in ("ours-bf16", "ours-fp32"):
        prec = side.split("-")[1]
        tflops = r["step_flops"]["step"] / (tr[side]["median_step_ms"] / 1e3) / 1e12
        share = tflops / max(r["peak_tflops"][prec].values())
        assert (
            f"`{side}` {tr[side]['median_step_ms'] / 1e3:.3f} s a step, {tflops:.3f} TFLOP/s, {100 * share:.0f} %"
            in text
        )


def test_the_step_levers_table_pairs_each_lever_with_what_it_replaced():
    r = json.loads(Path("benchmarks/step_levers.json").read_text())
    rows = [line.split(" | ") for line in b.step_levers_table().splitlines()[2:] if line.startswith("| ")]
    names = list(r["ms"])
    assert len(rows) == len(names) // 2 == 4
    for row, before, after in zip(rows, names[::2], names[1::2], strict=True):
        assert "(before)" in before and "(before)" not in after
        assert row[1].startswith(f"{r['ms'][before]:.2f} (") and row[2].startswith(f"{r['ms'][after]:.2f} (")
        assert row[3].strip(" |") == f"{r['ms'][before] / r['ms'][after]:.2f}×"


def test_the_compiled_profile_sentence_is_the_two_files_medians():
    c = json.loads(Path("benchmarks/profile_step_bf16_compiled.json").read_text())
    e = json.loads(Path("benchmarks/profile_step_bf16_363e1df.json").read_text())
    text = b.profile_compiled(
        "benchmarks/profile_step_bf16_compiled.json", "benchmarks/profile_step_bf16_363e1df.json"
    )
    assert (
        f"{c['step_seconds_plain']:.3f} s a step compiled against {e['step_seconds_plain']:.3f} s eager"
        in text
    )
    assert f"{e['step_seconds_plain'] / c['step_seconds_plain']:.2f}× of eager's speed" in text
    assert f"first step {c['first_step_seconds']:.1f} s" in text


def test_side_moved_divides_the_two_files_rates():
    a = json.loads(Path("benchmarks/history/train_results_1e7807a.json").read_text())["train"]
    c = json.loads(Path("benchmarks/train_results.json").read_text())["train"]
    text = b.side_moved("benchmarks/history/train_results_1e7807a.json", "benchmarks/train_results.json")
    for side in ("st-bf16", "ours-bf16"):
        x, y = a[side]["sentences_per_second"], c[side]["sentences_per_second"]
        assert f"`{side}` {x:.1f} → {y:.1f} ({y / x:.2f}×)" in text


def test_the_readme_speed_line_is_the_best_of_sentence_transformers_ratio():
    tr = json.loads(Path("benchmarks/train_best_results.json").read_text())["train"]
    text = b.train_best_brief("benchmarks/train_best_results.json")
    for p in ("bf16", "fp32"):
        assert f"**{tr[f'ours-{p}'][f'speedup_vs_st_{p}_best']:.2f}×** in {p}" in text


def test_the_item_timing_sentence_reads_both_probe_files(tmp_path):
    def probe(name, commit, walls, rates=None):
        runs = [
            {"wall_s": w, **({"sentences_per_second": r, "step_seconds_median": 64 / r} if rates else {})}
            for w, r in zip(walls, rates or walls, strict=True)
        ]
        doc = {
            "item": "train@x",
            "command": "dvc repro --force -s train@x",
            "commit": commit,
            "cpu_model": "CPU",
            "runs": runs,
        }
        (tmp_path / name).write_text(json.dumps(doc))
        return str(tmp_path / name)

    text = b.item_timing(
        probe("a.json", "old", [98, 90]),
        probe("c.json", "new", [80, 84], [120.0, 126.0]),
        "benchmarks/train_best_results.json",
    )
    assert "took 90–98 s at `old` (2 runs) and 80–84 s at `new` (2 runs)" in text
    assert "120.0–126.0 sentences/s (median step 508–533 ms)" in text


def test_the_quality_baseline_check_compares_the_seeds_score(tmp_path):
    pair = tmp_path / "pair.json"
    pair.write_text(
        json.dumps({"seeds": [1, 2], "dev": {"treatment": [84.0, 84.1], "baseline": [84.25, 84.0]}})
    )
    check = tmp_path / "check.json"
    check.write_text(
        json.dumps({"note": "x, commit abc1234", "quality": {"seeds": [1], "dev": {"ours-bf16": [84.25]}}})
    )
    assert "the same score, float for float" in b.quality_before_check(pair, check)
    check.write_text(
        json.dumps({"note": "x, commit abc1234", "quality": {"seeds": [1], "dev": {"ours-bf16": [84.3]}}})
    )
    assert "84.3 against 84.25" in b.quality_before_check(pair, check)


def test_the_no_bf16_sentence_is_the_two_profiles_ratio_and_refuses_a_bf16_cpu(tmp_path):
    bf, fp = (ROOT / f"benchmarks/profile_step_{p}_avx2.json" for p in ("bf16", "fp32"))
    rb, rf = (json.loads(p.read_text()) for p in (bf, fp))
    text = b.no_bf16_sentence(bf, fp)
    assert (
        f"**{rb['step_seconds_plain']:.1f} s in bf16** against **{rf['step_seconds_plain']:.2f} s in fp32**"
        in text
    )
    assert f"{rb['step_seconds_plain'] / rf['step_seconds_plain']:.2f}× as long" in text
    amx = tmp_path / "amx.json"
    amx.write_text(json.dumps({**rb, "machine": {**rb["machine"], "cpu_bf16": ["amx_bf16"]}}))
    with pytest.raises(ValueError, match="has bf16 instructions"):
        b.no_bf16_sentence(amx, fp)


def test_the_bytes_floor_is_the_step_bytes_over_the_best_elementwise_rate():
    r = json.loads((ROOT / "benchmarks/roofline_avx2.json").read_text())
    a = r["achieved"]["ours-fp32"]
    floor = r["step_bytes"]["fp32"]["step"] / (max(r["elementwise_gbps"]["fp32"].values()) * 1e9)
    assert a["bytes_floor_seconds"] == pytest.approx(floor, abs=1e-4)
    text = b.roofline_sentence("benchmarks/roofline_avx2.json", sides=["ours-fp32"])
    assert f"at least {floor:.3f} s, {100 * floor / a['median_step_seconds']:.0f} % of its step" in text
    assert "ours-bf16" not in text
