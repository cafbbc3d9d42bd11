"""tools/check_function_length.py (ctest `function_length`): the brace scan's line counts on sources built to a known
length, and the repository's sim/ within the limit. Extend: a construct the scan misreads is one more case here."""
import importlib.util
import subprocess
import sys

from tools_test_paths import REPO_ROOT

SPEC = importlib.util.spec_from_file_location("check_function_length", REPO_ROOT / "tools" / "check_function_length.py")
cfl = importlib.util.module_from_spec(SPEC)
SPEC.loader.exec_module(cfl)


def function(name, body_lines, head="int {name}(int x) {{"):
    """A function whose body spans body_lines lines from its '{' line to its '}' line inclusive."""
    inner = ["  x += 1;"] * (body_lines - 2)
    return "\n".join([head.format(name=name)] + inner + ["}"]) + "\n"


def lengths(text):
    return [(name, lines) for _, name, lines in cfl.long_functions("x.cpp", text)]


def test_the_limit_is_inclusive():
    at = function("at_limit", cfl.LIMIT)
    over = function("over_limit", cfl.LIMIT + 1)
    assert lengths(at) == []
    assert lengths(over) == [("over_limit", cfl.LIMIT + 1)]


def test_blocks_and_lambdas_inside_count_for_the_enclosing_function():
    inner = "\n".join(["  if (x > 0) {"] + ["    x -= 1;"] * 80 + ["  }", "  auto f = [&](int y) {"] +
                      ["    return y + x;"] * 80 + ["  };"])
    text = "int outer(int x) {\n" + inner + "\n  return x;\n}\n"
    # lines: the '{' line, 82 of the if block, 82 of the lambda, return, '}'
    assert lengths(text) == [("outer", 1 + 82 + 82 + 1 + 1)]


def test_member_functions_qualifiers_and_initializer_lists():
    cls = ("class A {\n public:\n" + function("short_one", 10, "  int {name}(int x) const override {{") +
           function("long_one", 200, "  A(int x) : x_(x), y_(x) {{") + "  int x_, y_;\n};\n")
    assert lengths(cls) == [("A", 200)]
    trailing = function("trail", 160, "auto {name}(int x) -> int {{")
    assert lengths(trailing) == [("trail", 160)]


def test_namespaces_classes_and_braces_in_comments_or_strings_are_not_functions():
    body = "\n".join(f"int f{i}(int x) {{ return x; }}" for i in range(200))
    text = ("namespace gs {\n// a comment with { and }\n/* { block { */\nconst char* s = \"{ not a brace\";\n"
            "struct Table {\n" + body + "\n};\n}  // namespace gs\n")
    assert lengths(text) == []


def test_sim_is_within_the_limit():
    r = subprocess.run([sys.executable, str(REPO_ROOT / "tools" / "check_function_length.py")], capture_output=True,
                       text=True)
    assert r.returncode == 0, r.stdout + r.stderr
