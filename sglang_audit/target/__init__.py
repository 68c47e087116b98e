"""Stage 4 — the target: device model, environment, the world the evaluator runs in, SGLang's flags."""
