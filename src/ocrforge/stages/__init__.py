"""OCR stages: prepare inputs for a network and decode its outputs (no runtime inside)."""
