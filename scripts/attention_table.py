#!/usr/bin/env python3
"""Every attention backend a release registers, forced on each arch for an MHA, an MLA and a
hybrid GDN model, without speculative decoding, with EAGLE/NEXTN and with NGRAM: what SGLang
and the kernel it calls say (issue 42). Generated, never hand-written:

    python scripts/attention_table.py                          # writes docs/attention-backends.md
    python scripts/attention_table.py --releases 0.5.23 --archs sm100 --specs none --jobs 2 -o /tmp/t.md

One ``explain attention_backend`` per (release, spec, arch, model): its forced choices are the
release's own ``--attention-backend`` choices, each resolved with the attention stage, the
speculative worker (which builds the draft's backends with the same choice) and the kernel
level (the result cache makes a re-run cheap). A cell reads

* ``resolved`` — SGLang accepts it and the backend's constructor passes (``· kernel supported``
  when the kernel's own device guard was read and passes);
* ``unsupported`` — with the ``file:line`` of the check that refuses: SGLang's raise/assert
  when it builds the backend, else the kernel's own guard (``kernel``);
* ``rejected`` — ServerArgs refuses the flags (``file:line``);
* ``rewritten → X`` — SGLang replaces the choice;
* ``unknown`` — with the reason;
* with speculative decoding, the worker's verdict when the backend itself passes:
  ``unsupported (worker)`` with SGLang's refusing ``file:line``, or ``unknown (worker: …)``.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from sglang_audit.analyses.explain import (  # noqa: E402
    OUTCOME_ACCEPTED,
    OUTCOME_KNOWN_BAD,
    OUTCOME_LAYERS_FAIL,
    OUTCOME_REJECTED,
    OUTCOME_REWRITTEN,
    ChoiceOutcome,
    explain,
)
from sglang_audit.analyses.matrix import MODEL_DEFAULT_SETS  # noqa: E402
from sglang_audit.errors import AuditError  # noqa: E402
from sglang_audit.resolve.pipeline import Request  # noqa: E402

RELEASES = ["0.5.10", "0.5.16", "0.5.23"]
ARCHS = ["sm80", "sm89", "sm90", "sm100", "sm103", "sm120", "sm121", "gfx942"]
# bundled profiles (fixtures/models): a bf16 MHA model, an MLA model (DeepSeek-V3's FP8) and a
# hybrid linear-attention (GDN) model
MODELS = {"MHA": "qwen3-30b-a3b", "MLA": "deepseek-v3-fp8", "GDN": "qwen3-next-80b-a3b"}
# speculative decoding: the algorithm per model kind (EAGLE for the MHA model, whose checkpoint
# has no MTP layers, SGLang's draft being the target's own config; NEXTN for the models with MTP)
SPECS: dict[str, dict[str, str]] = {
    "none": {},
    "EAGLE/NEXTN": {"MHA": "EAGLE", "MLA": "NEXTN", "GDN": "NEXTN"},
    "NGRAM": {"MHA": "NGRAM", "MLA": "NGRAM", "GDN": "NGRAM"},
}
OUT = Path(__file__).resolve().parent.parent / "docs" / "attention-backends.md"
# cells read by hand against the release's code (issue 42 asks for 10), kept with the script so
# a regenerated table keeps the note: (release, arch, kind, backend, what was read)
CHECKED = [
    ("0.5.10", "sm100", "MHA", "fa3", "attention_registry.py:130 assert major 8 (non-MLA) or 9; sgl-kernel 0.4.1 "
     "flash_attn.py:261 `if not is_fa3_supported()` raise, is_fa3_supported (:25) majors 8 and 9 only"),
    ("0.5.10", "sm100", "MHA", "trtllm_mla", "attention_registry.py:51 raise ValueError when not use_mla_backend"),
    ("0.5.10", "sm100", "MLA", "trtllm_mha", "attention_registry.py:158 raise ValueError when use_mla_backend"),
    ("0.5.10", "sm100", "MHA", "nsa", "nsa_backend.py:304 assert is_deepseek_nsa(hf_config)"),
    ("0.5.10", "sm100", "MLA", "intel_xpu", "xpu_backend.py:63 assert not use_mla"),
    ("0.5.10", "sm100", "MHA", "dual_chunk_flash_attn", "dual_chunk_flashattention_backend.py:128 assert "
     "dual_chunk_attention_config is not None (Qwen3-30B-A3B has none)"),
    ("0.5.23", "sm100", "MHA", "fa3", "attention_registry.py:243 assert; FlashAttentionBackend.__init__ imports "
     "sgl_kernel.flash_attn at flashattention_backend.py:282 for fa_impl_ver 3; sgl-kernel 0.4.10 flash_attn.py:306"),
    ("0.5.23", "sm80", "MHA", "trtllm_mla", "arg_groups/overrides.py:1211 raise ValueError unless is_blackwell"),
    ("0.5.23", "sm80", "MHA", "trtllm_mha", "arg_groups/attention_hook.py:203 raise ValueError: prefill trtllm_mha "
     "needs sm90/sm100/sm120"),
    ("0.5.23", "sm80", "MLA", "hpc_ops", "attention_registry.py:289 raise ValueError when use_mla_backend"),
    ("0.5.23", "sm80", "MHA", "dsa", "dsa_backend.py:528 assert is_deepseek_dsa(hf_config)"),
]

# the same for cells with speculative decoding: (release, spec, arch, kind, backend, what was read)
CHECKED_SPEC = [
    ("0.5.23", "EAGLE/NEXTN", "sm100", "MHA", "torch_native", "speculative/draft_utils.py:63-64 raise ValueError when the "
     "name is not in DraftBackendFactory.create_decode_backend's map (:96-113: no torch_native)"),
    ("0.5.23", "EAGLE/NEXTN", "sm100", "MHA", "wave", "the same map has no wave: unsupported (worker) at draft_utils.py:64"),
    ("0.5.23", "EAGLE/NEXTN", "sm100", "MHA", "triton", "triton is in both maps (decode :98, draft extend :128): resolved"),
    ("0.5.23", "EAGLE/NEXTN", "sm100", "MHA", "flex_attention", "arg_groups/attention_hook.py:161 assert "
     "speculative_algorithm is None: rejected"),
    ("0.5.23", "EAGLE/NEXTN", "sm100", "GDN", "torch_native", "attention_registry.py:473 assert prefill and decode "
     "backends in the hybrid GDN set on Blackwell ({fa4, flashinfer, triton, trtllm_mha})"),
]


def _clip(text: str, n: int = 110) -> str:
    text = " ".join(str(text).split()).replace("|", "\\|")
    return text if len(text) <= n else text[: n - 1] + "…"


def cell(c: ChoiceOutcome) -> str:
    k = c.kernel
    kernel_no = k is not None and k.status == "unsupported"
    if c.outcome == OUTCOME_REJECTED and c.rejection is not None:
        r = c.rejection
        return f"rejected `{r.file}:{r.line}` {_clip(r.message, 80)}"
    if c.outcome == OUTCOME_LAYERS_FAIL:
        where = c.note.rsplit(" at ", 1)
        site = f" `{where[1]}`" if len(where) == 2 else ""
        extra = ""
        if kernel_no and k is not None:
            extra = f"; kernel too: `{_kernel_site(k.reason)}`"
        return f"unsupported{site} {_clip(where[0], 80)}{extra}"
    if c.outcome == OUTCOME_REWRITTEN:
        final = c.config if c.layer == "config" else c.runtime
        return f"rewritten → {final}"
    if c.outcome in (OUTCOME_ACCEPTED, OUTCOME_KNOWN_BAD):
        if kernel_no and k is not None:
            return f"unsupported (kernel) `{_kernel_site(k.reason)}` {_clip(k.reason, 80)}"
        if c.note:
            return f"unknown ({_clip(c.note)})"
        tail = f" · kernel {k.status}" if k is not None else ""
        return f"resolved{tail}"
    return f"unknown ({_clip(c.note or 'no reason recorded')})"


def spec_cell(c: ChoiceOutcome, base: str) -> str:
    """The cell with the speculative worker's verdict when the backend itself passes: the worker
    SGLang builds with the same choice (its draft backends) refuses or cannot be told."""
    if not base.startswith("resolved"):
        return base
    failed = next((f for name, _stage, f in c.also_fails if name == "speculative_algorithm"), None)
    if failed is not None:
        msg, _, site = failed.rpartition(" at ")
        return f"unsupported (worker) `{site}` {_clip(msg, 80)}" if msg else f"unsupported (worker) {_clip(failed, 80)}"
    unknown = next((r for name, _stage, r in c.also_unknown if name == "speculative_algorithm"), None)
    if unknown is not None:
        return f"unknown (worker: {_clip(unknown)})"
    return base


def _kernel_site(reason: str) -> str:
    return reason.rsplit(" at ", 1)[1] if " at " in reason else ""


def write(args: argparse.Namespace, kinds: list[str], sections: list[str], started: float) -> None:
    """The document so far: written after every section, so a long run that is cut off leaves
    the releases it finished (a re-run is cheap: the result cache holds every resolution)."""
    head = [
        "# Attention backends × arch × model kind × speculative decoding (generated)",
        "",
        f"Generated by `python scripts/attention_table.py` in {time.time() - started:.0f} s; do not edit by hand.",
        "Models (bundled profiles): " + ", ".join(f"{k} `{m}`" for k, m in MODELS.items() if k in kinds) + " "
        "(tp from rules/matrix.toml). Each cell is that backend forced with `--attention-backend`, as "
        "`explain attention_backend` resolves it: the release's ServerArgs, the attention backend "
        "built (the registry's creator and the class's constructor, evaluated), and the kernel level "
        "(the sgl-kernel functions its constructor imports, read from the wheel the release pins). "
        "`resolved` means ServerArgs accepts it, the backend's constructor passes and serving a "
        "stand-in batch per forward mode raises nothing SGLang decides on known values (request time); "
        "a kernel is read where the constructor imports it or the forward path calls it and the "
        "library's own code checks the device (`· kernel supported`), so e.g. `aiter` on a CUDA arch "
        "is `resolved` at this level. `file:line` is the refusing check (sglang/… in SGLang, "
        "sgl_kernel/… in sgl-kernel, flashinfer/… in FlashInfer). A FlashInfer wrapper SGLang builds "
        "with `backend=` is followed through FlashInfer's own dispatch to the family's module getter "
        "(a family refused on the device shows at FlashInfer's line); what the compiled kernels "
        "support is not in the source. With speculative decoding, the worker SGLang builds for the "
        "algorithm (its dispatch, its constructor's asserts and the draft's attention backends, built "
        "with the same choice) is evaluated too: a backend that passes but whose worker SGLang refuses "
        "reads `unsupported (worker)` at the refusing line.",
        "",
    ]
    checked = ["## Cells checked by hand", "",
               "Each against the release's own code (and the sgl-kernel it pins), without speculative decoding unless one is named; the cell above must say the same.",
               ""] + [f"- {r} {a} {k} `{b}`: {what}" for r, a, k, b, what in CHECKED
                      if r in args.releases and a in args.archs] + [
                   f"- {r} {sp} {a} {k} `{b}`: {what}" for r, sp, a, k, b, what in CHECKED_SPEC
                   if r in args.releases and sp in args.specs and a in args.archs and k in kinds]
    args.output.write_text("\n".join(head) + "\n" + "\n\n".join(sections) + "\n\n" + "\n".join(checked) + "\n")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--releases", nargs="+", default=RELEASES)
    ap.add_argument("--archs", nargs="+", default=ARCHS)
    ap.add_argument("--models", nargs="+", default=list(MODELS), choices=list(MODELS))
    ap.add_argument("--specs", nargs="+", default=list(SPECS), choices=list(SPECS))
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("-o", "--output", type=Path, default=OUT)
    args = ap.parse_args()
    started = time.time()
    sections: list[str] = []
    kinds = [k for k in MODELS if k in args.models]
    for release in args.releases:
        for spec in args.specs:
            table: dict[str, dict[tuple[str, str], str]] = {}
            order: list[str] = []
            for arch in args.archs:
                for kind in kinds:
                    model = MODELS[kind]
                    algo = SPECS[spec].get(kind)
                    sets = [*MODEL_DEFAULT_SETS.get(model, ()), *([f"speculative_algorithm={algo}"] if algo else [])]
                    request = Request(source=f"sglang=={release}", arch=arch, model=model, sets=sets)
                    print(f"{release} {spec} {arch} {kind} ...", file=sys.stderr, flush=True)
                    try:
                        ex = explain(request, "attention_backend", jobs=args.jobs)
                    except AuditError as exc:
                        for name in order:
                            table[name][(arch, kind)] = f"unknown ({_clip(exc)})"
                        continue
                    for c in ex.choices:
                        if c.choice not in table:
                            table[c.choice] = {}
                            order.append(c.choice)
                        table[c.choice][(arch, kind)] = spec_cell(c, cell(c)) if algo else cell(c)
            cols = [(a, k) for a in args.archs for k in kinds]
            title = "no speculative decoding" if spec == "none" else " / ".join(
                f"{k} `{SPECS[spec][k]}`" for k in kinds if k in SPECS[spec])
            lines = [f"## SGLang {release}: {title}", "",
                     "| backend | " + " | ".join(f"{a} {k}" for a, k in cols) + " |",
                     "|---|" + "---|" * len(cols)]
            for name in order:
                lines.append(f"| `{name}` | " + " | ".join(table[name].get(c, "—") for c in cols) + " |")
            sections.append("\n".join(lines))
            write(args, kinds, sections, started)
    print(f"wrote {args.output}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
