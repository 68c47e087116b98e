"""Stage 2 — parse with libcst into the picklable IR, cached by content."""
