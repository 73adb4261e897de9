"""Inputs (images, PDFs) and exporters."""
