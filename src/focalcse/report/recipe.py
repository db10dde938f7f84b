"""What a parameter set does differently from the reference recipe (SimCSE's unsupervised trainer and
the official Focal-InfoNCE fork; docs/method.md), computed from params: the report's "Departures from
the reference recipe" section. Pure: params in, sentences out.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from focalcse.config import Params, TrainConfig
from focalcse.core.losses import loss_spec
from focalcse.report.labels import framework_label, loss_label
from focalcse.report.published import backbone_key, published_backbones

REFERENCE_SENTENCES = 1_000_000  # wiki1m, one epoch
REFERENCE_EVAL_STEPS = 125
REFERENCE_TAU = 0.05  # SimCSE's InfoNCE temperature; the official Focal script's too
REFERENCE_M = 0.3  # the paper's m for every backbone
REFERENCE_TABLE4 = (0.03, 0.05, 0.07, 0.1)  # the paper's τ ablation points
# method.md: batch size and learning rate per original backbone
PAPER_BATCH_LR = {
    "bert-base-uncased": (64, 3e-5),
    "bert-large-uncased": (64, 1e-5),
    "roberta-base": (512, 1e-5),
    "roberta-large": (512, 3e-5),
}
RECIPE_OF_OTHERS = "bert-base-uncased"  # a backbone outside the paper is compared with BERT-base's recipe
# what is known about a backbone outside the paper (by name without org prefix)
KNOWN_BACKBONES = {
    "all-MiniLM-L6-v2": "already sentence-tuned (a contrastively trained sentence-transformers model, "
    "BERT architecture, 22.7M parameters), so its runs are continued training, not training from MLM",
}


@dataclass(frozen=True)
class Recipe:
    """The report's two lists: what differs from the reference, and what matches it."""

    departures: list[str]
    matches: list[str]


def _items(params: Params) -> list[tuple[str, str, TrainConfig]]:
    """(backbone, loss, effective train config) of every sweep item (first seed)."""
    sw = params.sweep
    return [(b, loss, params.train_config(b, loss, sw.seeds[0])) for b in sw.backbones for loss in sw.losses]


def _grouped(items: Sequence[tuple[str, str, TrainConfig]], get: Callable[[TrainConfig], Any]) -> str:
    """``value`` when every item has it, else ``value (backbone/loss, ...); ...``."""
    groups: dict[Any, list[str]] = {}
    for b, loss, cfg in items:
        groups.setdefault(get(cfg), []).append(f"{b}/{loss}")
    if len(groups) == 1:
        return f"{next(iter(groups))}"
    return "; ".join(f"{v} ({', '.join(names)})" for v, names in groups.items())


def _short(name: str) -> str:
    return backbone_key(name).removeprefix("sentence-transformers/")


def _paper_key(params: Params, backbone: str, known: Sequence[str]) -> str | None:
    """The name among ``known`` of ``backbone`` or of its source, else None."""
    return next((k for k in (_short(backbone), _short(params.backbone_source(backbone))) if k in known), None)


def recipe(params: Params) -> Recipe:
    """The departures from, and matches with, the reference recipe of ``params``' sweep and ablations,
    in the report's order: backbones, the training setup of SimCSE's items, each framework's official
    recipe, evaluation and the ablation points."""
    items = _items(params)
    differs: list[str] = []
    matches: list[str] = []

    def check(ok: bool, good: str, bad: str) -> None:
        (matches if ok else differs).append(good if ok else bad)

    differs += _backbone_departures(params)
    _training_setup(params, items, check, differs, matches)
    if params.sweep.others:
        _framework_recipes(params, differs, matches)
    differs += _loss_departures(items)
    differs += _evaluation_departures(params)
    return Recipe(differs, matches)


def _loss_departures(items: list[tuple[str, str, TrainConfig]]) -> list[str]:
    """Per sweep loss whose SPEC names a reference implementation: what it does differently, as its
    SPEC states it, formatted with each item's hyper-parameters (one line per distinct wording)."""
    lines: dict[str, None] = {}
    for _, loss, cfg in items:
        spec = loss_spec(loss)
        if spec.departures:
            values = {**{h: cfg.hyper_value(h) for h in spec.hyper_names}, "temperature": cfg.temperature}
            said = "; ".join(d.format(**values) for d in spec.departures)
            lines[f"{spec.label} against {spec.reference}: {said}."] = None
    return list(lines)


def _backbone_departures(params: Params) -> list[str]:
    """A line for each sweep backbone that is not one of the paper's."""
    differs: list[str] = []
    paper = published_backbones()
    for b in params.sweep.backbones:
        src = params.backbone_source(b)
        if _paper_key(params, b, paper) is None:
            known = KNOWN_BACKBONES.get(_short(b)) or KNOWN_BACKBONES.get(_short(src))
            named = f"`{b}`" + (f" (`{src}`)" if src != b else "")
            differs.append(
                f"Backbone {named} is not one of the paper's ({', '.join(paper)}, pre-trained "
                "with MLM only)" + (f": {known}." if known else "; compare losses, not absolute numbers.")
            )
    return differs


