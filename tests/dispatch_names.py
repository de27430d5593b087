#!/usr/bin/python3
"""Write the generated part of include/favor.h that FAVOR_DISPATCH needs (4.0).

The kernel section (FAVOR__PART 2) is compiled once per target under
FAVOR_DISPATCH. Every name it defines at file scope must then differ per target:
this script lists them and writes, between the BEGIN/END GENERATED NAMES lines,

  PART 1: FAVOR__API_LIST(X, XV), one entry per public function the section
          defines (XV for the void ones), then `#define favor__x FAVOR__N(favor__x)`
          for every favor__ identifier of the section that is not a macro there,
          and for the public functions;
  PART 3: `#undef` of every macro the section defines (run after each pass);
  PART 5: `#undef` of every name PART 1 renamed (run after the last pass).

Usage: dispatch_names.py [--check] [path/to/favor.h]
With --check it writes nothing and exits 1 when the header's block is not what
it would write (the ctest test dispatch_names).
"""
import re
import sys

BEGIN = "/* BEGIN GENERATED NAMES */"
END = "/* END GENERATED NAMES */"
SEC_BEGIN = "#if defined(FAVOR__PART) && FAVOR__PART == 2"
SEC_END = "#endif /* FAVOR__PART == 2: the kernel section */"


def strip(text):
    text = re.sub(r"/\*.*?\*/", " ", text, flags=re.S)
    text = re.sub(r"//[^\n]*", " ", text)
    return re.sub(r'"(\\.|[^"\\])*"', '""', text)


def split_params(params):
    out, depth, cur = [], 0, ""
    for ch in params:
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        if ch == "," and depth == 0:
            out.append(cur)
            cur = ""
        else:
            cur += ch
    out.append(cur)
    return [" ".join(p.split()) for p in out]


def generate(text):
    lines = text.split("\n")
    s = lines.index(SEC_BEGIN)
    e = lines.index(SEC_END)
    sec = strip("\n".join(lines[s:e]))
    api = strip("\n".join(lines[:s]))
    macros = sorted(set(re.findall(r"^\s*#\s*define\s+(\w+)", sec, flags=re.M)))
    idents = set(re.findall(r"\b(favor__\w+)", sec))
    # names made by ## in a macro of the section, from each use of that macro
    for m in re.finditer(r"^\s*#\s*define\s+(\w+)\(([^)]*)\)((?:[^\n]*\\\n)*[^\n]*)", sec,
                         flags=re.M):
        name, params, body = m.group(1), [p.strip() for p in m.group(2).split(",")], m.group(3)
        pastes = re.findall(r"(\w+)\s*##\s*(\w+)", body)
        if not pastes:
            continue
        for use in re.finditer(r"^%s\(" % name, sec, flags=re.M):
            depth, i, cur, args = 1, use.end(), "", []
            while depth:
                ch = sec[i]
                depth += ch == "("
                depth -= ch == ")"
                if (ch == "," and depth == 1) or depth == 0:
                    args.append(cur.strip())
                    cur = ""
                else:
                    cur += ch
                i += 1
            sub = dict(zip(params, args))
            for a, b in pastes:
                idents.add(sub.get(a, a) + sub.get(b, b))
    idents = {n for n in idents if n.startswith("favor__")}
    public = re.findall(r"^FAVOR__DEF\b[^(]*?\b(favor_[a-z]\w*)\s*\(", sec, flags=re.M)
    entries = []
    for m in re.finditer(r"^FAVOR_API\s+([^;{]*?)\b(favor_[a-z]\w*)\s*\(([^;{]*?)\)\s*;", api,
                         flags=re.M | re.S):
        ret, name, params = " ".join(m.group(1).split()), m.group(2), m.group(3)
        if name not in public:
            continue
        ps = split_params(params)
        if ps == ["void"]:
            args = []
        else:
            args = [re.search(r"(\w+)\s*(\[[^\]]*\])?$", p).group(1) for p in ps]
        entries.append((ret, name, ", ".join(ps), ", ".join(args)))
    missing = set(public) - {n for _, n, _, _ in entries}
    if missing:
        sys.exit("dispatch_names.py: no prototype for " + ", ".join(sorted(missing)))
    # names the rest of the file defines (4.0's table type) stay as they are
    rest = "\n".join(lines[:s] + lines[e:])
    rest = strip(rest[:rest.index(BEGIN)] + rest[rest.index(END):])
    outside = set(re.findall(r"\b(favor__\w+)", rest))
    renamed = sorted(idents - set(macros) - outside) + sorted(public)
    out = [BEGIN, "#if defined(FAVOR__PART) && FAVOR__PART == 1",
           "#define FAVOR__API_LIST(X, XV) \\"]
    for ret, name, params, args in entries:
        x = "XV" if ret == "void" else "X"
        out.append("    %s(%s, %s, (%s), (%s)) \\" % (x, ret, name, params, args))
    out[-1] = out[-1][:-2]
    out += ["#define %s FAVOR__N(%s)" % (n, n) for n in renamed]
    out += ["#undef FAVOR__PART", "#endif",
            "#if defined(FAVOR__PART) && FAVOR__PART == 3"]
    out += ["#undef %s" % n for n in macros + ["FAVOR_SIMD", "FAVOR__PASS_ISA"]
            if n != "FAVOR__PART"]
    out += ["#undef FAVOR__PART", "#endif",
            "#if defined(FAVOR__PART) && FAVOR__PART == 5"]
    out += ["#undef %s" % n for n in renamed]
    out += ["#undef FAVOR__PART", "#endif", END]
    b = text.index(BEGIN)
    f = text.index(END) + len(END)
    return text[:b] + "\n".join(out) + text[f:]


def main(argv):
    check = "--check" in argv
    paths = [a for a in argv if a != "--check"]
    path = paths[0] if paths else "include/favor.h"
    with open(path) as f:
        text = f.read()
    new = generate(text)
    if check:
        if new != text:
            print("%s: the generated names are out of date: run tests/dispatch_names.py" % path)
            return 1
        return 0
    if new != text:
        with open(path, "w") as f:
            f.write(new)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
