"""Stage 7 — analyses over resolutions: graph, guards, explain, diff, matrix, report graph."""
