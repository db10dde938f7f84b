"""Step ``check``: everything checkable before work, checked before DVC removes any output.

DVC deletes a stage's outputs just before it runs the stage's command, so a stage that validates its
own inputs has already lost its previous outputs when it refuses them. ``check`` is the first stage
and every other stage depends on its output: a bad params value (any section, the sweep, the
ablations), an unreadable or malformed source (the corpus, every STS task and split) or an offline
machine without a mirror stops ``dvc repro`` here, before any other stage is touched. Its output is
``persist``-ed (DVC never deletes it) and its content is constant, so a passing check leaves the hash
the other stages depend on unchanged: editing a ``report.*`` param reruns ``check`` (a few seconds)
and ``report``, nothing else.

After the checks pass, ``check`` also removes the outputs of items a params edit took out of the
sweep or the ablation lists (models, their work folders, metrics and curves): DVC forgets a matrix
item that leaves ``dvc.yaml`` but not its files, and the ``significance`` and ``report`` stages depend
on whole ``metrics/`` folders, which must hold the current items only. The metrics files are in git
and the models in DVC's cache, so a removed item can be brought back from there.
"""

from __future__ import annotations

import json
import os
import re
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

from focalcse.atomic import sha256_file, write_json
from focalcse.config import ConfigError, Params, TrainConfig, training_steps
from focalcse.core.backbones import DEFAULT_BACKBONE, locate_backbone
from focalcse.core.frameworks import framework_spec
from focalcse.core.losses import loss_spec
from focalcse.data.corpus import check_sample_size, read_sentences
from focalcse.data.sources import MIRROR_ENV, corpus_path, senteval_dir
from focalcse.data.tasks import prepared_keys, read_split
from focalcse.layout import ABLATION_KINDS, Layout
from focalcse.stage_table import expand, stage_template

# The check file's whole content: the same on every machine and for every params value.
CHECKED = {
    "checked_by": "the check stage (focalcse.steps.check)",
    "what": "params (every section, the sweep, the ablations) and the corpus and STS sources",
    "note": "constant content: a passing check changes no downstream dependency",
}


def run(params: Params, layout: Layout) -> dict[str, Any]:
    """Check every item's params against the sample (:func:`check_params`; each section was validated
    when loaded), then the sources ``params`` names: the corpus is readable and has
    ``data.num_sentences`` sentences, every evaluated STS task (``eval.tasks``; a registered task no set
    lists is not read) and extra split parses with its expected counts.

    The sources are fingerprinted by content first (:func:`corpus_fingerprint`, :func:`sts_fingerprint`:
    sha256 of the raw bytes) and parsed only when a fingerprint differs from the one recorded in
    ``data/sources/`` by the last passing check; the new fingerprint is written only then (after the
    parse passed), so DVC reruns exactly the stages that read a changed source (``sample`` depends on
    the corpus fingerprint, ``prepare_sts`` on the STS one) and an identical copy behind another mirror
    reruns nothing. Raises :class:`ConfigError` or the data layer's one-line errors; writes
    :data:`CHECKED` on success."""
    check_params(params)
    check_precision(params)
    backbones = check_backbones(params)
    mirror = params.data.mirror or None
    corpus = corpus_path(mirror)  # downloads once without a mirror; one line when that fails
    root = senteval_dir(mirror)
    corpus_fp, corpus_recorded = _with_derived(
        layout.corpus_sources_file,
        corpus_fingerprint(corpus),
        "sentences",
        lambda: len(read_sentences(corpus)),
    )
    # the sample step's own rule for "the corpus has only N sentences", on the (recorded) count
    check_sample_size(corpus_fp["sentences"], params.data.num_sentences)
    wanted = prepared_keys(params.eval.tasks)  # the evaluated tasks' data only, and the extra splits
    sts_fp, sts_recorded = _with_derived(
        layout.sts_sources_file,
        sts_fingerprint(root),
        "pairs",
        lambda: {key: len(read_split(root, key)) for key in wanted},
        usable=lambda pairs: list(pairs) == wanted,  # a record of other tasks: read what eval.tasks asks
    )
    removed = prune_stale(params, layout)
    # The report depends on the ablation folder, which a set with no ablation points never writes;
    # git keeps no empty folder, so make it here (a fresh set folder, a clone of one) with a .gitkeep
    # that git commits and DVC ignores (.dvcignore): a clone of the committed set then has the folder,
    # and its report is not "changed" (deleted dep) before anything runs.
    layout.ablation_dir.mkdir(parents=True, exist_ok=True)
    if not any(layout.ablation_dir.iterdir()):
        (layout.ablation_dir / ".gitkeep").touch()
    parsed = []
    for name, path, fp, recorded in (
        ("corpus", layout.corpus_sources_file, corpus_fp, corpus_recorded),
        ("sts", layout.sts_sources_file, sts_fp, sts_recorded),
    ):
        if fp != recorded:  # a changed (and just parsed) source, or a first or outdated record
            write_json(path, fp)
        if recorded is None or not _same_source(recorded, fp):
            parsed.append(name)
    write_json(layout.check_file, CHECKED)
    return {
        "corpus_sentences": corpus_fp["sentences"],
        "sts_pairs": sts_fp["pairs"],
        "parsed": parsed,
        "removed": [str(p) for p in removed],
        "backbones": backbones,
    }


