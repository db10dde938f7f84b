"""The MLflow ``python_function`` model of a model folder that sentence-transformers cannot load (a
PromptBERT folder: its sentence vector is the template's mask token). Loading it loads the folder as
the evaluate stage does and encodes through the project's one encode path, so its ``predict`` gives
the vectors the STS scores were computed from.

Unlike the rest of the package this module imports MLflow at import time (the class subclasses
``mlflow.pyfunc.PythonModel``); :mod:`focalcse.ops.tracking.models` imports it only to log a model,
and MLflow imports it to load one (the logged model ships this package as its code).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import mlflow.pyfunc
import numpy as np
import pandas as pd

ARTIFACT = "model"  # the key of the model folder in the logged model's artifacts


def sentences_of(model_input: Any) -> list[str]:
    """The sentences of a ``predict`` input: a one-column DataFrame (what MLflow passes after its
    schema check), a Series, a 1-D array, a list or tuple of strings, or one string."""
    if isinstance(model_input, pd.DataFrame):
        if model_input.shape[1] != 1:
            raise ValueError(
                f"expected one column of sentences, got a DataFrame with columns {list(model_input.columns)}"
            )
        values: Sequence[Any] = model_input.iloc[:, 0].tolist()
    elif isinstance(model_input, pd.Series | np.ndarray):
        if getattr(model_input, "ndim", 1) != 1:
            raise ValueError(f"expected a 1-D array of sentences, got shape {model_input.shape}")
        values = model_input.tolist()
    elif isinstance(model_input, str):
        values = [model_input]
    elif isinstance(model_input, list | tuple):
        values = model_input
    else:
        raise ValueError(
            f"expected sentences (a list, Series or one-column DataFrame of str), got {type(model_input).__name__}"
        )
    bad = next((v for v in values if not isinstance(v, str)), None)
    if bad is not None:
        raise ValueError(f"expected every sentence to be a str, got {type(bad).__name__} {bad!r}")
    return list(values)


class EncoderModel(mlflow.pyfunc.PythonModel):
    """A focalcse model folder as an MLflow model: ``predict(sentences)`` -> (N, d) float32 vectors.

    ``load_context`` loads the folder (artifact :data:`ARTIFACT`) with
    :meth:`focalcse.core.model.SentenceEncoder.from_pretrained`, which builds the class its
    ``focalcse.json`` records (:class:`~focalcse.core.frameworks.promptbert.PromptEncoder` for
    PromptBERT, with its templates and denoising) with the recorded evaluation pooler, on the CPU;
    ``predict`` encodes with :func:`focalcse.core.encode.encode` in fp32, as the evaluate stage's
    default (``eval.precision``).
    """

    def load_context(self, context: Any) -> None:
        from focalcse.core.model import SentenceEncoder

        self.encoder = SentenceEncoder.from_pretrained(context.artifacts[ARTIFACT])

    # the DataFrame hint is what MLflow hands over (it checks the input against the signature); it
    # also keeps MLflow from asking for hints it would validate inputs with
    def predict(
        self, context: Any, model_input: pd.DataFrame, params: dict[str, Any] | None = None
    ) -> np.ndarray:
        from focalcse.core.encode import encode

        return encode(self.encoder, sentences_of(model_input)).numpy()
