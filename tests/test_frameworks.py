"""The framework axis: params, paths and names, the DiffCSE training step in the loop (λ = 0 is
SimCSE's loss, resume after a kill, the DDP / GradCache refusals)."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
import yaml

from focalcse.config import ConfigError, TrainConfig, load_params
from focalcse.layout import Layout, run_name, stage_name
from focalcse.paramsets import load_any
from focalcse.testing.project import REPO, save_tiny_backbone


def _params(tmp_path: Path, **sections) -> Path:
    raw = yaml.safe_load((REPO / "params.yaml").read_text())
    for key, value in sections.items():
        raw[key] = {**raw.get(key, {}), **value} if isinstance(value, dict) else value
    path = tmp_path / "params.yaml"
    path.write_text(yaml.safe_dump(raw, sort_keys=False))
    return path


# ---------------------------------------------------------------- params, paths, names
def test_every_framework_names_its_paths_and_stages() -> None:
    """SimCSE is a framework like the others: its items' paths, names and stages carry its name."""
    lay = Layout()
    assert lay.model_dir("b", "infonce", 1, "simcse") == Path("models/simcse/b/infonce/seed1")
    assert lay.model_dir("b", "infonce", 1, "diffcse") == Path("models/diffcse/b/infonce/seed1")
    assert lay.eval_metrics("b", "infonce", 1, "promptbert") == Path(
        "metrics/eval/promptbert-b-infonce-seed1.json"
    )
    assert lay.train_metrics("b", "infonce", 1, "simcse") == Path("metrics/train/simcse-b-infonce-seed1.json")
    assert run_name("b", "infonce", 1, "simcse") == "simcse-b-infonce-seed1"
    assert run_name("b", "infonce", 1, "diffcse") == "diffcse-b-infonce-seed1"
    assert stage_name("train", "b", "infonce", 1, "simcse") == "train@simcse-b-infonce-1"
    assert stage_name("evaluate", "b", "l", 2, "diffcse") == "evaluate@diffcse-b-l-2"
    with pytest.raises(TypeError):  # no default framework in a path: every caller names it
        lay.model_dir("b", "infonce", 1)  # type: ignore[call-arg]
    with pytest.raises(TypeError):
        run_name("b", "infonce", 1)  # type: ignore[call-arg]


def test_frameworks_set_keeps_the_default_simcse_items() -> None:
    """params/frameworks.yaml trains SimCSE, its reference, with exactly the default's settings (DVC
    restores them), and the two other frameworks besides it."""
    default, fw = load_params(REPO / "params.yaml"), load_any(REPO / "params" / "frameworks.yaml")
    assert default.sweep.frameworks == ("simcse",) and default.sweep.reference == "simcse"
    assert default.sweep.others == ()
    assert fw.sweep.frameworks == ("simcse", "promptbert", "diffcse")
    assert fw.sweep.reference == "simcse" and fw.sweep.others == ("promptbert", "diffcse")
    assert (fw.sweep.backbones, fw.sweep.losses, fw.sweep.seeds) == (
        default.sweep.backbones,
        default.sweep.losses,
        default.sweep.seeds,
    )
    for section in ("train", "backbone_overrides", "loss_overrides"):
        assert fw.raw[section] == default.raw[section], section
    assert fw.raw["frameworks"]["simcse"] == default.raw["frameworks"]["simcse"]
    assert fw.raw["eval"]["batch_size"] == default.raw["eval"]["batch_size"]
    for loss in fw.sweep.losses:
        assert fw.train_config("all-MiniLM-L6-v2", loss, 1, "simcse") == default.train_config(
            "all-MiniLM-L6-v2", loss, 1, "simcse"
        )
        assert fw.train_config("all-MiniLM-L6-v2", loss, 1) == default.train_config(
            "all-MiniLM-L6-v2", loss, 1
        )  # no framework: each set's reference, SimCSE in both


