#!/usr/bin/env python3
"""Draws a Chrome trace (as `tandem train --trace FILE` writes it) as an SVG timeline.

One row per track in the viewers' order, one box per slice coloured by its op (F, B, W, STEP,
SYNC; loader and coordinator slices in their own colours), the flow arrows from producer to
consumer, and a time axis in milliseconds. A window (--from-ms/--to-ms) picks a few steps out
of a long run. Python's standard library only.

    scripts/trace_to_svg.py /tmp/t.json -o docs/img/trace-1f1b.svg --from-ms 500 --to-ms 560
"""
import argparse
import html
import json
import math
import os
import sys

COLOURS = {
    "F": "#4e79a7",
    "B": "#59a14f",
    "W": "#b07aa1",
    "STEP": "#555555",
    "SYNC": "#f28e2b",
    "loader": "#76b7b2",
    "coordinator": "#e15759",
}
LABEL_WIDTH = 230
ROW = 30
BOX = 22
TOP = 34
AXIS = 34
RIGHT = 20


def tick_step(span):
    """1, 2 or 5 times a power of ten giving about ten ticks."""
    if span <= 0:
        return 1.0
    raw = span / 10
    power = 10 ** math.floor(math.log10(raw))
    for m in (1, 2, 5):
        if raw <= m * power:
            return m * power
    return 10 * power


