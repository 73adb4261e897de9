"""Runtimes execute a network on a batch; they know nothing about OCR."""

from ocrforge.runtimes.base import Runtime

__all__ = ["Runtime"]
