#!/usr/bin/env python3
"""The Linux type check of the Metal kernels (docs/macos-metal.md).

  check_msl.py --clang CLANG kernels   every kernels/metal/*.metal passes the subset's rules
                                        (below) and clang's C++14 type check through
                                        compat/msl_compat.hpp, warnings as errors
  check_msl.py --clang CLANG --embedded metal_source.cpp kernels
                                        the generated source the host compiles, as one unit
  check_msl.py --clang CLANG planted   every tests/metal/planted/*.metal is rejected, with the
                                        message its "// expect: REGEX" line names

Rules clang cannot see, checked on the text: no C-style casts to vector or address-space
pointer types, no function pointers, no recursion (a function naming itself in its body), no
simdgroup_matrix, and every kernel's [[buffer(i)]] indices 0, 1, 2... in parameter order
followed by the threadgroup pointer, the threadgroup position and the thread index (the
convention of metal_shared.h, which the emulator's binding by position relies on).
"""
import argparse
import pathlib
import re
import subprocess
import sys
import tempfile

ROOT = pathlib.Path(__file__).resolve().parents[2]
KERNELS = ROOT / "kernels" / "metal"
HERE = pathlib.Path(__file__).resolve().parent

VECTOR = r"(?:float|half|int|uint|short|ushort|char|uchar|bool)[234]"
RULES = [
    (re.compile(r"\(\s*" + VECTOR + r"\s*\)\s*[\w(]"), "C-style vector cast (write float4(x), not (float4)x)"),
    (re.compile(r"\(\s*(?:device|threadgroup|constant)\b[^()]*\*\s*\)\s*[\w(]"),
     "C-style address-space cast (use reinterpret_cast within one address space)"),
    (re.compile(r"\(\s*\*\s*\w*\s*\)\s*\("), "function pointer (not in the subset)"),
    (re.compile(r"\bsimdgroup_matrix\b"), "simdgroup_matrix (not in this version of the subset)"),
]


def strip_comments(text):
    text = re.sub(r"/\*.*?\*/", lambda m: "\n" * m.group(0).count("\n"), text, flags=re.S)
    return re.sub(r"//[^\n]*", "", text)


def enum_values():
    values = {}
    for name, value in re.findall(r"\b(k\w+)\s*=\s*(\d+)\b", (KERNELS / "metal_shared.h").read_text()):
        values[name] = int(value)
    return values


def body_after(text, start):
    """The brace-delimited body beginning at the first '{' at or after start."""
    open_at = text.index("{", start)
    depth = 0
    for i in range(open_at, len(text)):
        depth += {"{": 1, "}": -1}.get(text[i], 0)
        if depth == 0:
            return text[open_at:i + 1]
    return text[open_at:]


def lint(path, enums):
    problems = []
    text = strip_comments(path.read_text())
    lines = text.split("\n")
    for number, line in enumerate(lines, 1):
        for pattern, what in RULES:
            if pattern.search(line):
                problems.append(f"{path.name}:{number}: error: {what}")
    for m in re.finditer(r"\b(\w+)\s*\(([^;{}]*)\)\s*\{", text):
        name = m.group(1)
        if name in ("if", "for", "while", "switch", "return"):
            continue
        body = body_after(text, m.end() - 1)
        if re.search(r"\b" + re.escape(name) + r"\s*\(", body[1:]):
            line = text.count("\n", 0, m.start()) + 1
            problems.append(f"{path.name}:{line}: error: recursion: {name} calls itself")
    for m in re.finditer(r"\bkernel\s+void\s+(\w+)\s*\((.*?)\)\s*\{", text, flags=re.S):
        name, params = m.group(1), [p.strip() for p in m.group(2).split(",")]
        line = text.count("\n", 0, m.start()) + 1
        indices = []
        for p in params[:-3]:
            b = re.search(r"\[\[\s*buffer\(\s*(\w+)\s*\)\s*\]\]", p)
            if not b:
                problems.append(f"{path.name}:{line}: error: {name}: parameter '{p}' has no [[buffer(i)]]")
                continue
            token = b.group(1)
            indices.append(int(token) if token.isdigit() else enums.get(token, -1))
        if indices != list(range(len(indices))):
            problems.append(f"{path.name}:{line}: error: {name}: buffer indices {indices}, expected 0, 1, 2... in order")
        tail = params[-3:]
        if len(tail) != 3 or "[[threadgroup(" not in tail[0] or "threadgroup_position_in_grid" not in tail[1] or \
                "thread_index_in_threadgroup" not in tail[2]:
            problems.append(f"{path.name}:{line}: error: {name}: must end with the threadgroup pointer, "
                            "[[threadgroup_position_in_grid]] and [[thread_index_in_threadgroup]]")
    return problems


