"""Stage 9 — the command line (click): options, pipeline calls, renderers, exit codes."""
