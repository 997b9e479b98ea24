#!/usr/bin/env python3
# Checks a `strata report` folder (docs/reports.md) as a browser and a reader
# would meet it, with the standard library only:
#   - index.html parses as HTML into a well-formed tree (every non-void element
#     closed in order, one html/head/body, a title and a charset);
#   - every figure of data/report.json (and every --expect id) is a <figure>
#     holding an inline <svg> with drawing elements and a non-empty caption,
#     and its SVG file exists and is referenced by report.md;
#   - nothing is loaded from outside: no script or stylesheet links, no
#     src/href/data pointing anywhere but the page itself or a data: URL, no
#     CSS url() or @import to outside, and no "http://" or "https://" anywhere
#     but in xmlns attributes (namespace names, never fetched);
#   - data/report.json is JSON and each data/*.csv has a header and is rectangular.
# Usage: check_report.py DIR [--expect fig-a,fig-b]. Exit 0 when all hold, 1
# with one line per failure otherwise.
import csv
import html.parser
import json
import os
import re
import sys

VOID = {"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "param",
        "source", "track", "wbr"}
DRAWING = {"path", "line", "polyline", "polygon", "rect", "circle", "ellipse", "text"}
LOADING = {"img", "image", "iframe", "embed", "object", "source", "audio", "video", "use",
           "script", "link", "track", "input", "frame"}
URL_ATTRS = {"src", "href", "xlink:href", "data", "poster", "srcset", "action", "background"}


def internal(url):
    url = url.strip()
    return url.startswith("#") or url.lower().startswith("data:")


def css_outside(text):
    """The url(...) and @import targets in CSS text that leave the page."""
    bad = []
    for m in re.finditer(r"url\(\s*(['\"]?)(.*?)\1\s*\)", text, re.I):
        if not internal(m.group(2)):
            bad.append("url(" + m.group(2) + ")")
    if re.search(r"@import", text, re.I):
        bad.append("@import")
    return bad


class Page(html.parser.HTMLParser):
    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.stack = []  # (tag, line)
        self.errors = []
        self.counts = {}
        self.has_charset = False
        self.title = ""
        self.figures = {}  # id -> {"svg": n, "drawing": n, "caption": text}
        self.figure = None  # the open figure's id
        self.in_caption = False
        self.in_title = False
        self.in_style = False
        self.in_svg = 0

    def where(self):
        return "index.html:%d" % self.getpos()[0]

    def check_attrs(self, tag, attrs):
        for name, value in attrs:
            value = value or ""
            name = name.lower()
            if name.startswith("xmlns"):
                continue
            if name in URL_ATTRS and value and not internal(value):
                self.errors.append("%s: <%s %s=\"%s\"> points outside the page"
                                   % (self.where(), tag, name, value))
            if name == "style":
                for b in css_outside(value):
                    self.errors.append("%s: style attribute loads %s" % (self.where(), b))
        if tag == "script" and any(n == "src" for n, _ in attrs):
            self.errors.append("%s: <script src> loads a script" % self.where())
        if tag == "link" and any(n == "href" for n, _ in attrs):
            self.errors.append("%s: <link href> loads a resource" % self.where())

    def open_tag(self, tag, attrs, closes):
        self.counts[tag] = self.counts.get(tag, 0) + 1
        self.check_attrs(tag, attrs)
        a = dict(attrs)
        if tag == "meta" and ("charset" in a or "charset=" in (a.get("content") or "")):
            self.has_charset = True
        if self.figure is not None:
            fig = self.figures[self.figure]
            if tag == "svg":
                fig["svg"] += 1
            if self.in_svg and tag in DRAWING:
                fig["drawing"] += 1
        if tag == "figure":
            fid = a.get("id", "")
            self.figures[fid] = {"svg": 0, "drawing": 0, "caption": ""}
            self.figure = fid
        if closes:
            return
        if tag == "svg":
            self.in_svg += 1
        if tag == "figcaption":
            self.in_caption = True
        if tag == "title" and not self.in_svg:
            self.in_title = True
        if tag == "style":
            self.in_style = True
        self.stack.append((tag, self.getpos()[0]))

    def handle_starttag(self, tag, attrs):
        # Inside SVG every element must be closed; HTML void elements need not.
        self.open_tag(tag, attrs, closes=(tag in VOID and not self.in_svg))

    def handle_startendtag(self, tag, attrs):
        self.open_tag(tag, attrs, closes=True)

    def handle_endtag(self, tag):
        if tag in VOID and not self.in_svg:
            return
        if not self.stack:
            self.errors.append("%s: stray </%s>" % (self.where(), tag))
            return
        top, line = self.stack[-1]
        if top != tag:
            self.errors.append("%s: </%s> closes <%s> opened on line %d"
                               % (self.where(), tag, top, line))
            # Recover: pop to the matching tag if there is one.
            for i in range(len(self.stack) - 1, -1, -1):
                if self.stack[i][0] == tag:
                    del self.stack[i:]
                    break
            return
        self.stack.pop()
        if tag == "svg":
            self.in_svg -= 1
        if tag == "figcaption":
            self.in_caption = False
        if tag == "figure":
            self.figure = None
        if tag == "title":
            self.in_title = False
        if tag == "style":
            self.in_style = False

    def handle_data(self, data):
        if self.in_caption and self.figure is not None:
            self.figures[self.figure]["caption"] += data
        if self.in_title:
            self.title += data
        if self.in_style:
            for b in css_outside(data):
                self.errors.append("%s: <style> loads %s" % (self.where(), b))


