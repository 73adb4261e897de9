"""Scheduling: the page pipeline (decode | detect | recognise overlapped) and batching."""