def _training_setup(
    params: Params,
    items: list[tuple[str, str, TrainConfig]],
    check: Callable[[bool, str, str], None],
    differs: list[str],
    matches: list[str],
) -> None:
    """SimCSE's items against the reference training setup: data, length, dev period, batch and lr,
    precision, clipping, optimizer, length, pooler, τ and m."""
    n = params.data.num_sentences
    check(
        n >= REFERENCE_SENTENCES,
        f"corpus of {n:,} sentences (reference 10^6)",
        f"Corpus: {n:,} sentences sampled (reference: all 10^6 of wiki1m), i.e. "
        f"{n / REFERENCE_SENTENCES:.2%} of the reference's training data.",
    )
    length = _grouped(items, lambda c: f"{c.epochs} epoch(s), max_steps {c.max_steps}")
    reference_items = f"{framework_label(params.sweep.reference)} items: " if params.sweep.others else ""
    check(
        all(c.epochs == 1 and c.max_steps == 0 for *_, c in items),
        f"{reference_items}one epoch over the sample",
        f"{reference_items}training length: {length} (reference: one epoch, no step limit).",
    )
    check(
        all(c.eval_steps == REFERENCE_EVAL_STEPS for *_, c in items),
        f"{reference_items}STS-B dev every {REFERENCE_EVAL_STEPS} steps, best checkpoint kept",
        f"{reference_items}STS-B dev every {_grouped(items, lambda c: c.eval_steps)} steps (reference {REFERENCE_EVAL_STEPS}); "
        "the best checkpoint is kept, as in the reference.",
    )
    batch_lr = []
    for b, loss, cfg in items:
        key = _paper_key(params, b, PAPER_BATCH_LR)
        ref_b, ref_lr = PAPER_BATCH_LR[key or RECIPE_OF_OTHERS]
        if (cfg.batch_size, cfg.lr) != (ref_b, ref_lr):
            whose = f"{key}'s" if key else f"{RECIPE_OF_OTHERS}'s, the nearest paper backbone"
            batch_lr.append(
                f"{reference_items}`{b}` {loss_label(loss)}: batch {cfg.batch_size}, lr {cfg.lr:g} "
                f"(reference {whose}: batch {ref_b}, lr {ref_lr:g})."
            )
    differs += batch_lr
    if not batch_lr:
        others = [b for b in params.sweep.backbones if _paper_key(params, b, PAPER_BATCH_LR) is None]
        matches.append(
            f"{reference_items}batch size and learning rate of the paper's recipe per backbone"
            + (f" ({RECIPE_OF_OTHERS}'s for {', '.join(f'`{b}`' for b in others)})" if others else "")
        )

    precision = _grouped(items, lambda c: c.precision)
    check(
        all(c.precision == "fp32" for *_, c in items),
        "encoder in fp32",
        f"Encoder under {precision} autocast (reference: fp32, or fp16 with loss scaling).",
    )
    matches.append("cosine similarity, logits and cross-entropy in fp32 under any autocast (as SimCSE)")
    check(
        all(c.max_grad_norm == 1.0 for *_, c in items),
        "gradient clipping to global norm 1.0",
        f"Gradient clipping to global norm {_grouped(items, lambda c: c.max_grad_norm)} "
        "(reference 1.0; 0 = off).",
    )
    check(
        all(c.weight_decay == 0 for *_, c in items),
        "AdamW with weight decay 0, linear decay, no warm-up",
        f"Weight decay {_grouped(items, lambda c: c.weight_decay)} (reference 0).",
    )
    check(
        all(c.max_seq_len == 32 for *_, c in items),
        "max_seq_len 32",
        f"max_seq_len {_grouped(items, lambda c: c.max_seq_len)} (reference 32).",
    )
    check(
        all(c.pooler == "cls" and c.mlp_only_train for *_, c in items),
        "[CLS] + MLP in training, MLP dropped at evaluation",
        f"Pooler {_grouped(items, lambda c: (c.pooler, 'mlp_only_train' if c.mlp_only_train else 'MLP kept'))} "
        "(reference: cls with the MLP in training only).",
    )
    base = [(b, loss, c) for b, loss, c in items if loss == params.significance.baseline]
    check(
        all(c.temperature == REFERENCE_TAU for *_, c in base),
        f"{loss_label(params.significance.baseline)} τ = {REFERENCE_TAU:g}",
        f"{loss_label(params.significance.baseline)} τ = {_grouped(base, lambda c: c.temperature)} "
        f"(SimCSE: {REFERENCE_TAU:g}).",
    )
    with_m = [(b, loss, c) for b, loss, c in items if "m" in c.loss_kwargs()]
    if with_m:
        check(
            all(c.hyper_value("m") == REFERENCE_M for *_, c in with_m),
            f"m = {REFERENCE_M:g}",
            f"m = {_grouped(with_m, lambda c: c.hyper_value('m'))} (paper: {REFERENCE_M:g}).",
        )