def main(argv):
    if len(argv) < 2 or argv[1].startswith("-"):
        print("usage: check_report.py DIR [--expect fig-a,fig-b]", file=sys.stderr)
        return 2
    root = argv[1]
    expect = []
    if len(argv) >= 4 and argv[2] == "--expect":
        expect = [e for e in argv[3].split(",") if e]
    failures = []
    index = os.path.join(root, "index.html")
    if not os.path.isfile(index):
        print("FAIL: no %s" % index)
        return 1
    text = open(index, encoding="utf-8").read()
    page = Page()
    page.feed(text)
    page.close()
    failures += page.errors
    for tag, line in page.stack:
        failures.append("index.html:%d: <%s> is never closed" % (line, tag))
    for tag in ("html", "head", "body"):
        if page.counts.get(tag, 0) != 1:
            failures.append("index.html: %d <%s> elements, expected 1" % (page.counts.get(tag, 0), tag))
    if not page.title.strip():
        failures.append("index.html: no <title>")
    if not page.has_charset:
        failures.append("index.html: no <meta charset>")
    # Belt and braces: http(s):// only as namespace names.
    stripped = re.sub(r"""\sxmlns(:\w+)?\s*=\s*(['"])[^'"]*\2""", " ", text)
    for m in re.finditer(r"https?://", stripped):
        line = stripped.count("\n", 0, m.start()) + 1
        failures.append("index.html:%d: '%s' outside an xmlns attribute"
                        % (line, stripped[m.start():m.start() + 60].split()[0]))

    report_json = os.path.join(root, "data", "report.json")
    figures = []
    try:
        figures = json.load(open(report_json, encoding="utf-8")).get("figures", [])
    except (OSError, ValueError) as e:
        failures.append("data/report.json: %s" % e)
    md = ""
    try:
        md = open(os.path.join(root, "report.md"), encoding="utf-8").read()
    except OSError as e:
        failures.append("report.md: %s" % e)
    wanted = [f.get("id", "") for f in figures] + expect
    for fid in wanted:
        fig = page.figures.get(fid)
        if fig is None:
            failures.append("index.html: no <figure id=\"%s\">" % fid)
            continue
        if fig["svg"] < 1 or fig["drawing"] < 1:
            failures.append("index.html: figure %s has no inline SVG drawing" % fid)
        if not fig["caption"].strip():
            failures.append("index.html: figure %s has no caption" % fid)
    for f in figures:
        path = os.path.join(root, f.get("file", ""))
        if not os.path.isfile(path) or os.path.getsize(path) == 0:
            failures.append("%s: missing or empty" % f.get("file"))
        if "(" + f.get("file", "?") + ")" not in md:
            failures.append("report.md does not show %s" % f.get("file"))

    data = os.path.join(root, "data")
    csvs = sorted(n for n in os.listdir(data) if n.endswith(".csv")) if os.path.isdir(data) else []
    if not csvs:
        failures.append("data/: no CSV files")
    for name in csvs:
        rows = list(csv.reader(open(os.path.join(data, name), newline="", encoding="utf-8")))
        # A table may have no rows (no link carries a byte at K = 1), never no header.
        if not rows or len(rows[0]) < 2:
            failures.append("data/%s: no header" % name)
            continue
        widths = {len(r) for r in rows}
        if len(widths) != 1:
            failures.append("data/%s: rows of %s fields" % (name, sorted(widths)))

    for f in failures:
        print("FAIL: " + f)
    if failures:
        return 1
    print("OK: %s: index.html well-formed, %d figures inline with captions, nothing loaded "
          "from outside, %d CSV files" % (root, len(set(wanted)), len(csvs)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