def prepare(directory, files):
    """Copies of the sources with [[threadgroup(N)]] renamed (threadgroup is a macro in C++)."""
    for f in list(KERNELS.glob("*.h")) + list(files):
        text = f.read_text().replace("[[threadgroup(", "[[msl_threadgroup_index(")
        (directory / f.name).write_text(text)


def type_check(clang, directory, path):
    command = [clang, "-std=c++14", "-fsyntax-only", "-DMSL_COMPAT_CHECK", "-Werror", "-Wall", "-Wno-unknown-attributes",
               "-Wno-keyword-macro", "-Wno-unused-parameter", "-Wno-unused-variable", "-I", str(HERE / "compat"), "-I",
               str(directory), "-x", "c++", str(directory / path.name)]
    result = subprocess.run(command, capture_output=True, text=True)
    return result.returncode, result.stdout + result.stderr


def check(clang, path, directory, enums):
    problems = lint(path, enums)
    code, output = type_check(clang, directory, path)
    return problems, code, output


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--clang", required=True)
    parser.add_argument("--embedded", help="kernels mode: type-check only this generated metal_source.cpp, as one unit")
    parser.add_argument("mode", choices=["kernels", "planted"])
    args = parser.parse_args()
    enums = enum_values()
    failures = 0
    with tempfile.TemporaryDirectory() as tmp:
        directory = pathlib.Path(tmp)
        if args.embedded:  # the concatenation newLibraryWithSource compiles (cmake/metal_embed.cmake)
            text = pathlib.Path(args.embedded).read_text()
            source = text[text.index('R"msl(') + 6:text.rindex(')msl"')]
            unit = directory / "embedded.metal"
            unit.write_text(source.replace("[[threadgroup(", "[[msl_threadgroup_index("))
            code, output = type_check(args.clang, directory, unit)
            kernels = len(re.findall(r"\bkernel\s+void\s+\w+", source))
            print(output + f"{'ok  ' if code == 0 else 'FAIL'} the embedded source ({kernels} kernels) as one unit")
            return 0 if code == 0 and kernels > 0 else 1
        if args.mode == "kernels":
            files = sorted(KERNELS.glob("*.metal"))
            prepare(directory, files)
            for f in files:
                problems, code, output = check(args.clang, f, directory, enums)
                ok = not problems and code == 0
                print(f"{'ok  ' if ok else 'FAIL'} {f.name}")
                if not ok:
                    failures += 1
                    print("\n".join(problems) + output)
            for h in sorted(KERNELS.glob("*.h")):  # the headers: the rules (their code is type-checked through the kernels)
                problems = lint(h, enums)
                print(f"{'ok  ' if not problems else 'FAIL'} {h.name}")
                failures += bool(problems)
                if problems:
                    print("\n".join(problems))
            print(f"{len(files) - failures} of {len(files)} Metal sources pass the subset's rules and the type check"
                  f" ({'and' if failures == 0 else 'not all'} headers pass the rules)")
        else:
            files = sorted((HERE / "planted").glob("*.metal"))
            prepare(directory, files)
            for f in files:
                expect = re.search(r"//\s*expect:\s*(.+)", f.read_text())
                if not expect:
                    print(f"FAIL {f.name}: no '// expect: REGEX' line")
                    failures += 1
                    continue
                problems, code, output = check(args.clang, f, directory, enums)
                report = "\n".join(problems) + "\n" + output
                rejected = bool(problems) or code != 0
                matched = re.search(expect.group(1).strip(), report) is not None
                print(f"{'ok  ' if rejected and matched else 'FAIL'} {f.name}: "
                      f"{'rejected' if rejected else 'ACCEPTED'}, expected /{expect.group(1).strip()}/")
                if not (rejected and matched):
                    failures += 1
                    print(report)
            print(f"{len(files) - failures} of {len(files)} planted errors rejected as expected")
        if not files:
            print("no sources found")
            return 1
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