def _evaluation_departures(params: Params) -> list[str]:
    """Evaluation precision and the Table 4 points."""
    differs: list[str] = []
    if params.eval.precision != "fp32":
        differs.append(f"Evaluation encodes under {params.eval.precision} (reference: fp32).")
    taus = params.ablation_points("tau")
    if not params.ablation_values("tau"):
        differs.append(
            f"No Table 4 (`ablation.temperatures` is empty; paper: τ ∈ {{{', '.join(f'{t:g}' for t in REFERENCE_TABLE4)}}})."
        )
    elif tuple(taus) != REFERENCE_TABLE4:
        differs.append(
            f"Table 4 points τ ∈ {{{', '.join(f'{t:g}' for t in taus)}}} "
            f"(paper: {', '.join(f'{t:g}' for t in REFERENCE_TABLE4)})."
        )
    return differs


def _fmt(value: Any) -> str:
    return (
        f"{value:g}"
        if isinstance(value, float)
        else str(value).lower()
        if isinstance(value, bool)
        else str(value)
    )


def _framework_recipes(params: Params, differs: list[str], matches: list[str]) -> None:
    """Each framework item's effective config against its official script
    (its settings class's ``OFFICIAL_RECIPE``): training length, batch, lr, max length, dev interval, the
    baseline's τ, the framework's own settings and its test-scoring protocol."""
    sw = params.sweep
    for f in sw.frameworks:
        settings_obj = params.frameworks.settings(f)
        official = getattr(settings_obj, "OFFICIAL_RECIPE", None)
        name = framework_label(f)
        if official is None:
            differs.append(f"{name} items: no official recipe is recorded to check them against.")
            continue
        items = [
            (b, loss, params.train_config(b, loss, sw.seeds[0], f))
            for b in sw.backbones
            for loss in sw.losses
        ]
        ref = official["train"]
        src = official["source"]
        length = _grouped(
            items, lambda c: f"{c.epochs} epoch(s)" + (f", max_steps {c.max_steps}" if c.max_steps else "")
        )
        check_items = [
            (
                all(c.epochs == ref["epochs"] and c.max_steps == 0 for *_, c in items),
                f"{ref['epochs']} epoch(s)",
                f"training length {length} (official: {ref['epochs']} epoch(s) over wiki1m, no step limit)",
            ),
            (
                all((c.batch_size, c.lr) == (ref["batch_size"], ref["lr"]) for *_, c in items),
                f"batch {ref['batch_size']}, lr {ref['lr']:g}",
                f"batch / lr {_grouped(items, lambda c: f'{c.batch_size} / {c.lr:g}')} "
                f"(official: {ref['batch_size']} / {ref['lr']:g})",
            ),
            (
                all(c.max_seq_len == ref["max_seq_len"] for *_, c in items),
                f"max_seq_len {ref['max_seq_len']}",
                f"max_seq_len {_grouped(items, lambda c: c.max_seq_len)} (official: {ref['max_seq_len']})",
            ),
            (
                all(c.eval_steps == ref["eval_steps"] for *_, c in items),
                f"STS-B dev every {ref['eval_steps']} steps",
                f"STS-B dev every {_grouped(items, lambda c: c.eval_steps)} steps (official: {ref['eval_steps']})",
            ),
        ]
        base = [(b, loss, c) for b, loss, c in items if loss == params.significance.baseline]
        if base:
            check_items.append(
                (
                    all(c.temperature == ref["temperature"] for *_, c in base),
                    f"{loss_label(params.significance.baseline)} τ = {ref['temperature']:g}",
                    f"{loss_label(params.significance.baseline)} τ = {_grouped(base, lambda c: c.temperature)} "
                    f"(official: {ref['temperature']:g})",
                )
            )
        settings = params.framework_settings(f)
        words = getattr(settings_obj, "recipe_phrase", None)
        for key, want in official["settings"].items():
            have = settings.get(key)
            phrase = words(key, have, want) if words is not None else None
            good, bad = phrase or (f"{key} {_fmt(want)}", f"{key} {_fmt(have)} (official: {_fmt(want)})")
            check_items.append((have == want, good, bad))
        good = [g for ok, g, _ in check_items if ok]
        bad = [b for ok, _, b in check_items if not ok]
        if bad:
            differs.append(f"{name} items against {src}: " + "; ".join(bad) + ".")
        if good:
            matches.append(f"{name} items as {src}: " + ", ".join(good))
