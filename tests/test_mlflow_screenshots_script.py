"""The pure helpers of ``scripts/mlflow_screenshots.py`` (no server, no browser): the commands it runs,
the URLs it opens, which logged model it picks and how it tells a rendered page from a loading one."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from focalcse.testing.mlflow_server import free_port, server_command

REPO = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location(
    "mlflow_screenshots", REPO / "scripts" / "mlflow_screenshots.py"
)
shots = importlib.util.module_from_spec(_spec)
sys.modules["mlflow_screenshots"] = shots  # dataclasses look the module up by name
_spec.loader.exec_module(shots)

EXP, RUN, MODEL = "7", "3c0c629381f44f5f9a807ef22bfd45b2", "m-1d3d5f7b083a4bfb92ec38c29314a5e8"


def test_window_sizes_parse_and_bad_ones_are_refused() -> None:
    assert shots.parse_window("1600,1000") == (1600, 1000)
    assert shots.parse_window("800x600") == (800, 600)
    with pytest.raises(Exception, match="W,H"):
        shots.parse_window("big")


def test_server_binds_localhost_with_one_worker() -> None:
    cmd = server_command("mlflow", 5005, "sqlite:////s/mlflow.db", "/s/mlartifacts")
    assert cmd[:2] == ["mlflow", "server"]
    assert cmd[cmd.index("--host") + 1] == "127.0.0.1"
    assert cmd[cmd.index("--port") + 1] == "5005"
    assert cmd[cmd.index("--workers") + 1] == "1"
    assert cmd[cmd.index("--artifacts-destination") + 1] == "/s/mlartifacts"
    assert "--artifacts-destination" not in server_command("mlflow", 1, "sqlite:///x.db", None)


def test_chromium_takes_the_screenshot_and_the_dom_in_one_headless_load(tmp_path) -> None:
    cmd = shots.chromium_command(
        "chromium", "http://u/#/x", tmp_path / "a.png", (1600, 1000), 20000, tmp_path
    )
    assert cmd[0] == "chromium" and cmd[-1] == "http://u/#/x"
    for flag in ("--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", "--dump-dom"):
        assert flag in cmd
    assert "--window-size=1600,1000" in cmd and "--virtual-time-budget=20000" in cmd
    assert f"--screenshot={tmp_path / 'a.png'}" in cmd and f"--user-data-dir={tmp_path}" in cmd


def _model(model_id, run_id, ts, status="READY"):
    return SimpleNamespace(model_id=model_id, source_run_id=run_id, creation_timestamp=ts, status=status)


def test_the_newest_ready_model_of_the_experiments_runs_is_picked() -> None:
    models = [
        _model("m-old", "r1", 1),
        _model("m-new", "r2", 3),
        _model("m-pending", "r2", 9, status="PENDING"),
        _model("m-foreign", "elsewhere", 10),
        _model("m-no-run", None, 11),
    ]
    assert shots.pick_logged_model(models, {"r1", "r2"}).model_id == "m-new"
    assert shots.pick_logged_model(models, {"r1", "r2"}, run_id="r1").model_id == "m-old"
    assert shots.pick_logged_model(models, {"r3"}) is None
    assert shots.pick_logged_model([], {"r1"}) is None


def test_pages_open_the_model_training_side_of_the_ui() -> None:
    pages = shots.build_pages(
        "http://127.0.0.1:5", EXP, RUN, "seed1", MODEL, "sentence_transformer", (1600, 1000), (1600, 2600)
    )
    urls = {p.file: p.url for p in pages}
    assert urls == {
        "experiment-default.png": "http://127.0.0.1:5/#/experiments/7",
        "experiment-runs.png": "http://127.0.0.1:5/#/experiments/7?workflowType=machine_learning",
        "run-logged-models.png": f"http://127.0.0.1:5/#/experiments/7/runs/{RUN}?workflowType=machine_learning",
        "experiment-models.png": "http://127.0.0.1:5/#/experiments/7/models?workflowType=machine_learning",
        "logged-model.png": f"http://127.0.0.1:5/#/experiments/7/models/{MODEL}?workflowType=machine_learning",
    }
    assert {p.file: p.window for p in pages}["run-logged-models.png"] == (1600, 2600)


def _dom(title: str, body: str) -> str:
    return (
        f"<html><head><title>MLflow</title><title>{title}</title><script>var x = 'Logged models (9)';</script>"
        f"</head><body><div id='root'>{body}</div></body></html>"
    )


def test_a_rendered_run_page_passes_and_a_loading_one_does_not() -> None:
    pages = shots.build_pages("http://h", EXP, RUN, "seed1", MODEL, "sentence_transformer", (1, 1), (1, 1))
    run_page = next(p for p in pages if p.file == "run-logged-models.png")
    done = _dom(
        f"Run {RUN} - MLflow",
        "<h2>Logged models (1)</h2><table><tr><td><a>sentence_transformer</a></td></tr></table>",
    )
    assert shots.page_problems(run_page, done) == []
    none_yet = _dom(f"Run {RUN} - MLflow", "<h2>Logged models (0)</h2>")
    assert any("Logged models" in p for p in shots.page_problems(run_page, none_yet))
    loading = _dom("MLflow", "<div class='skeleton'>Loading...</div>")  # script text does not count
    problems = shots.page_problems(run_page, loading)
    assert len(problems) == 3 and any("<title>" in p for p in problems)


def test_runs_page_needs_the_runs_table() -> None:
    pages = shots.build_pages("http://h", EXP, RUN, "seed1", MODEL, "st", (1, 1), (1, 1))
    runs = next(p for p in pages if p.file == "experiment-runs.png")
    ok = _dom(f"Runs - Experiment {EXP} - MLflow", "<a>seed1</a> <span><b>12</b> matching runs</span>")
    assert shots.page_problems(runs, ok) == []
    overview = _dom(f"Overview - Experiment {EXP} - MLflow", "Traces 0 No data available")
    assert len(shots.page_problems(runs, overview)) == 3


def test_landing_tab_comes_from_the_page_title() -> None:
    assert shots.landing_tab(_dom(f"Overview - Experiment {EXP} - MLflow", ""), EXP) == "Overview"
    assert shots.landing_tab(_dom(f"Runs - Experiment {EXP} - MLflow", ""), EXP) == "Runs"
    assert shots.landing_tab(_dom("Experiment 70 - MLflow", ""), EXP) is None
    assert shots.landing_tab("", EXP) is None


def test_dom_text_drops_tags_scripts_and_entities() -> None:
    dom = "<p>a&amp;b</p><script>hidden()</script><style>.x{}</style>\n<span> c </span>"
    assert shots.dom_text(dom) == "a&b c"
    assert shots.dom_titles("<title>A &amp; B</title><title>\n C </title>") == ["A & B", "C"]


def test_blank_and_missing_images_are_caught(tmp_path) -> None:
    image = pytest.importorskip("PIL.Image")
    assert "not written" in shots.image_problem(tmp_path / "missing.png")
    blank = image.new("RGB", (200, 100), "white")
    blank.putpixel((5, 5), (0, 0, 0))  # a speck: a spinner on an empty page
    blank.save(tmp_path / "blank.png")
    assert "blank" in shots.image_problem(tmp_path / "blank.png")
    page = image.new("RGB", (200, 100), "white")
    for x in range(200):
        for y in range(0, 100, 4):  # table rows
            page.putpixel((x, y), (90, 90, 90))
    page.save(tmp_path / "page.png")
    assert shots.image_problem(tmp_path / "page.png") is None


def test_free_port_is_a_usable_port() -> None:
    assert 0 < free_port() < 65536
