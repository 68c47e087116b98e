"""Stage 6 — the known-bad rules (data under the repository's rules/) matched to a resolution."""
