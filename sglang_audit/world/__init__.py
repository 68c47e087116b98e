"""Stage 6 — the world the evaluator runs in for one deployment: ``native.NativeWorld`` composes
the pure Python overlays of ``evaluate/overlays`` with the deployment's (``overlays/``: the
device, the installed packages, the files, the checkpoint, abstract tensors, SGLang's
boundaries)."""
