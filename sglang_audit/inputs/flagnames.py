"""How a setting is spelt on SGLang's command line, for messages and findings. Kept apart
from ``flags.py`` (which evaluates the release's parser and imports the interpreter) so
that ``check``, the rules and SARIF output can name a flag without loading the evaluator."""

from __future__ import annotations

# SGLang's flag spelling where it is not the field name with dashes (shown to users)
_FLAG_NAMES = {"fp4_gemm_runner_backend": "--fp4-gemm-backend", "fp8_gemm_runner_backend": "--fp8-gemm-backend"}


def cli_flag(setting: str) -> str:
    return _FLAG_NAMES.get(setting, "--" + setting.replace("_", "-"))
