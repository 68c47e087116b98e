"""Stage 3 — the partial evaluator: a generic Python interpreter over the IR.

Knows no SGLang, torch or command line: its world is passed in (target.world)."""
