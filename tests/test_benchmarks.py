"""The benchmarks' wiring (fast, no model): modules import, CLIs parse, presets and task list, the
results files' format, the worker subprocess plumbing. Nothing here times anything."""

from __future__ import annotations

import json
import shlex
import sys
import textwrap
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from focalcse.data.tasks import TASKS as REGISTRY

BENCH_DIR = Path(__file__).resolve().parents[1] / "benchmarks"
sys.path.insert(0, str(BENCH_DIR))  # the benchmarks import each other as top-level modules

import bench  # noqa: E402
import common  # noqa: E402
import eval_speed  # noqa: E402
import focal_overhead  # noqa: E402
import gpu_check  # noqa: E402
import quality  # noqa: E402
import train_speed  # noqa: E402

MEASUREMENT_MODULES = (train_speed, eval_speed, focal_overhead, quality)


def test_task_list_is_the_registry():
    assert tuple(REGISTRY) == common.TASKS
    assert common.PRESETS["full"]["eval_tasks"] == ",".join(REGISTRY)
    assert set(common.split_list(common.PRESETS["smoke"]["eval_tasks"])) <= set(REGISTRY)


def test_every_measurement_is_a_module_with_run_summary_and_section():
    assert {m.NAME for m in bench.MEASUREMENTS} == {"train", "eval", "loss", "quality"}
    assert set(bench.MEASUREMENTS) == set(bench.SECTIONS) == set(MEASUREMENT_MODULES)


def test_presets_share_keys_and_every_key_is_a_flag():
    smoke, full = common.PRESETS["smoke"], common.PRESETS["full"]
    assert smoke.keys() == full.keys()
    for name, preset in common.PRESETS.items():
        args = bench.parse_args(["--preset", name])
        assert {k: getattr(args, k) for k in preset} == preset
    args = bench.parse_args(["--preset", "full", "--train-steps", "1", "--eval-tasks", "STS12"])
    assert (args.train_steps, args.eval_tasks, args.loss_steps) == (1, "STS12", full["loss_steps"])
    assert set(common.split_list(full["train_sides"])) == set(common.TRAIN_SIDES)


def test_help_documents_every_preset_key(capsys):
    with pytest.raises(SystemExit) as exit_:
        bench.parse_args(["--help"])
    assert exit_.value.code == 0
    out = capsys.readouterr().out
    missing = [k for k in common.PRESETS["full"] if f"--{k.replace('_', '-')}" not in out]
    assert not missing, f"bench.py --help does not list {missing}"


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--only", "train,speed"], "--only"),
        (["--eval-tasks", "STS12,STS99"], "--eval-tasks"),
        (["--train-sides", "ours-fp16"], "--train-sides"),
        (["--only", "quality", "--quality-sides", "ours-bf16,st-fp32,st-bf16"], "--quality-sides"),
    ],
)
def test_bad_flags_stop_before_any_work(argv, message):
    with pytest.raises(SystemExit, match=message):
        bench.main(argv)


@pytest.mark.parametrize(
    ("raw", "md"),
    [
        ("results.json", "RESULTS.md"),
        ("quality.json", "QUALITY.md"),
        ("train_results.json", "TRAIN.md"),  # like for like, with the padded forward beside it
        ("train_compiled_results.json", "TRAIN_COMPILED.md"),  # against ST eager and compiled
        ("quality_unpad.json", "QUALITY_UNPAD.md"),  # unpadded vs padded, seeds 1-5
        ("quality_unpad_6-10.json", "QUALITY_UNPAD_6-10.md"),
        ("quality_unpad_11-20.json", "QUALITY_UNPAD_11-20.md"),
    ],
)
def test_markdown_reproduces_the_committed_results(raw, md):
    report = json.loads((BENCH_DIR / raw).read_text())
    assert bench.markdown(report) + "\n" == (BENCH_DIR / md).read_text()


def test_summaries_reproduce_the_committed_numbers():
    report = json.loads((BENCH_DIR / "results.json").read_text())

    def same(a, b):  # NaN-aware
        return json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True)

    assert same(train_speed.summarise(report["train_raw"], report["config"]["batch_size"]), report["train"])
    assert same(eval_speed.summarise(report["eval_raw"]), report["eval"])
    assert same(focal_overhead.summarise(report["loss_raw"]), report["loss"])
    for name in ("train_results.json", "train_compiled_results.json"):
        like = json.loads((BENCH_DIR / name).read_text())
        assert same(train_speed.summarise(like["train_raw"], like["config"]["batch_size"]), like["train"])


