#!/usr/bin/env python3
"""Fails on a function (or a lambda outside a function) longer than LIMIT lines in sim/ (ctest `function_length`).

A brace-matching scan, not a parser: comments, string and character literals and preprocessor lines are blanked
out, then every `{` whose preceding text ends like a function head (`...)`, `...) const`, `...) override`,
`... -> Type`, a constructor's initializer list, a lambda's `]`) and does not start with a control keyword opens a
function; its length is the lines from that `{` to the matching `}`. Functions inside functions (lambdas) count as
part of the outer one. Exit status 1 with one line per long function ("file:line: name: N lines"), or per stale
entry of ALLOWED; 0 otherwise. Extend: an exception is one entry in ALLOWED with its reason; the goal is none.
"""
import pathlib
import re
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
LIMIT = 150
# (file, function name): why it may be longer. An entry that no longer matches a long function fails the check.
ALLOWED = {
    # The field table: one line per scenario field (path, type, default, range, doc); splitting it would scatter the
    # single source of every field.
    ("sim/config/run_config.cpp", "visit_fields"): "the config field table",
}
SOURCES = ("*.h", "*.cpp", "*.cu", "*.cuh")
CONTROL = re.compile(r"^(if|for|while|switch|catch|else|do|try|return|namespace|class|struct|union|enum)\b")
HEAD = re.compile(r"(\)\s*(const|override|final|noexcept|mutable|volatile|&&|&|\s)*(->\s*[\w:<>,&*\s]+)?|\])\s*$")


def blank(text):
    """text with comments, literals and preprocessor lines replaced by spaces (newlines kept)."""
    out = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            out.append(" " * (j - i))
            i = j
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            out.append(re.sub(r"[^\n]", " ", text[i:j]))
            i = j
        elif c == 'R' and text.startswith('R"', i):
            m = re.match(r'R"([^(]*)\(', text[i:])
            end = text.find(")" + m.group(1) + '"', i) if m else -1
            j = n if end < 0 else end + len(m.group(1)) + 2
            out.append(re.sub(r"[^\n]", " ", text[i:j]))
            i = j
        elif c in "\"'":
            j = i + 1
            while j < n and text[j] != c and text[j] != "\n":
                j += 2 if text[j] == "\\" else 1
            out.append(" " * (min(j + 1, n) - i))
            i = j + 1
        elif c == "#" and (i == 0 or text[i - 1] == "\n" or text[:i].rstrip(" \t").endswith("\n")):
            j = i
            while True:  # a preprocessor line, with its continuations
                k = text.find("\n", j)
                k = n if k < 0 else k
                if k > j and text[k - 1] == "\\":
                    j = k + 1
                    continue
                break
            out.append(re.sub(r"[^\n]", " ", text[i:k]))
            i = k
        else:
            out.append(c)
            i += 1
    return "".join(out)


def name_of(head):
    """The function's name from its head: the identifier before the first top-level '(' (a lambda: 'lambda')."""
    head = head.strip()
    if head.endswith("]") or re.search(r"\]\s*\(", head) and "=" in head.split("(")[0]:
        m = re.search(r"(\w+)\s*=\s*\[", head)
        return f"lambda {m.group(1)}" if m else "lambda"
    m = re.match(r"([^(]*)\(", head)
    if not m:
        return head[:40]
    ident = re.findall(r"[\w:~]+", m.group(1))
    return ident[-1] if ident else head[:40]


def long_functions(path, text):
    code = blank(text)
    found = []
    depth = 0
    func_depth = None  # depth at which the current outermost function's body opened
    start = 0          # where the current statement's text begins
    stack = []
    for i, c in enumerate(code):
        if c == "{":
            head = code[start:i]
            is_func = False
            if func_depth is None:
                h = " ".join(head.split())
                if HEAD.search(h) and not CONTROL.match(h) and "=" not in h.split("(")[0].split("[")[0][-2:]:
                    is_func = True
            stack.append((is_func, i, " ".join(head.split())))
            if is_func:
                func_depth = depth
            depth += 1
            start = i + 1
        elif c == "}":
            depth -= 1
            if stack:
                is_func, open_i, head = stack.pop()
                if is_func:
                    func_depth = None
                    first = code.count("\n", 0, open_i) + 1
                    last = code.count("\n", 0, i) + 1
                    lines = last - first + 1
                    if lines > LIMIT:
                        found.append((first, name_of(head), lines))
            start = i + 1
        elif c == ";":
            start = i + 1
    return found


def main():
    problems = []
    used = set()
    for pattern in SOURCES:
        for file in sorted((ROOT / "sim").rglob(pattern)):
            rel = file.relative_to(ROOT).as_posix()
            for line, name, lines in long_functions(rel, file.read_text(errors="replace")):
                if (rel, name) in ALLOWED:
                    used.add((rel, name))
                    print(f"{rel}:{line}: {name}: {lines} lines (allowed: {ALLOWED[(rel, name)]})")
                    continue
                problems.append(f"{rel}:{line}: {name}: {lines} lines (limit {LIMIT}; split it, or name it in "
                                f"tools/check_function_length.py ALLOWED with the reason)")
    for key in sorted(set(ALLOWED) - used):
        problems.append(f"{key[0]}: {key[1]} is in ALLOWED but no longer over {LIMIT} lines: remove the entry")
    for p in problems:
        print(p)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
