"""Stage 1 — locate the SGLang source (checkout, wheel, sdist, sglang==X, installed)."""
