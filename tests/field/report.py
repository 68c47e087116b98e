"""Print the field-corpus figures for docs/field.md: recall of in-scope failures, false alarms
on known-good deployments, and the out-of-scope list (`python tests/field/report.py`; downloads
the reported releases into the user cache dir like the real-release tests)."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from corpus import load_cases, run_case  # noqa: E402

from sglang_audit.source.locate import locate_source  # noqa: E402


def main() -> None:
    cases = load_cases()
    outs = [run_case(c, str(locate_source(f"sglang=={c.check_version}").package_dir)) for c in cases]
    failures = [o for o in outs if o.case.kind == "failure" and o.case.in_scope]
    # a known-good deployment out of scope (e.g. run from a model image, not a release) is listed,
    # not counted: the release's verdict cannot be held against it
    good = [o for o in outs if o.case.kind == "known_good" and o.case.in_scope]
    out_of_scope = [o for o in outs if not o.case.in_scope]
    warned = [o for o in failures if o.warned]
    print(f"cases {len(cases)}, threads {len({c.thread for c in cases})}")
    print(f"in-scope failures {len(failures)}, warned {len(warned)} -> recall {len(warned) / len(failures):.1%}")
    print(f"known-good {len(good)}, with an error finding {sum(bool(o.errors) for o in good)}")
    print(f"out of scope {len(out_of_scope)}")
    print()
    for o in outs:
        c = o.case
        found = ",".join(sorted({r for r, s in o.findings if s in ("error", "warning")})) or "-"
        verdict = ("out-of-scope" if not c.in_scope else "known-good" if c.kind == "known_good"
                   else "warned" if o.warned else "MISSED")
        print(f"| {c.thread} | {c.check_version} | {c.arch} | {verdict} | {','.join(c.expect_rules) or '-'} | {found} |")


if __name__ == "__main__":
    main()
