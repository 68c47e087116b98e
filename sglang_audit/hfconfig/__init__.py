"""Stage 5 — the transformers config boundary: a model's config class found in the release's
transformers (``configclass``) and its body run on config.json's values (``configbody``)."""
