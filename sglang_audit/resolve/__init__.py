"""Stage 5 — evaluate a release for a target: the resolution, the layer stage, the result cache."""