def colour(event):
    cat = event.get("cat", "")
    if cat in COLOURS:
        return COLOURS[cat]
    op = event.get("args", {}).get("op")
    if op in COLOURS:
        return COLOURS[op]
    name = event.get("name", "")
    for key in ("STEP", "SYNC", "F", "B", "W"):
        if name.startswith(key):
            return COLOURS[key]
    return "#999999"


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("trace", help="Chrome trace JSON")
    ap.add_argument("-o", "--output", required=True, help="SVG to write")
    ap.add_argument("--from-ms", type=float, default=None, help="window start (ms)")
    ap.add_argument("--to-ms", type=float, default=None, help="window end (ms)")
    ap.add_argument("--width", type=float, default=1100, help="timeline width in pixels")
    ap.add_argument("--no-flows", action="store_true", help="leave out the arrows")
    args = ap.parse_args()

    try:
        with open(args.trace) as f:
            trace = json.load(f)
    except (OSError, ValueError) as e:
        sys.exit(f"trace_to_svg: {args.trace}: {e}")
    events = trace.get("traceEvents") if isinstance(trace, dict) else trace
    if not isinstance(events, list):
        sys.exit(f"trace_to_svg: {args.trace}: no traceEvents")

    names, order = {}, {}
    slices, flows = [], {}
    for e in events:
        ph = e.get("ph")
        tid = e.get("tid")
        if ph == "M" and e.get("name") == "thread_name":
            names[tid] = e["args"]["name"]
        elif ph == "M" and e.get("name") == "thread_sort_index":
            order[tid] = e["args"]["sort_index"]
        elif ph == "X":
            slices.append(e)
        elif ph in ("s", "f"):
            flows.setdefault(e["id"], {})[ph] = e
    if not slices:
        sys.exit(f"trace_to_svg: {args.trace}: no slices")
    tracks = sorted({e["tid"] for e in slices} | set(names),
                    key=lambda t: (order.get(t, 1 << 30), t))
    row = {t: i for i, t in enumerate(tracks)}

    t0 = args.from_ms * 1000 if args.from_ms is not None else min(e["ts"] for e in slices)
    t1 = (args.to_ms * 1000 if args.to_ms is not None
          else max(e["ts"] + e["dur"] for e in slices))
    if t1 <= t0:
        sys.exit("trace_to_svg: the window is empty")
    scale = args.width / (t1 - t0)  # pixels per microsecond

    def x(ts):
        return LABEL_WIDTH + (min(max(ts, t0), t1) - t0) * scale

    height = TOP + len(tracks) * ROW + AXIS
    width = LABEL_WIDTH + args.width + RIGHT
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width:.0f}" height="{height:.0f}" '
        f'viewBox="0 0 {width:.0f} {height:.0f}" font-family="sans-serif" font-size="11">',
        '<defs><marker id="arrow" viewBox="0 0 10 10" refX="10" refY="5" markerWidth="6" '
        'markerHeight="6" orient="auto-start-reverse"><path d="M 0 0 L 10 5 L 0 10 z" '
        'fill="#333333"/></marker></defs>',
        f'<rect width="{width:.0f}" height="{height:.0f}" fill="#ffffff"/>',
        f'<text x="8" y="18" font-size="13">{html.escape(os.path.basename(args.trace))}: '
        f'{(t0 - min(e["ts"] for e in slices)) / 1000:.1f} to '
        f'{(t1 - min(e["ts"] for e in slices)) / 1000:.1f} ms</text>',
    ]
    for t in tracks:
        y = TOP + row[t] * ROW
        out.append(f'<rect x="0" y="{y - 3}" width="{width:.0f}" height="{ROW}" '
                   f'fill="{"#f4f4f4" if row[t] % 2 else "#ffffff"}"/>')
        out.append(f'<text x="6" y="{y + BOX * 0.7:.1f}">'
                   f'{html.escape(str(names.get(t, t)))}</text>')
    for e in slices:
        if e["ts"] + e["dur"] < t0 or e["ts"] > t1:
            continue
        x0, x1 = x(e["ts"]), x(e["ts"] + e["dur"])
        w = max(x1 - x0, 0.8)
        y = TOP + row[e["tid"]] * ROW
        name = html.escape(e.get("name", ""))
        out.append(f'<rect x="{x0:.2f}" y="{y}" width="{w:.2f}" height="{BOX}" '
                   f'fill="{colour(e)}" stroke="#ffffff" stroke-width="0.5">'
                   f'<title>{name} {e["dur"]:.1f} us</title></rect>')
        if w >= 6.5 * len(name) + 4:
            out.append(f'<text x="{x0 + w / 2:.2f}" y="{y + BOX * 0.68:.1f}" '
                       f'text-anchor="middle" fill="#ffffff">{name}</text>')
    if not args.no_flows:
        for f in flows.values():
            s, e = f.get("s"), f.get("f")
            # Only arrows that start and end inside the window: a clipped one would point at
            # the window's edge rather than at a slice.
            if s is None or e is None or s["ts"] < t0 or e["ts"] > t1:
                continue
            if s["tid"] not in row or e["tid"] not in row:
                continue
            ys = TOP + row[s["tid"]] * ROW + BOX / 2
            ye = TOP + row[e["tid"]] * ROW + BOX / 2
            out.append(f'<line x1="{x(s["ts"]):.2f}" y1="{ys:.1f}" x2="{x(e["ts"]):.2f}" '
                       f'y2="{ye:.1f}" stroke="#333333" stroke-width="0.7" '
                       f'stroke-opacity="0.7" marker-end="url(#arrow)"/>')
    axis_y = TOP + len(tracks) * ROW + 4
    out.append(f'<line x1="{LABEL_WIDTH}" y1="{axis_y}" x2="{LABEL_WIDTH + args.width}" '
               f'y2="{axis_y}" stroke="#000000"/>')
    step = tick_step((t1 - t0) / 1000)
    base = min(e["ts"] for e in slices)
    first = math.ceil((t0 - base) / 1000 / step) * step
    t = first
    while t * 1000 + base <= t1 + 1e-6:
        px = x(t * 1000 + base)
        out.append(f'<line x1="{px:.2f}" y1="{axis_y}" x2="{px:.2f}" y2="{axis_y + 4}" '
                   f'stroke="#000000"/>')
        out.append(f'<text x="{px:.2f}" y="{axis_y + 16}" text-anchor="middle">'
                   f'{t:g} ms</text>')
        t += step
    out.append("</svg>")
    with open(args.output, "w") as f:
        f.write("\n".join(out) + "\n")


if __name__ == "__main__":
    main()
