"""Lines of code of C and Python files, counted the same way for both: a line counts when
it holds something other than white space and comments. C: // comments and /* */ blocks
(a line with code beside a comment counts). Python: # comments, and string literals that
stand alone as statements (docstrings, license blocks in quotes).

    python3 scripts/count_loc.py FILE... prints each file's count and the total
"""
import ast
import io
import sys
import tokenize


def c_lines(text):
    count, in_block = 0, False
    for line in text.splitlines():
        code, i = [], 0
        while i < len(line):
            if in_block:
                end = line.find("*/", i)
                if end < 0:
                    i = len(line)
                else:
                    in_block, i = False, end + 2
            elif line.startswith("/*", i):
                in_block, i = True, i + 2
            elif line.startswith("//", i):
                break
            else:
                code.append(line[i])
                i += 1
        count += bool("".join(code).strip())
    return count


def python_lines(text):
    skip = set()
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str):
            skip.update(range(node.lineno, node.end_lineno + 1))
    code = set()
    for tok in tokenize.generate_tokens(io.StringIO(text).readline):
        if tok.type in (tokenize.COMMENT, tokenize.NL, tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT,
                        tokenize.ENDMARKER):
            continue
        code.update(n for n in range(tok.start[0], tok.end[0] + 1) if n not in skip)
    return len(code)


def main(paths):
    total = 0
    for path in paths:
        with open(path, encoding="utf-8") as f:
            text = f.read()
        n = python_lines(text) if path.endswith(".py") else c_lines(text)
        total += n
        print(f"{n:6d}  {path}")
    if len(paths) > 1:
        print(f"{total:6d}  total")


if __name__ == "__main__":
    main(sys.argv[1:])