def test_sweep_frameworks_validated(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"sweep.frameworks = \[\]: expected one or more unique names"):
        load_params(_params(tmp_path, sweep={"frameworks": []}))
    with pytest.raises(ConfigError, match=r"sweep.frameworks = \['bogus'\]"):
        load_params(_params(tmp_path, sweep={"frameworks": ["bogus"]}))
    with pytest.raises(ConfigError, match=r"sweep.frameworks = \['simcse', 'diffcse', 'simcse'\]"):
        load_params(_params(tmp_path, sweep={"frameworks": ["simcse", "diffcse", "simcse"]}))
    # any registered framework may be a set's only one, and so its reference
    alone = load_params(_params(tmp_path, sweep={"frameworks": ["diffcse"]}))
    assert alone.sweep.frameworks == ("diffcse",) and alone.sweep.reference == "diffcse"
    assert alone.sweep.backbones_of("diffcse") == alone.sweep.backbones  # every sweep backbone
    # the per-framework backbone list is gone: every framework trains every sweep backbone
    with pytest.raises(ConfigError, match=r"sweep: unknown key\(s\) \['framework_backbones'\]"):
        load_params(
            _params(
                tmp_path,
                sweep={"frameworks": ["simcse", "diffcse"], "framework_backbones": ["all-MiniLM-L6-v2"]},
            )
        )
    with pytest.raises(ConfigError, match=r"frameworks.diffcse.lambda_weight = -1"):
        load_params(_params(tmp_path, frameworks={"diffcse": {"lambda_weight": -1}}))
    # SimCSE's section holds only the train-key layers every framework has
    with pytest.raises(ConfigError, match=r"frameworks.simcse: unknown key\(s\) \['templates'\]"):
        load_params(_params(tmp_path, frameworks={"simcse": {"templates": "bert"}}))
    with pytest.raises(ConfigError, match=r"frameworks: unknown key\(s\) \['bogus'\]"):
        load_params(_params(tmp_path, frameworks={"bogus": {}}))


def test_framework_train_keys_layer_over_the_item(tmp_path: Path) -> None:
    fw = {
        "diffcse": {"train": {"lr": 7.0e-6}, "backbones": {"all-MiniLM-L6-v2": {"epochs": 2}}},
        "promptbert": {"templates": "bert"},
    }
    p = load_params(_params(tmp_path, frameworks=fw, sweep={"frameworks": ["simcse", "diffcse"]}))
    simcse, diff = (
        p.train_config("all-MiniLM-L6-v2", "infonce", 1, "simcse"),
        p.train_config("all-MiniLM-L6-v2", "infonce", 1, "diffcse"),
    )
    assert (simcse.lr, simcse.epochs) == (3.0e-5, 1)
    assert (diff.lr, diff.epochs) == (7.0e-6, 2)
    assert p.train_config("all-MiniLM-L6-v2", "infonce", 1) == simcse  # no framework: the reference
    eff = p.effective_config("all-MiniLM-L6-v2", "infonce", 1, "diffcse")
    assert eff["framework"]["name"] == "diffcse" and eff["framework"]["lambda_weight"] == 0.005
    # SimCSE has no setting of its own besides its layers: its record is the train config alone
    assert p.framework_record("simcse") is None and p.framework_record("diffcse") == eff["framework"]
    assert "framework" not in p.effective_config("all-MiniLM-L6-v2", "infonce", 1, "simcse")
    assert "framework" not in p.effective_config("all-MiniLM-L6-v2", "infonce", 1)

    # SimCSE's own layers apply to its items only; the reference is the first of sweep.frameworks
    fw["simcse"] = {"train": {"lr": 5.0e-5}, "backbones": {"all-MiniLM-L6-v2": {"epochs": 3}}}
    fw["diffcse"] = {"backbones": {"all-MiniLM-L6-v2": {"epochs": 2}}}
    p = load_params(_params(tmp_path, frameworks=fw, sweep={"frameworks": ["diffcse", "simcse"]}))
    simcse, diff = (
        p.train_config("all-MiniLM-L6-v2", "infonce", 1, "simcse"),
        p.train_config("all-MiniLM-L6-v2", "infonce", 1, "diffcse"),
    )
    assert (simcse.lr, simcse.epochs) == (5.0e-5, 3)
    assert (diff.lr, diff.epochs) == (3.0e-5, 2)  # not SimCSE's layer: the train section's lr
    assert p.sweep.reference == "diffcse" and p.train_config("all-MiniLM-L6-v2", "infonce", 1) == diff
    assert p.effective_config("all-MiniLM-L6-v2", "infonce", 1)["framework"]["name"] == "diffcse"
    assert p.config_layers("all-MiniLM-L6-v2", "infonce", "simcse")[-2:] == [
        ("frameworks.simcse.train", {"lr": 5.0e-5}),
        ("frameworks.simcse.backbones.all-MiniLM-L6-v2", {"epochs": 3}),
    ]
    for name in ("diffcse", "simcse"):
        with pytest.raises(ConfigError, match=f"frameworks.{name}.train"):
            load_params(
                _params(
                    tmp_path,
                    frameworks={name: {"train": {"lr": -1}}},
                    sweep={"frameworks": ["simcse", "diffcse"]},
                )
            )