def test_combined_unpad_quality_is_the_three_runs_and_scipys_paired_t():
    """quality_unpad_20.json: seeds 1-20 of the three committed runs, tested with scipy directly."""
    from scipy import stats

    combined = json.loads((BENCH_DIR / "quality_unpad_20.json").read_text())
    runs = [json.loads((BENCH_DIR / f).read_text())["quality"] for f in combined["sources"]]
    assert combined["seeds"] == list(range(1, 21)) == [s for r in runs for s in r["seeds"]]
    for side in ("ours-bf16", "ours-bf16-padded"):
        assert combined["dev"][side] == [x for r in runs for x in r["dev"][side]]
    for key, n in (("test_seeds_1_10", 10), ("test", 20)):
        a, b = combined["dev"]["ours-bf16"][:n], combined["dev"]["ours-bf16-padded"][:n]
        t = stats.ttest_rel(a, b)
        ci = t.confidence_interval(0.95)
        got = combined[key]
        assert got["n"] == n and got["p_value"] == pytest.approx(t.pvalue, rel=1e-9)
        assert (got["ci_low"], got["ci_high"]) == pytest.approx((ci.low, ci.high), rel=1e-9)


def test_step_intervals_drop_warmup():
    assert common.step_intervals([1.0, 3.0, 6.0, 10.0], warmup=2) == [3.0, 4.0]
    assert common.step_intervals([1.0, 3.0], warmup=0) == [2.0]


def _bench(tmp_path: Path, **args) -> common.Bench:
    ns = SimpleNamespace(batch_size=4, st_max_grad_norm=0.0, train_warmup=1, **args)
    return common.Bench(ns, {"train"}, tmp_path, tmp_path / "corpus.txt", {"seed": 42, "batch_size": 4})


def test_training_and_quality_runs_wire_specs_to_the_workers(tmp_path, monkeypatch):
    calls = []

    def fake_worker(worker, spec, work, label):
        calls.append((worker.__name__, spec, label))
        return {
            "step_seconds": [0.5],
            "step_cpu_seconds": [1.0],
            "sentences_per_second_total": 8.0,
            "peak_rss_mb": 100.0,
            "rss_before_train_mb": 50.0,
            "tokenise_seconds": 0.0,
            "stsb_dev_after": 70.0 + spec["seed"] * (1.5 if spec["precision"] == "bf16" else 1.0),
        }

    monkeypatch.setattr(train_speed, "run_worker", fake_worker)
    monkeypatch.setattr(quality, "sample_corpus", lambda corpus, n, seed, dest: dest)
    out = train_speed.run(_bench(tmp_path, train_reps=2, train_steps=3), ["ours-bf16", "st-fp32"])
    assert [c[2] for c in calls] == [
        "train-ours-bf16-0",
        "train-st-fp32-0",
        "train-st-fp32-1",
        "train-ours-bf16-1",
    ]
    assert {c[0] for c in calls} == {"worker_train_ours", "worker_train_st"}
    assert [c[1]["dev"] for c in calls] == [True, True, False, False]
    assert out["train"]["ours-bf16"]["speedup_vs_st_fp32"] == 1.0

    calls.clear()
    qb = _bench(tmp_path, quality_seeds="1,2,3", quality_steps=2)
    out = quality.run(qb, ["ours-bf16", "st-fp32"])["quality"]
    assert [c[1]["seed"] for c in calls] == [1, 1, 2, 2, 3, 3]
    assert out["dev"] == {"ours-bf16": [71.5, 73.0, 74.5], "st-fp32": [71.0, 72.0, 73.0]}
    assert out["test"]["mean_diff"] == pytest.approx(1.0)