# bf16 on a CPU whose flags name neither runs torch's bf16 matmuls in a reference loop, not oneDNN
NATIVE_BF16_FLAGS = ("avx512_bf16", "amx_bf16")
SLOW_BF16_ENV = "FOCALCSE_ALLOW_SLOW_BF16"  # set (non-empty) to run bf16 on such a CPU anyway


def check_precision(params: Params, cpu: dict[str, Any] | None = None) -> None:
    """Refuse bf16 autocast on a CPU without bf16 matmul instructions (neither AVX512-BF16 nor AMX):
    torch falls back to a reference GEMM loop there, and a training step of the CPU default takes
    tens of seconds instead of one (docs/performance.md, "CPUs without bf16"). Asked of the train items
    that run on ``cpu`` and of ``eval.precision`` when any does. ``cpu`` is
    :func:`focalcse.provenance.cpu_info`'s dict (read from this machine when None); a CPU whose flags
    cannot be read (no ``/proc/cpuinfo``, not x86) is not refused, nor any when :data:`SLOW_BF16_ENV`
    is set. Raises :class:`ConfigError` naming the keys, the CPU and the two ways on."""
    if os.environ.get(SLOW_BF16_ENV):
        return
    keys: list[str] = []
    on_cpu = False
    for framework, backbone, loss, seed in params.framework_items():
        cfg = params.train_config(backbone, loss, seed, framework)
        if cfg.device.startswith("cpu"):
            on_cpu = True
            if cfg.precision == "bf16" and "train.precision" not in keys:
                keys.append("train.precision")
    if on_cpu and params.eval.precision == "bf16":
        keys.append("eval.precision")
    if not keys:
        return
    if cpu is None:
        from focalcse.provenance import cpu_info

        cpu = cpu_info()
    flags = cpu.get("cpu_flags") or []
    if not flags or any(f in flags for f in NATIVE_BF16_FLAGS):
        return
    raise ConfigError(
        f"params {' and '.join(keys)} = 'bf16' on a CPU without bf16 matmul instructions "
        f"({cpu.get('cpu_model')}; flags {', '.join(flags)}; expected one of {', '.join(NATIVE_BF16_FLAGS)}): "
        "torch runs bf16 matmuls there in a reference loop, tens of times slower than fp32. Run in fp32 "
        "on this machine: the CPU default is fp32 (`make reproduce`, params.yaml; params/cpu-bf16.yaml is "
        f"for CPUs with bf16 matmul), or set {' and '.join(keys)} to 'fp32' in this set; "
        f"{SLOW_BF16_ENV}=1 runs bf16 anyway"
    )


def check_backbones(params: Params) -> dict[str, str]:
    """Where each backbone the sweep trains (its own and the frameworks') would load from
    (:func:`focalcse.core.backbones.locate_backbone`), asked before anything is pruned, so a misspelt
    name stops the check with one line (naming the nearest known names) and removes nothing."""
    sw = params.sweep
    names = dict.fromkeys(sw.backbones)
    known = [DEFAULT_BACKBONE, *params.backbone_overrides]
    out = {}
    for name in names:
        source = params.backbone_source(name)
        where = f"params backbone_overrides.{name}.source" if source != name else "params sweep backbone"
        out[name] = locate_backbone(source, known, where)
    return out


SOURCE_NOTE = (
    "written by the check stage when this fingerprint changes; sha256 of the raw bytes, named relative "
    "to the source folder (no absolute path)"
)