def test_config_cli_shows_a_framework(tmp_path: Path) -> None:
    cmd = [
        sys.executable,
        "-m",
        "focalcse.cli",
        "config",
        "--params",
        str(REPO / "params" / "frameworks.yaml"),
    ]
    out = subprocess.run(
        [*cmd, "--backbone", "all-MiniLM-L6-v2", "--loss", "focal_infonce", "--framework", "promptbert"],
        capture_output=True,
        text=True,
        check=True,
    )
    import json

    shown = json.loads(out.stdout)
    assert shown["framework"] == {
        "name": "promptbert",
        "templates": "auto",
        "denoise": True,
        "eval_denoise": False,
    }
    assert shown["loss"] == "focal_infonce" and shown["m"] == 0.3
    # no --framework: the set's reference, SimCSE, whose config records no framework of its own
    ref = subprocess.run(
        [*cmd, "--backbone", "all-MiniLM-L6-v2", "--loss", "focal_infonce"],
        capture_output=True,
        text=True,
        check=True,
    )
    shown_ref = json.loads(ref.stdout)
    assert "framework" not in shown_ref and shown_ref["loss"] == "focal_infonce"
    assert shown_ref["pooler"] != shown["pooler"]  # PromptBERT names its own sentence vector
    bad = subprocess.run(
        [*cmd, "--backbone", "all-MiniLM-L6-v2", "--loss", "infonce", "--framework", "x"],
        capture_output=True,
        text=True,
    )
    assert (
        bad.returncode != 0 and "--framework 'x': expected one of simcse, diffcse, promptbert" in bad.stderr
    )


# ---------------------------------------------------------------- DiffCSE in the loop
def _diffcse_parts(minilm_tokenizer, lam: float, batchnorm: bool = False):
    from transformers import BertConfig, BertForMaskedLM

    from focalcse.core.frameworks.diffcse import DiffCSEStep
    from focalcse.core.model import SentenceEncoder, tiny_config

    torch.manual_seed(0)
    cfg = tiny_config(minilm_tokenizer.vocab_size)
    enc = SentenceEncoder.from_config(
        cfg, minilm_tokenizer, pooler="cls", mlp_only_train=True, max_seq_len=16
    )
    gen = BertForMaskedLM(
        BertConfig(
            vocab_size=len(minilm_tokenizer),
            hidden_size=16,
            num_hidden_layers=1,
            num_attention_heads=2,
            intermediate_size=32,
        )
    )
    from transformers import AutoModel

    disc = AutoModel.from_config(cfg)
    return enc, DiffCSEStep(gen, disc, minilm_tokenizer, 0.3, lam, batchnorm)


SENTENCES = [
    f"sentence number {i} about {w}"
    for i, w in enumerate(["cats", "dogs", "rain", "snow", "trains", "boats"])
]


