#!/usr/bin/env python3
"""Plain UTF-8 prose for training the routing-study model (docs/routing-model.md), from text that
Debian packages ship: the Python 3.11 documentation (python3.11-doc, HTML), the Debian Reference and
the Debian Administrator's Handbook (debian-reference-en, debian-handbook, HTML; English only), the
fortune cookies of `fortunes`, the licence texts in /usr/share/common-licenses and the manual pages of
sections 5, 7 and 8 installed here (rendered by man-db at 80 columns).

  tools/make_prose_corpus.py --install OUTDIR   # apt-get installs the packages first (needs root)
  tools/make_prose_corpus.py OUTDIR             # converts what is installed

Writes OUTDIR/<source>/<page>.txt, one file per page (so that train_default_model.py's held-out split by
file hash samples whole pages), and OUTDIR/SOURCES (not .txt, so never trained on) with the package versions and file counts. HTML
becomes text through the standard library's html.parser: scripts, styles and navigation are dropped,
<pre> keeps its layout, other runs of whitespace become one space, block elements end a line.
"""
import argparse
import glob
import os
import re
import subprocess
import sys
from html.parser import HTMLParser

PACKAGES = ["python3.11-doc", "fortunes", "debian-reference-en", "debian-handbook", "man-db"]

SKIP_TAGS = {"script", "style", "head", "nav", "title"}
SKIP_CLASSES = {"related", "sphinxsidebar", "footer", "navheader", "navfooter", "headerlink", "toc",
                "mobile-nav", "breadcrumbs", "docnav", "legalnotice"}
BLOCK_TAGS = {"p", "div", "br", "li", "dt", "dd", "h1", "h2", "h3", "h4", "h5", "h6", "tr", "table", "pre",
              "blockquote", "section", "ul", "ol", "dl", "hr"}
VOID_TAGS = {"br", "hr", "img", "meta", "link", "input", "col", "area", "base", "wbr", "source"}


class TextOf(HTMLParser):
    """Visible text of one HTML page (navigation and code listings' line numbers aside)."""

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.out, self.stack, self.skip_depth, self.pre = [], [], 0, 0

    def handle_starttag(self, tag, attrs):
        if tag in VOID_TAGS:
            if tag in BLOCK_TAGS and not self.skip_depth:
                self.out.append("\n")
            return
        classes = set((dict(attrs).get("class") or "").split())
        skip = tag in SKIP_TAGS or bool(classes & SKIP_CLASSES) or dict(attrs).get("role") == "navigation"
        self.stack.append((tag, skip))
        if skip:
            self.skip_depth += 1
        if tag == "pre":
            self.pre += 1
        if tag in BLOCK_TAGS and not self.skip_depth:
            self.out.append("\n")

    def handle_endtag(self, tag):
        if tag in VOID_TAGS or not any(t == tag for t, _ in self.stack):
            return
        while self.stack:                      # close unclosed children too (HTML's optional end tags)
            t, skip = self.stack.pop()
            if skip:
                self.skip_depth -= 1
            if t == "pre":
                self.pre -= 1
            if t == tag:
                break
        if tag in BLOCK_TAGS and not self.skip_depth:
            self.out.append("\n")

    def handle_data(self, data):
        if self.skip_depth:
            return
        self.out.append(data if self.pre else re.sub(r"\s+", " ", data))

    def text(self):
        lines = [ln.rstrip() for ln in "".join(self.out).split("\n")]
        t = "\n".join(ln if ln.strip() else "" for ln in lines)
        return re.sub(r"\n{3,}", "\n\n", t).strip() + "\n"


def html_text(path):
    with open(path, "rb") as f:
        raw = f.read().decode("utf-8", errors="replace")
    p = TextOf()
    p.feed(raw)
    p.close()
    return p.text()


def write(outdir, source, name, text, counts):
    if len(text.strip()) < 200:                 # index stubs and empty pages carry nothing
        return
    d = os.path.join(outdir, source)
    os.makedirs(d, exist_ok=True)
    safe = re.sub(r"[^A-Za-z0-9._-]+", "_", name)
    with open(os.path.join(d, safe + ".txt"), "w", encoding="utf-8") as f:
        f.write(text)
    counts[source] = (counts.get(source, (0, 0))[0] + 1, counts.get(source, (0, 0))[1] + len(text.encode()))


def html_pages(root, pattern):
    return sorted(p for p in glob.glob(os.path.join(root, pattern), recursive=True)
                  if not os.path.basename(p).startswith(("genindex", "search", "py-modindex", "index-")))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("outdir")
    ap.add_argument("--install", action="store_true", help="apt-get install the packages first")
    args = ap.parse_args()
    if args.install:
        env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
        subprocess.run(["apt-get", "install", "-y", "--no-install-recommends"] + PACKAGES, check=True, env=env)
    counts = {}
    os.makedirs(args.outdir, exist_ok=True)

    for p in html_pages("/usr/share/doc/python3.11/html", "**/*.html"):
        rel = os.path.relpath(p, "/usr/share/doc/python3.11/html")
        if rel.startswith("_"):
            continue
        write(args.outdir, "python-doc", rel[:-5], html_text(p), counts)
    for p in html_pages("/usr/share/debian-reference", "*.en.html"):
        write(args.outdir, "debian-reference", os.path.basename(p)[:-8], html_text(p), counts)
    for p in html_pages("/usr/share/doc/debian-handbook/html/en-US", "*.html"):
        write(args.outdir, "debian-handbook", os.path.basename(p)[:-5], html_text(p), counts)
    for p in sorted(glob.glob("/usr/share/games/fortunes/*")):
        if p.endswith((".dat", ".u8")) or os.path.islink(p) or not os.path.isfile(p):
            continue
        with open(p, "rb") as f:
            t = f.read().decode("utf-8", errors="replace")
        write(args.outdir, "fortunes", os.path.basename(p), re.sub(r"(?m)^%\n", "\n", t), counts)
    seen = set()
    menv = dict(os.environ, MANWIDTH="80", LC_ALL="C.UTF-8", MAN_KEEP_FORMATTING="")
    for p in sorted(glob.glob("/usr/share/man/man[578]/*")):
        real = os.path.realpath(p)
        if real in seen or not os.path.isfile(real):
            continue
        seen.add(real)
        page = subprocess.run(["man", "-l", real], capture_output=True, env=menv).stdout
        text = subprocess.run(["col", "-bx"], input=page, capture_output=True).stdout.decode("utf-8", "replace")
        write(args.outdir, "man", os.path.basename(p).removesuffix(".gz"), text, counts)
    for p in sorted(glob.glob("/usr/share/common-licenses/*")):
        real = os.path.realpath(p)
        if real in seen or not os.path.isfile(real):
            continue
        seen.add(real)
        with open(real, "rb") as f:
            write(args.outdir, "common-licenses", os.path.basename(p), f.read().decode("utf-8", errors="replace"),
                  counts)

    versions = subprocess.run(["dpkg-query", "-W", "-f", "${Package} ${Version}\n"] + PACKAGES + ["base-files"],
                              capture_output=True, text=True).stdout
    with open(os.path.join(args.outdir, "SOURCES"), "w") as f:
        f.write("Debian packages (dpkg-query):\n" + versions + "\nsource: files, UTF-8 bytes\n")
        for s, (n, b) in sorted(counts.items()):
            f.write(f"{s}: {n}, {b}\n")
    for s, (n, b) in sorted(counts.items()):
        print(f"{s}: {n} files, {b / 1e6:.2f} MB")
    print(f"total: {sum(n for n, _ in counts.values())} files, {sum(b for _, b in counts.values()) / 1e6:.2f} MB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
