"""sglang-audit: static analysis of SGLang's backend auto-selection.

Pipeline: locate the source (``source``) → parse/extract with libcst (``frontend``)
→ evaluate for a target (``evaluator`` driven by ``resolver``) → rules → render.
The analysed SGLang code is never imported, executed or ``eval``-ed.
"""

__version__ = "0.1.0"