def test_diffcse_lambda_zero_is_simcse_loss(minilm_tokenizer) -> None:
    """λ = 0, same batch, same seed: the DiffCSE step's loss is SimCSE's contrastive loss (same
    encoder forward and dropout masks: the RTD branch draws its masks after the encoder forward)."""
    from focalcse.core.encode import pad_batch
    from focalcse.core.gradcache import two_view_loss
    from focalcse.core.losses import build_loss

    enc, step = _diffcse_parts(minilm_tokenizer, lam=0.0)
    step.attach(enc)
    enc.train()
    rows = minilm_tokenizer(SENTENCES, truncation=True, max_length=16)["input_ids"]
    loss_fn = build_loss("focal_infonce", 0.05, m=0.3)
    torch.manual_seed(7)
    total, parts = step.loss(enc, loss_fn, rows, torch.device("cpu"))
    ids, mask = pad_batch(rows, minilm_tokenizer.pad_token_id)
    torch.manual_seed(7)
    simcse = two_view_loss(enc, loss_fn, torch.cat([ids, ids]), torch.cat([mask, mask]), 0)
    assert torch.equal(total, simcse)
    assert parts["rtd_loss"] > 0  # the RTD branch ran; λ = 0 only weights it out
    enc2, step2 = _diffcse_parts(minilm_tokenizer, lam=0.5)
    step2.attach(enc2)
    enc2.train()
    torch.manual_seed(7)
    total2, parts2 = step2.loss(enc2, loss_fn, rows, torch.device("cpu"))
    assert torch.allclose(
        total2, torch.tensor(parts2["contrastive_loss"] + 0.5 * parts2["rtd_loss"]), atol=1e-5
    )


def test_diffcse_trains_discriminator_and_encoder_and_refuses_ddp_gradcache(
    minilm_tokenizer, tmp_path
) -> None:
    from focalcse.core.distributed import DistributedContext
    from focalcse.core.training import train

    enc, step = _diffcse_parts(minilm_tokenizer, lam=1.0, batchnorm=True)
    disc_before = {k: v.clone() for k, v in step.discriminator.state_dict().items()}
    gen_before = {k: v.clone() for k, v in step.generator.state_dict().items()}
    corpus = minilm_tokenizer(SENTENCES * 4, truncation=True, max_length=16)["input_ids"]
    cfg = TrainConfig(
        loss="infonce", batch_size=8, lr=1e-3, max_steps=3, eval_steps=10, seed=3, eval_at_start=False
    )
    result = train(enc, corpus, cfg, tmp_path / "out", progress=False, framework=step)
    assert {"rtd_loss", "contrastive_loss"} <= set(result.history[0])
    assert any(not torch.equal(v, step.discriminator.state_dict()[k]) for k, v in disc_before.items())
    assert all(torch.equal(v, step.generator.state_dict()[k]) for k, v in gen_before.items())  # frozen
    saved = sorted(p.name for p in (tmp_path / "out").iterdir())
    assert "model.safetensors" in saved and "focalcse.json" in saved  # the sentence encoder only
    from safetensors import safe_open

    with safe_open(str(tmp_path / "out" / "model.safetensors"), "pt") as f:
        names = list(f.keys())  # noqa: SIM118 - safe_open is not a dict
        assert names and not any("diffcse" in k or "discriminator" in k for k in names)

    class TwoRanks(DistributedContext):
        @property
        def distributed(self) -> bool:  # type: ignore[override]
            return True

    enc, step = _diffcse_parts(minilm_tokenizer, lam=1.0)
    with pytest.raises(ValueError, match="one process only: torchrun/DDP is not supported"):
        train(enc, corpus, cfg, tmp_path / "o2", progress=False, framework=step, parallel=TwoRanks())
    gc = TrainConfig(loss="infonce", batch_size=8, max_steps=2, grad_cache_chunk=4, seed=3)
    with pytest.raises(ValueError, match="does not support GradCache: set train.grad_cache_chunk: 0"):
        train(enc, corpus, gc, tmp_path / "o3", progress=False, framework=step)

    # PromptBERT: the same refusals, before any work
    from transformers import AutoModel

    from focalcse.core.frameworks.promptbert import PromptBERTStep, PromptEncoder
    from focalcse.core.model import tiny_config

    pe = PromptEncoder(
        AutoModel.from_config(tiny_config(minilm_tokenizer.vocab_size)), minilm_tokenizer, max_seq_len=16
    )
    with pytest.raises(ValueError, match="'promptbert' trains in one process only"):
        train(
            pe,
            corpus,
            cfg,
            tmp_path / "o4",
            progress=False,
            framework=PromptBERTStep(pe),
            parallel=TwoRanks(),
        )
    with pytest.raises(ValueError, match="'promptbert' does not support GradCache"):
        train(pe, corpus, gc, tmp_path / "o5", progress=False, framework=PromptBERTStep(pe))
    assert not any((tmp_path / d).exists() for d in ("o2", "o3", "o4", "o5"))


