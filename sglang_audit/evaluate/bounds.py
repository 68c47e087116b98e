"""The evaluator's deterministic bounds (and its last-resort CPU-time budget).

Apart from the interpreter so that what keys a cached resolution (``Bounds()``'s repr)
is known without importing the evaluator: a result-cache hit never loads it."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class Bounds:
    max_steps: int = 1_000_000  # one 0.5.23 resolution path takes ~0.1M (10x headroom)
    max_depth: int = 150
    max_loop: int = 200_000
    max_seq_len: int = 1_000_000
    max_int_bits: int = 100_000  # ~30,000 digits: no config value is larger
    max_mro: int = 200  # classes in one hierarchy (SGLang's deepest has ~10)
    # per resolution, parsing excluded: a last resort against a slow pathology (~30x a 0.5.23
    # resolution). CPU time of this process, not wall time: the answer must not depend on how
    # loaded the machine is (a budget in wall seconds turned layer values unknown under load)
    cpu_seconds: float = 45.0
