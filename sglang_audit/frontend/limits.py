"""A cheap pre-parse scan that refuses sources libcst cannot parse safely.

libcst's native parser recurses on the C stack once per nesting level: about 2,000
nested brackets (or 10,000 chained unary operators, ``elif`` branches, ...) overflow
it and kill the process with SIGSEGV, which no ``except`` can catch.  It is also
quadratic on long operator chains (a 5,000-term ``1+1+...`` takes ~40 s).  So before a
file is handed to libcst, one regex pass over its text estimates, per statement:

* bracket depth (``([{``), refused above CPython's own limit of 200 ("too many nested
  parentheses": such a file could not be imported by SGLang either);
* expression depth: the tokens of the current comma-separated segment at each open
  bracket level, summed; a chain of operators, prefixes or calls deepens the tree by
  about one level per token;
* the length of an ``if``/``elif`` chain (libcst nests each ``elif`` in the previous
  ``orelse``).

Statement nesting by indentation needs no check: libcst's tokenizer stops at 100
levels.  Real SGLang releases stay far below every limit (0.4.6-0.5.23: bracket depth
≤ 7, expression depth ≤ 105, elif chains ≤ 25); the scan costs ~5% of a parse.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import cast

MAX_TEXT = 240  # guard/assignment text kept as evidence is truncated to this


class ParseFailure(Exception):
    """A file could not be read or parsed; ``message`` names file and line."""

    def __init__(self, message: str, line: int | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.line = line


MAX_BRACKET_DEPTH = 200
MAX_EXPR_DEPTH = 1000
MAX_ELIF_CHAIN = 1000


class TooComplex(Exception):
    """The source exceeds a limit; ``line`` is where (1-based)."""

    def __init__(self, message: str, line: int) -> None:
        super().__init__(message)
        self.message = message
        self.line = line


# Strings are matched whole so brackets and operators inside them do not count; an
# unterminated one runs to the end of its line (or of the file, for a triple quote).
_STRING_BODY = (
    r"'''[^'\\]*(?:(?:\\.|'(?!''))[^'\\]*)*(?:'''|\Z)"
    r'|"""[^"\\]*(?:(?:\\.|"(?!""))[^"\\]*)*(?:"""|\Z)'
    r"|'[^'\\\r\n]*(?:\\.[^'\\\r\n]*)*'?"
    r'|"[^"\\\r\n]*(?:\\.[^"\\\r\n]*)*"?'
)
_TOKEN = re.compile(
    r"[ \t\f]*(?:\\\r?\n[ \t\f]*)*"  # blanks and backslash continuations
    r"(?:(?P<nl>\r\n|\r|\n)"
    r"|(?P<comment>\#[^\r\n]*)"
    r"|(?P<str>(?P<prefix>[rRbBuUfFtT]{1,3})?(?:" + _STRING_BODY + r"))"
    r"|(?P<open>[(\[{])|(?P<close>[)\]}])|(?P<sep>[,;])"
    r"|(?P<word>\w+)|(?P<op>[^\s\w]))",
    re.DOTALL,
)
_FIELD_MARK = re.compile(r"\{\{|\}\}|[{}]")


def check_source(text: str) -> None:
    """Raise ``TooComplex`` if ``text`` is nested beyond what the parser can take."""
    _Scan().run(text, 1, 0, 0)


class _Scan:
    def run(self, text: str, line: int, depth0: int, weight0: int) -> None:
        if depth0 > MAX_BRACKET_DEPTH:  # f-strings nested in f-strings
            raise TooComplex(f"brackets nested more than {MAX_BRACKET_DEPTH} deep", line)
        # stack[i]: tokens so far in the current comma-separated segment at bracket level i
        stack = [0]
        weight = weight0  # sum(stack) + the enclosing fragment's weight
        statement_start = True
        line_start = 0
        elif_runs: dict[int, int] = {}  # indentation -> elif branches so far in this chain
        for m in _TOKEN.finditer(text):
            kind = cast(str, m.lastgroup)  # every alternative of _TOKEN is a named group
            if kind == "nl":
                line += 1
                line_start = m.end()
                if len(stack) == 1:
                    stack[0] = 0
                    weight = weight0
                    statement_start = True
                continue
            if kind == "comment":
                continue
            if kind == "prefix":  # the last group to match inside a prefixed string
                kind = "str"
            if statement_start:
                statement_start = False
                self._elif(m, kind, line, line_start, elif_runs)
            if kind == "open":
                stack[-1] += 1
                weight += 1
                stack.append(0)
                if depth0 + len(stack) - 1 > MAX_BRACKET_DEPTH:
                    raise TooComplex(f"brackets nested more than {MAX_BRACKET_DEPTH} deep", line)
            elif kind == "close":
                if len(stack) > 1:  # an unmatched close is the parser's to report
                    weight -= stack.pop()
            elif kind == "sep":
                if m.group("sep") == ";" and len(stack) == 1:
                    stack[0] = 0
                    weight = weight0
                    statement_start = True
                else:
                    weight -= stack[-1]
                    stack[-1] = 0
            else:
                stack[-1] += 1
                weight += 1
                if kind == "str":
                    token = m.group("str")
                    prefix = (m.group("prefix") or "").lower()
                    if "f" in prefix or "t" in prefix:
                        for field in _fields(token[len(prefix):]):
                            # a replacement field is one bracket level deeper
                            self.run(field, line, depth0 + len(stack), weight)
                    line += token.count("\n") + (token.count("\r") if "\n" not in token else 0)
            if weight > MAX_EXPR_DEPTH:
                raise TooComplex(f"expression nested more than {MAX_EXPR_DEPTH} levels deep", line)

    @staticmethod
    def _elif(m: re.Match[str], kind: str, line: int, line_start: int, runs: dict[int, int]) -> None:
        indent = m.start(kind) - line_start
        for deeper in [k for k in runs if k > indent]:
            del runs[deeper]
        if kind == "word" and m.group("word") == "elif":
            runs[indent] = runs.get(indent, 0) + 1
            if runs[indent] > MAX_ELIF_CHAIN:
                raise TooComplex(f"more than {MAX_ELIF_CHAIN} elif branches in one if", line)
        else:
            runs[indent] = 0


def _fields(literal: str) -> Iterator[str]:
    """The replacement-field texts of an f-string literal (quotes included, harmless)."""
    depth = 0
    start = 0
    for m in _FIELD_MARK.finditer(literal):
        mark = m.group()
        if depth == 0:
            if mark == "{":
                depth = 1
                start = m.end()
            continue  # "{{", "}}" and a stray "}" are literal text
        depth += {"{": 1, "}": -1, "{{": 2, "}}": -2}[mark]
        if depth <= 0:
            yield literal[start:m.start()]
            depth = 0
    if depth > 0:
        yield literal[start:]