RESUME = textwrap.dedent(
    """
    import json, sys
    import torch
    torch.set_num_threads(1)
    from transformers import AutoTokenizer
    from focalcse.config import TrainConfig
    from focalcse.core.frameworks.settings.diffcse import DiffCSEConfig
    from focalcse.core.frameworks.settings.promptbert import PromptBERTConfig
    from focalcse.core.training import train
    import importlib

    framework, backbone, generator, corpus_file, out, result_file = sys.argv[1:7]
    cfg = TrainConfig(loss="focal_infonce", batch_size=8, lr=1e-3, max_steps=8, eval_steps=100, checkpoint_steps=2,
                      seed=5, eval_at_start=False, max_seq_len=16)
    settings = DiffCSEConfig(generator=generator, batchnorm=True) if framework == "diffcse" else PromptBERTConfig()
    module = importlib.import_module(f"focalcse.core.frameworks.{framework}")
    enc, step, budget = module.training_setup(backbone, cfg, settings, "unused")
    corpus = [enc.tokenizer(l, truncation=True, max_length=budget)["input_ids"] for l in open(corpus_file).read().splitlines()]

    def log(metrics, step_no):
        print(f"STEP {step_no}", flush=True)

    r = train(enc, corpus, cfg, out, log_metrics=log, progress=False, framework=step)
    json.dump({k: v for k, v in r.to_dict().items() if k in ("history", "best_step", "steps")}, open(result_file, "w"), sort_keys=True)
    """
)


@pytest.fixture(scope="module")
def resume_setup(tmp_path_factory, minilm_tokenizer):
    from transformers import BertConfig, BertForMaskedLM

    root = tmp_path_factory.mktemp("fw_resume")
    backbone = save_tiny_backbone(root / "tiny", seed=2)
    torch.manual_seed(0)
    gen = BertForMaskedLM(
        BertConfig(
            vocab_size=len(minilm_tokenizer),
            hidden_size=16,
            num_hidden_layers=1,
            num_attention_heads=2,
            intermediate_size=32,
        )
    )
    gen.save_pretrained(root / "gen")
    minilm_tokenizer.save_pretrained(root / "gen")
    corpus = root / "corpus.txt"
    corpus.write_text(
        "\n".join(f"line {i} of the small corpus with words {i % 7} and {i % 5}" for i in range(64)) + "\n"
    )
    script = root / "run.py"
    script.write_text(RESUME)
    return root, backbone, root / "gen", corpus, script


@pytest.mark.parametrize("framework", ["diffcse", "promptbert"])
@pytest.mark.slow
def test_framework_resume_after_kill_equals_uninterrupted(resume_setup, framework, tmp_path) -> None:
    import json
    import os
    import signal

    root, backbone, gen, corpus, script = resume_setup
    env = {**os.environ, "OMP_NUM_THREADS": "1"}

    def cmd(out: Path, res: Path) -> list[str]:
        return [
            sys.executable,
            str(script),
            framework,
            str(backbone),
            str(gen),
            str(corpus),
            str(out),
            str(res),
        ]

    subprocess.run(cmd(tmp_path / "ref", tmp_path / "ref.json"), check=True, env=env, capture_output=True)
    proc = subprocess.Popen(
        cmd(tmp_path / "cut", tmp_path / "cut.json"), stdout=subprocess.PIPE, text=True, env=env
    )
    for line in proc.stdout:
        if line.startswith("STEP 5"):  # past the step-4 checkpoint
            proc.send_signal(signal.SIGKILL)
            break
    proc.wait()
    assert not (tmp_path / "cut").exists()
    subprocess.run(cmd(tmp_path / "cut", tmp_path / "cut.json"), check=True, env=env, capture_output=True)
    ref, cut = (
        json.loads((tmp_path / "ref.json").read_text()),
        json.loads((tmp_path / "cut.json").read_text()),
    )
    assert cut == ref
    assert (tmp_path / "cut" / "model.safetensors").read_bytes() == (
        tmp_path / "ref" / "model.safetensors"
    ).read_bytes()
