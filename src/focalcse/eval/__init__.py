"""Evaluation: STS scores, statistics over seeds, significance tests and the §5.1 hard negatives."""
