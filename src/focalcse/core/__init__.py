"""Science core: losses, the encoder and its poolers, the training loop, DDP and GradCache.

Knows nothing of DVC, Prefect or MLflow: tracking arrives through a ``log_metrics`` callback.
"""