def corpus_fingerprint(corpus: Path) -> dict[str, Any]:
    """``{"note", "file", "sha256"}`` of the corpus file: its name and content, not where it lies."""
    return {"note": SOURCE_NOTE, "file": corpus.name, "sha256": sha256_file(corpus)}


def sts_fingerprint(root: Path) -> dict[str, Any]:
    """``{"note", "files": {relative path: sha256}}`` of every file under SentEval's ``downstream``
    folder (the STS readers read some of them; a new or changed one changes the fingerprint)."""
    files = {p.relative_to(root).as_posix(): sha256_file(p) for p in sorted(root.rglob("*")) if p.is_file()}
    return {"note": SOURCE_NOTE, "files": files}


def _with_derived(
    path: Path,
    fingerprint: dict[str, Any],
    key: str,
    parse: Callable[[], Any],
    usable: Callable[[Any], bool] = lambda derived: True,
) -> tuple[dict[str, Any], dict[str, Any] | None]:
    """``(fingerprint + {key: derived}, the recorded fingerprint or None)``: the derived count comes
    from the record when it names the same bytes and ``usable`` accepts it, else from ``parse()``
    (which raises the data layer's one-line error for a malformed source, before anything is written)."""
    recorded = _read_json(path)
    if (
        recorded is not None
        and key in recorded
        and _same_source(recorded, fingerprint)
        and usable(recorded[key])
    ):
        return {**fingerprint, key: recorded[key]}, recorded
    return {**fingerprint, key: parse()}, recorded


def _same_source(recorded: dict[str, Any], now: dict[str, Any]) -> bool:
    """Whether a recorded fingerprint names the same bytes (the derived counts aside)."""
    return all(recorded.get(k) == v for k, v in now.items() if k != "note")


def _read_json(path: Path) -> dict[str, Any] | None:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def check_params(params: Params) -> None:
    """The refusals a stage would make later, decided from params alone (no file is read but the mirror
    folder's existence): for every train item of every framework and every ablation item, the trainer's
    own step count (:func:`focalcse.config.training_steps`: ``max_steps`` beyond the batches the sample
    gives, no batch), a batch larger than the sample, a dev period longer than the run, and the
    frameworks' refusals of a train config (each settings class's ``refusal``); a generator's batch; a ``data.mirror`` that is not a
    folder. Raises :class:`ConfigError` with one line naming the key, the item and what is expected."""
    mirror = params.data.mirror
    if mirror and not os.environ.get(MIRROR_ENV) and not Path(mirror).is_dir():  # the env var wins
        raise ConfigError(
            f"params data.mirror = {mirror!r}: expected '' (the standard downloads) or an existing folder "
            "laid out like shared/data"
        )
    n = params.data.num_sentences
    for framework, backbone, loss, seed in params.framework_items():
        where = f"item {framework} {backbone} {loss} seed {seed}"
        cfg = params.train_config(backbone, loss, seed, framework)
        check_train_item(cfg, n, where)
        check_framework_item(params, framework, cfg, where)
    ab = params.ablation
    for kind in ABLATION_KINDS:
        if kind == "m" and "m" not in loss_spec(ab.loss).hyper_names:
            continue  # config.check_ablation's rule: no m, no Table 5
        for value in params.ablation_values(kind):
            check_train_item(params.ablation_train_config(kind, value), n, f"item ablate_{kind}@{value:g}")
    for framework in params.sweep.frameworks:
        gen = params.frameworks.settings(framework)
        if (
            "generator" in framework_spec(framework).needs
            and not gen.generator
            and gen.pretrain.batch_size > n
        ):
            raise ConfigError(
                f"params frameworks.{framework}.pretrain.batch_size = {gen.pretrain.batch_size}: expected at "
                f"most data.num_sentences ({n}), the sentences the generator is trained on"
            )


def check_train_item(cfg: TrainConfig, n: int, where: str) -> int:
    """One item's train config against the ``n`` sampled sentences; returns its steps."""
    if cfg.batch_size > n:
        raise ConfigError(
            f"params train.batch_size = {cfg.batch_size} ({where}): expected at most data.num_sentences "
            f"({n}); a larger batch would silently hold only the {n} sentences"
        )
    steps = training_steps(cfg, n, where)  # the trainer's own rule (core/training.py _setup)
    if cfg.eval_steps > steps:
        raise ConfigError(
            f"params train.eval_steps = {cfg.eval_steps} ({where}): expected at most the item's {steps} "
            "steps; with more, STS-B dev is scored at the last step only and no checkpoint is selected"
        )
    return steps


