"""Frameworks around the contrastive loss: how a batch becomes two views and a sentence vector (SimCSE, PromptBERT, DiffCSE)."""
