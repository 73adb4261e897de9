"""Evaluation library: datasets, metrics, evaluation, synthetic pages (used by optimize and tools)."""