def check_framework_item(params: Params, framework: str, cfg: TrainConfig, where: str) -> None:
    """The refusals a framework makes of an item's train config when its stage builds the encoder
    (core/frameworks/*.py, core/training.py ``_setup``, core/gradcache.py), decided here from params."""

    def refuse(key: str, value: Any, expected: str) -> None:
        raise ConfigError(f"params train.{key} = {value!r} ({where}): expected {expected}")

    if cfg.grad_cache_chunk and cfg.device.startswith("mps"):
        refuse(
            "grad_cache_chunk",
            cfg.grad_cache_chunk,
            "0 on mps: GradCache replays the dropout RNG on cpu and cuda only",
        )
    if cfg.grad_cache_chunk and "gradcache" in framework_spec(framework).refuses:
        refuse(
            "grad_cache_chunk",
            cfg.grad_cache_chunk,
            f"0: framework {framework} does not support GradCache (docs/frameworks.md)",
        )
    settings = params.frameworks.settings(framework)
    refusal = getattr(settings, "refusal", None)
    if refusal is not None and (found := refusal(cfg)) is not None:
        refuse(*found)


# The stages whose items' outputs leave with the item when a params edit takes it out of the sweep or
# the ablation lists (the generators stay).
PRUNED = (
    "train",
    "evaluate",
    "hard_negatives",
    "ablate_tau",
    "ablate_m",
)


def expected_outputs(params: Params, layout: Layout) -> set[Path]:
    """Every per-item output path of the current sweep and ablation lists (with companions)."""
    return {path for item in expand(params, layout, PRUNED) for path in item.outputs}


def named_like_outputs(layout: Layout) -> list[Path]:
    """Every file and folder named the way an item of :data:`PRUNED` names an output (its DVC template
    with each ``${...}`` a wildcard), and the work and aside folders beside a folder output
    (``.<name>.*``, :mod:`focalcse.atomic`)."""
    found: set[Path] = set()
    for name in PRUNED:
        for out in stage_template(name, layout).outputs:
            pattern = re.sub(r"\$\{[^}]+\}", "*", out.relative_to(layout.root).as_posix())
            parent, _, last = pattern.rpartition("/")
            found.update(layout.root.glob(pattern))
            found.update(p for p in layout.root.glob(f"{parent}/.{last}.*") if p.is_dir())
    return sorted(found)


def _belongs(path: Path, expected: set[Path]) -> bool:
    """An expected output, or the work / aside folder of one (``.<name>.*`` beside it)."""
    if path in expected:
        return True
    owner = path.name[1:].split(".", 1)[0] if path.name.startswith(".") else ""
    return bool(owner) and path.with_name(owner) in expected


def prune_stale(params: Params, layout: Layout) -> list[Path]:
    """Remove the outputs of items outside the current sweep / ablation lists; returns what went.

    Only files and folders named the way the stage table names these stages' outputs are touched
    (:func:`named_like_outputs`): model folders ``models/<framework>/<backbone>/<loss>/seed<k>`` (and
    ``.seed<k>.*``), the item files of ``metrics/train``, ``metrics/eval``, ``metrics/curves/{loss,dev}``,
    ``metrics/hard_negatives`` and ``metrics/ablation``.
    """
    expected = expected_outputs(params, layout)
    stale = [p for p in named_like_outputs(layout) if not _belongs(p, expected)]
    for path in stale:
        shutil.rmtree(path) if path.is_dir() else path.unlink()
    for folder in {p.parent for p in stale if layout.models_dir in p.parents}:
        for empty in (folder, folder.parent):  # models/<framework>/<b>/<loss>, then <b>, once empty
            if empty.is_dir() and not any(p for p in empty.iterdir() if p.name != ".gitignore"):
                shutil.rmtree(empty)
    if stale:
        names = ", ".join(str(p) for p in stale[:6]) + (
            f" and {len(stale) - 6} more" if len(stale) > 6 else ""
        )
        print(
            f"check: removed {len(stale)} output(s) of items no longer in the sweep: {names} (every check "
            "passed first; `git checkout -- metrics` brings committed metrics back, `dvc checkout` the "
            "models DVC has cached)"
        )
    return stale