def test_worker_subprocess_round_trip(tmp_path, monkeypatch):
    (tmp_path / "fake_bench_worker.py").write_text(
        textwrap.dedent(
            """
            def double(spec):
                return {"twice": 2 * spec["x"]}

            def broken(spec):
                raise ValueError("no good " + spec["why"])
            """
        )
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    import fake_bench_worker

    out = common.run_worker(fake_bench_worker.double, {"x": 21}, tmp_path, "ok")
    assert out["twice"] == 42 and out["process_seconds"] > 0
    with pytest.raises(RuntimeError, match="no good at all"):
        common.run_worker(fake_bench_worker.broken, {"why": "at all"}, tmp_path, "bad")


def test_gpu_check_defaults_are_the_paper_recipe():
    args = gpu_check.parse_args([])
    assert (args.batch_size, args.max_len, args.temperature, args.m, args.lr) == (64, 32, 0.05, 0.3, 3e-5)
    with pytest.raises(SystemExit):
        gpu_check.parse_args(["--loss", "hcl"])
    assert (args.unpad, args.lengths, args.verify_unpad) == (True, "ragged", True)  # as the trainer trains
    assert gpu_check.parse_args(["--no-unpad"]).unpad is False


def test_gpu_unpad_sh_passes_gpu_check_flags_it_accepts():
    """``gpu_unpad.sh`` runs on a GPU machine only: its ``gpu_check.py`` calls must at least parse."""
    script = (BENCH_DIR / "gpu_unpad.sh").read_text().replace("\\\n", " ")
    calls = [
        line.split("benchmarks/gpu_check.py", 1)[1] for line in script.splitlines() if "gpu_check.py " in line
    ]
    assert len(calls) == 1 and "for forward in no-unpad unpad" in script
    for forward in ("no-unpad", "unpad"):
        argv = shlex.split(calls[0].replace("$forward", forward).replace("$OUT", "out"))
        args = gpu_check.parse_args(argv)
        assert (args.unpad, args.steps, args.lengths) == (forward == "unpad", 300, "ragged")
        assert args.json == f"out/{forward}.json"


def test_gpu_check_ragged_lengths_look_like_the_corpus():
    """43 % of rows full, the rest in [8, 31] tokens at length 32: about a fifth padding."""
    mask = gpu_check.ragged_mask(20000, 32, torch.Generator().manual_seed(0))
    lengths = mask.sum(1)
    assert abs((lengths == 32).float().mean().item() - 0.43) < 0.02
    assert lengths.min() >= 8 and lengths.max() == 32
    assert torch.all(mask[:, :-1] >= mask[:, 1:])  # right-padded
    assert 0.17 < 1 - mask.float().mean().item() < 0.25


def test_gpu_check_runs_a_tiny_ragged_unpadded_training_on_cpu(tmp_path):
    out = tmp_path / "r.json"
    args = [
        "--device",
        "cpu",
        "--steps",
        "3",
        "--warmup",
        "0",
        "--hidden",
        "32",
        "--layers",
        "1",
        "--heads",
        "2",
    ]
    assert gpu_check.main([*args, "--batch-size", "8", "--json", str(out)]) == 0
    result = json.loads(out.read_text())
    assert result["unpad"] is True and result["lengths"] == "ragged"
    assert result["unpad_max_rel_diff"] <= 1e-5


def test_like_for_like_is_against_sentence_transformers_at_its_best():
    """With compiled sides, ours is compared with the faster of ST eager and ST compiled at the same
    precision; the start-up excess is the run less its steps at the median step time, and a 128-step
    item adds that to 128 median steps (numbers written out by hand)."""

    def rep(step, steps_run=10, train=None):
        return {
            "step_seconds": [step] * 7,
            "step_cpu_seconds": [step] * 7,
            "train_seconds": train if train is not None else steps_run * step,
            "steps_run": steps_run,
            "sentences_per_second_total": 1.0,
            "peak_rss_mb": 100.0,
            "rss_before_train_mb": 50.0,
            "tokenise_seconds": 0.0,
        }

    runs = {
        "st-bf16": [rep(1.0)],
        "st-bf16-compiled": [rep(0.8, train=10 * 0.8 + 30.0)],  # 30 s of compilation
        "ours-bf16": [rep(0.5, train=5.5)],
        "st-fp32": [rep(2.0)],
        "ours-fp32": [rep(1.0)],
    }
    out = train_speed.summarise(runs, batch_size=64)
    bf16, fp32 = out["ours-bf16"], out["ours-fp32"]
    assert bf16["speedup_vs_st_bf16"] == pytest.approx(2.0)  # against eager, as before
    assert bf16["speedup_vs_st_bf16_best"] == pytest.approx(0.8 / 0.5)
    assert bf16["st_bf16_best_side"] == "st-bf16-compiled"
    assert "speedup_vs_st_fp32_best" not in fp32  # no compiled fp32 side: no best-of figure
    assert out["st-bf16-compiled"]["startup_excess_seconds"] == pytest.approx(30.0)
    assert out["st-bf16-compiled"]["item_seconds"] == pytest.approx(30.0 + 128 * 0.8)
    assert bf16["startup_excess_seconds"] == pytest.approx(0.5)
    md = "\n".join(train_speed.markdown(out, {"config": {"batch_size": 64, "max_len": 32, "temperature": 0.05, "lr": 3e-5, "train_steps": 10, "train_reps": 1, "train_warmup": 3}}))  # fmt: skip
    assert "ours-bf16 1.60x" in md and "(against st-bf16-compiled)" in md
    assert "st-bf16-compiled 30.0 s, item 132 s" in md


def test_gpu_check_dropout_verification_passes_on_the_cpu():
    """gpu_check's device check of the unpadded dropout, run on the CPU: the keep rate within 5 sigma of
    0.9 and the written-out attention with dropout equal to the formula."""
    checks = gpu_check.verify_dropout(torch.device("cpu"))
    assert abs(checks["dropout_keep_rate_sigmas"]) < 5
    assert checks["attention_dropout_max_rel_diff"] < 1e-5


def test_quality_pair_is_scipys_paired_t_over_the_common_seeds(tmp_path):
    import quality_pair
    from scipy import stats

    def run(name, seeds, side, values):
        path = tmp_path / name
        path.write_text(json.dumps({"quality": {"seeds": seeds, "dev": {side: values}}}))
        return f"{path}:{side}"

    after = run("after.json", [1, 2, 3, 4], "ours-bf16", [84.1, 84.3, 83.9, 84.0])
    before_a = run("a.json", [1, 2], "ours-bf16", [84.0, 84.0])
    before_b = run("b.json", [3, 5], "ours-bf16", [84.1, 90.0])  # seed 5: no pair; seed 4: none either
    report = quality_pair.pair([after], [before_a, before_b], "x")
    assert report["seeds"] == [1, 2, 3]
    ref = stats.ttest_rel([84.1, 84.3, 83.9], [84.0, 84.0, 84.1])
    assert report["test"]["p_value"] == pytest.approx(ref.pvalue, rel=1e-12)
    assert report["test"]["mean_diff"] == pytest.approx(0.2 / 3, rel=1e-9)
    ci = ref.confidence_interval(0.95)
    assert (report["test"]["ci_low"], report["test"]["ci_high"]) == pytest.approx((ci.low, ci.high), rel=1e-9)
    with pytest.raises(SystemExit, match="seed 1 is already given"):
        quality_pair.pair([after], [before_a, before_a], "x")
    with pytest.raises(SystemExit, match="has no side"):
        quality_pair.pair([after.replace("ours-bf16", "st-fp32")], [before_a], "x")


def test_a_one_side_quality_run_has_no_test():
    import quality

    out = quality.summarise({"ours-bf16": [84.0, 84.2]}, [1, 2], 64)
    assert "test" not in out and out["summary"]["ours-bf16"]["n"] == 2


def test_step_levers_times_each_lever_against_what_it_replaced(tmp_path):
    import step_levers

    out = tmp_path / "levers.json"
    assert step_levers.main(["--reps", "1", "--out-json", str(out)]) == 0
    report = json.loads(out.read_text())
    assert report["mmap_threshold_set"] > 0  # glibc here
    names = list(report["ms"])
    assert len(names) == 8 and all(v > 0 for v in report["ms"].values())
    assert sum("(before)" in n for n in names) == 4  # each lever beside what it replaced


def test_the_previous_attention_reproduced_in_step_levers_is_the_formula():
    """step_levers.previous_attend is the pre-363e1df attention: with the same draw as its dropout,
    the hand formula."""
    import step_levers

    gen = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(2, 3, 6, 4, generator=gen) for _ in range(3))
    mask = torch.ones(2, 1, 1, 6, dtype=torch.bool)
    mask[0, ..., 4:] = False
    torch.manual_seed(3)
    got = step_levers.previous_attend(q, k, v, mask)
    torch.manual_seed(3)
    probs = ((q @ k.transpose(-1, -2)) / 2).masked_fill(~mask, float("-inf")).softmax(-1)
    keep = torch.rand(probs.shape) >= step_levers.P
    torch.testing.assert_close(got, torch.where(keep, probs / 0.9, 0.0) @ v, rtol=1e-5, atol=1e-6)
