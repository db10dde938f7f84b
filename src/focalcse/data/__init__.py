"""Data: the training corpus, the STS tasks (a registry) and where both come from (downloads or a mirror)."""
