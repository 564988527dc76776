#!/usr/bin/env python3
"""Rejects GNU-only tool usage and bash-4 features in the shell scripts, so that they keep running
on macOS's /bin/bash 3.2 and BSD tools (the portable forms are in scripts/portable.sh).

  scripts/lint-portable.py [FILE...]      default: every *.sh under scripts/, k3-public-bench/, tests/
  scripts/lint-portable.py --planted FILE each line carrying `# expect: RULE` must raise exactly
                                          that rule, and no other line any (CTest: the lint works)

Comments and here-document bodies are not checked. A line that must keep a flagged form (the
fallback inside portable.sh itself) says why with `# lint-portable: ok (REASON)`. What a text
check cannot see: unset-variable errors that bash < 4.4 raises for "${empty_array[@]}" under
set -u, and behaviour differences of tools used in portable ways. Exit 1 on any finding.
"""
import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CMD = r"(?:^|[\s;&|(`])"  # start of a command word
RULES = [  # (id, pattern, advice)
    ("stat", CMD + r"stat\s+(?:-\w+\s+)*(?:-c|-f|--format|--printf)\b", "GNU and BSD stat flags differ: file_bytes (portable.sh)"),
    ("nproc", CMD + r"nproc\b", "no nproc on macOS: cpu_count (portable.sh)"),
    ("readlink-f", CMD + r"(?:readlink\s+-\w*f|realpath)\b", "readlink -f / realpath: $(cd DIR && pwd)"),
    ("sed-i", CMD + r"sed\s+(?:\S+\s+)*?(?:-i(?!\.)|--in-place)", "sed -i without a suffix differs on BSD: sed -i.bak ... && rm FILE.bak"),
    ("assoc-array", r"\b(?:declare|local|typeset)\s+-\w*A", "associative arrays are bash 4"),
    ("declare-ng", r"\b(?:declare|local|typeset)\s+-\w*[ng]\b", "declare -n / -g are bash 4.2+"),
    ("mapfile", CMD + r"(?:mapfile|readarray|coproc)\b", "mapfile, readarray, coproc are bash 4"),
    ("case-mod", r"\$\{[#!]?\w+(?:\[[^]]*\])?(?:,,?|\^\^?|@[QEPAaUuLK])\}", "${var,,} ${var^^} ${var@Q} are bash 4"),
    ("pipe-amp", r"\|&", "|& is bash 4: 2>&1 |"),
    ("append-amp", r"&>>", "&>> is bash 4: >> FILE 2>&1"),
    ("case-fallthrough", r";;&|;&(?:\s|$)", ";& and ;;& are bash 4"),
    ("negative-index", r"\$\{\w+\[-\d+\]\}", "negative array indices are bash 4.3"),
    ("test-v", r"\[\[\s+-v\s", "[[ -v ]] is bash 4.2"),
    ("wait-n", CMD + r"wait\s+-n\b", "wait -n is bash 4.3"),
    ("bash4-vars", r"\bBASHPID\b|\bEPOCH(?:REAL)?SECONDS\b", "BASHPID, EPOCHSECONDS are bash 4/5"),
    ("brace-range", r"\{0\d+\.\.|\{-?\d+\.\.-?\d+\.\.", "zero-padded or stepped brace ranges are bash 4"),
    ("printf-time", CMD + r"printf\s[^|;]*%\(", "printf %(...)T is bash 4.2"),
    ("timeout", CMD + r"timeout\s", "no timeout on macOS: with_timeout (portable.sh)"),
    ("date-ns", CMD + r"date\s[^|;]*%N", "date +%N is GNU-only"),
    ("date-d", CMD + r"date\s+(?:-\w+\s+)*-d\b", "date -d is GNU-only"),
    ("seq-s", CMD + r"seq\s+(?:-\w+\s+)*-s", "BSD seq -s may end with the separator: csv_range (portable.sh)"),
    ("grep-P", CMD + r"grep\s+(?:-\w+\s+)*-\w*P", "grep -P is GNU-only: grep -E"),
    ("tac", CMD + r"tac\b", "tac is GNU-only: awk '{l[NR] = $0} END {for (i = NR; i > 0; i--) print l[i]}'"),
    ("cp-t", CMD + r"cp\s+(?:-\w+\s+)*-\w*t\b", "cp -t is GNU-only"),
    ("df-output", CMD + r"df\s[^|;]*--output", "df --output is GNU-only: df -P"),
    ("find-printf", CMD + r"find\s[^|;]*-printf", "find -printf is GNU-only"),
]
HEREDOC = re.compile(r"(?<!<)<<-?\s*(['\"]?)([A-Za-z_]\w*)\1")  # not <<< (a here-string)


def code_of(line):
    """The line without its comment: a # that starts a word outside quotes."""
    quote, prev = None, " "
    for i, c in enumerate(line):
        if quote:
            if c == quote and (quote == "'" or prev != "\\"):
                quote = None
        elif c in "'\"":
            quote = c
        elif c == "#" and prev in " \t;|&(":
            return line[:i]
        prev = c
    return line


def findings(path):
    """(line number, rule id, advice, text) of every flagged line of the file."""
    out, terminator = [], None
    for number, line in enumerate(open(path, encoding="utf-8"), 1):
        line = line.rstrip("\n")
        if terminator:
            if line.strip() == terminator:
                terminator = None
            continue
        code = code_of(line)
        if number == 1 and line.startswith("#!") or "lint-portable: ok" in line:
            continue
        for rule, pattern, advice in RULES:
            if re.search(pattern, code):
                out.append((number, rule, advice, line.strip()))
        m = HEREDOC.search(code)
        if m:
            terminator = m.group(2)
    return out


def planted(path):
    """Checks that the lint raises exactly the rule each line of PATH expects."""
    expected = {}
    for number, line in enumerate(open(path, encoding="utf-8"), 1):
        m = re.search(r"# expect: ([\w-]+)", line)
        if m:
            expected[number] = m.group(1)
    got = {}
    for number, rule, _, _ in findings(path):
        got.setdefault(number, []).append(rule)
    bad = [f"{path}:{n}: expected {expected.get(n, 'nothing')}, got {', '.join(got.get(n, [])) or 'nothing'}"
           for n in sorted(set(expected) | set(got)) if got.get(n, []) != ([expected[n]] if n in expected else [])]
    missing = sorted({r for r, _, _ in RULES} - set(expected.values()))
    if missing:
        bad.append(f"{path}: no planted line for rule(s) {', '.join(missing)}")
    print("\n".join(bad) or f"lint-portable: all {len(expected)} planted lines flagged as expected, {len(RULES)} rules")
    return 1 if bad else 0


def main(argv):
    if argv[:1] == ["--planted"]:
        return planted(argv[1])
    files = argv or sorted(os.path.join(d, f) for top in ("scripts", "k3-public-bench", "tests")
                           for d, _, names in os.walk(os.path.join(ROOT, top)) for f in names if f.endswith(".sh"))
    problems = [(f, *x) for f in files for x in findings(f)]
    for f, number, rule, advice, text in problems:
        print(f"{os.path.relpath(f, ROOT)}:{number}: [{rule}] {advice}\n    {text}")
    print(f"lint-portable: {len(problems)} finding(s) in {len(files)} script(s)")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
