"""Stage 5 — the transformers config boundary: a model's config class found in the release's
transformers (``configclass``) and what its source declares (``members``); its initialiser is
run on config.json's values by the interpreter (``world/configrun.py``)."""
