"""Frameworks around the contrastive loss: how a batch becomes two views, any extra loss term, and
the sentence vector (SimCSE, PromptBERT, DiffCSE).

SimCSE is the training loop's own step (:mod:`focalcse.core.training`: the batch encoded twice,
dropout the only augmentation). Every other framework is one module here, imported by name, with
``training_setup(source, cfg, settings, generator_dir) -> (encoder, step, corpus_max_len)``; its step
is a :class:`focalcse.core.training.FrameworkStep`: the loop hands it the batch's token ids and the
registry's contrastive loss, so every registered loss works with every framework. A framework whose
saved models encode differently (PromptBERT) also names an ``ENCODER`` class that
:meth:`focalcse.core.model.SentenceEncoder.from_pretrained` loads its folders with.
"""
