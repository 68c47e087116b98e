"""Stage 8 — renderers: text, check, diff, explain, html, matrix, sarif. They read result data only."""
