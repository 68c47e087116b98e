"""How much of a resolution function summaries could save (issue 45): one evaluation of the
README's job (IR cached, result cache and kernel step off), instrumented.

A summary replays a call of an analysed function already evaluated with equal arguments. This
counts, per resolution, the interpreted steps (``Interpreter.steps``) spent in calls that
repeat an earlier call of the same function object with equal arguments -- plain data by
value, any other object by identity -- outermost repeats only (a repeat inside a repeat is
counted once). It is an upper bound: it ignores that the state such a call reads (an
instance's attributes, a module global, the runtime context) may have changed between the
two calls, which a summary would have to compare. ``--plain`` counts only calls whose
arguments are all plain hashable data (the subset a summary could key without comparing
objects). Module bodies' share of the steps is printed too.

    .venv/bin/python benchmarks/repeats.py --version 0.5.23 [--arch sm120] [--plain] [--top 20]
"""

from __future__ import annotations

import argparse
import collections
import time
from typing import Any


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--version", default="0.5.23")
    ap.add_argument("--arch", default="sm120")
    ap.add_argument("--model", default="qwen3.5-397b-a17b-nvfp4")
    ap.add_argument("--set", dest="sets", action="append",
                    default=None, help="default: the README's tp_size=8, NEXTN, no radix cache")
    ap.add_argument("--plain", action="store_true", help="only calls whose arguments are all plain data")
    ap.add_argument("--top", type=int, default=20)
    args = ap.parse_args()

    from sglang_audit.evaluate import interpreter as interp_mod
    from sglang_audit.evaluate.calls import memo_key
    from sglang_audit.frontend.parse import SourceCache
    from sglang_audit.resolve import pipeline
    from sglang_audit.resolve.resolver import Resolver

    sets = args.sets or ["tp_size=8", "speculative_algorithm=NEXTN", "disable_radix_cache=true"]
    req = pipeline.Request(source=f"sglang=={args.version}", arch=args.arch, model=args.model, sets=sets,
                           use_cache=False, flashinfer_source="none")
    cache = SourceCache(use_disk=True)
    target = pipeline.prepare(req, cache).target
    Resolver(target, cache).resolve()  # IR loaded, so the measured one evaluates only

    Interp = interp_mod.Interpreter
    interps: list[Any] = []
    seen: set[Any] = set()
    saved: collections.Counter[str] = collections.Counter()
    calls: collections.Counter[str] = collections.Counter()
    repeats: collections.Counter[str] = collections.Counter()
    inside = [0, 0]  # in a repeated call, in a module body
    module_steps = [0]
    real_init, real_call, real_body = Interp.__init__, Interp.call_function, Interp.run_module_body

    def key_of(func: Any, a: list[Any], kw: dict[str, Any]) -> tuple[Any, ...] | None:
        out: list[Any] = [id(func)]
        for v in [*a, *sorted(kw.items(), key=lambda x: x[0])]:
            k = memo_key([v])
            if k is None or any(part[0] == "id" for part in k if isinstance(part, tuple)):
                if args.plain:
                    return None
                k = ("obj", id(v))
            out.append(k)
        try:
            hash(tuple(out))
        except TypeError:
            return None
        return tuple(out)

    def init(self: Any, *a: Any, **kw: Any) -> None:
        real_init(self, *a, **kw)
        interps.append(self)

    def call_function(self: Any, func: Any, a: list[Any], kw: dict[str, Any]) -> Any:
        name = f"{func.module.file}:{func.qualname}"
        key = key_of(func, a, kw)
        repeat = key is not None and key in seen
        if key is not None:
            seen.add(key)
        calls[name] += 1
        if not repeat:
            return real_call(self, func, a, kw)
        repeats[name] += 1
        if inside[0]:
            return real_call(self, func, a, kw)
        inside[0] += 1
        start = self.steps
        try:
            return real_call(self, func, a, kw)
        finally:
            inside[0] -= 1
            saved[name] += self.steps - start

    def run_module_body(self: Any, *a: Any, **kw: Any) -> Any:
        if inside[1]:
            return real_body(self, *a, **kw)
        inside[1] += 1
        start = self.steps
        try:
            return real_body(self, *a, **kw)
        finally:
            inside[1] -= 1
            module_steps[0] += self.steps - start

    Interp.__init__ = init  # type: ignore[method-assign]
    Interp.call_function = call_function  # type: ignore[method-assign]
    Interp.run_module_body = run_module_body  # type: ignore[method-assign]
    t = time.process_time()
    Resolver(target, cache).resolve()
    cpu = time.process_time() - t  # instrumented: slower than a plain evaluation
    total = sum(i.steps for i in interps)
    bound = sum(saved.values())
    print(f"sglang {args.version} {args.arch}: {total} steps ({cpu:.2f} s CPU instrumented), module bodies "
          f"{module_steps[0]} ({100 * module_steps[0] / total:.0f}%)")
    print(f"steps in repeated calls ({'plain arguments' if args.plain else 'any arguments'}), upper bound: "
          f"{bound} ({100 * bound / total:.1f}%)")
    for name, steps in saved.most_common(args.top):
        print(f"{steps:8d} steps  {repeats[name]:5d}/{calls[name]:5d} calls repeated  {name}")


if __name__ == "__main__":
    main()
