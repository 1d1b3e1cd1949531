#!/usr/bin/env python3
"""Draws the curves of `bench_convergence` (its PREFIX.json) as two SVG line plots: smoothed
training loss against minibatches (steps) and against wall seconds, one line per schedule,
with the chain's entropy rate and the target loss as dashed reference lines. Python's standard
library only.

    scripts/convergence_plot.py convergence.json -o docs/img/convergence [--ymax 2.2]

writes docs/img/convergence-steps.svg and docs/img/convergence-seconds.svg. Flush schedules
give the single-device curve up to float rounding, so their lines lie on top of each other:
each schedule has its own dash pattern and width so that every one stays visible.
"""
import argparse
import html
import json
import math
import re
import sys

# name -> (colour, dash pattern, stroke width); wider solid lines under narrower dashed ones.
STYLES = {
    "single-device": ("#000000", "", 5.0),
    "gpipe": ("#4e79a7", "10 6", 3.0),
    "1f1b": ("#59a14f", "4 4", 2.2),
    "umpipe": ("#c08a00", "2 6", 2.6),
    "pipedream": ("#e15759", "", 1.8),
    "pipedream-nostash": ("#f28e2b", "", 1.8),
    "pipedream-vsync": ("#b07aa1", "", 1.8),
    "2bw": ("#76b7b2", "", 1.8),
}
FALLBACK = ["#9c755f", "#ff9da7", "#bab0ac"]

WIDTH, HEIGHT = 900, 520
LEFT, RIGHT, TOP, BOTTOM = 70, 230, 40, 60


def tick_step(span, target=8):
    """1, 2 or 5 times a power of ten giving about `target` ticks."""
    if span <= 0:
        return 1.0
    raw = span / target
    power = 10 ** math.floor(math.log10(raw))
    for m in (1, 2, 5, 10):
        if raw <= m * power:
            return m * power
    return 10 * power


def ticks(lo, hi):
    step = tick_step(hi - lo)
    first = math.ceil(lo / step - 1e-9) * step
    out = []
    v = first
    while v <= hi + step * 1e-9:
        out.append(round(v, 10))
        v += step
    return out, step


def fmt(v, step):
    decimals = max(0, -math.floor(math.log10(step))) if step < 1 else 0
    return f"{v:.{decimals}f}"


def plot(doc, xkey, xlabel, title, ymin, ymax):
    schedules = [s for s in doc["schedules"] if "smoothed" in s]
    xmax = 0.0
    for s in schedules:
        xs = s["seconds"] if xkey == "seconds" else list(range(1, len(s["smoothed"]) + 1))
        xmax = max(xmax, max(x for x in xs if x is not None))
    # The axis ends on the first tick at or after the last point.
    xstep = tick_step(xmax)
    xmax = math.ceil(xmax / xstep - 1e-9) * xstep
    xt, xstep = ticks(0, xmax)
    yt, ystep = ticks(ymin, ymax)
    pw, ph = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM

    def px(x):
        return LEFT + pw * x / xmax

    def py(y):
        return TOP + ph * (1 - (y - ymin) / (ymax - ymin))

    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{HEIGHT}" '
        f'viewBox="0 0 {WIDTH} {HEIGHT}" font-family="sans-serif" font-size="12">',
        f'<rect width="{WIDTH}" height="{HEIGHT}" fill="white"/>',
        f'<clipPath id="plot"><rect x="{LEFT}" y="{TOP}" width="{pw}" height="{ph}"/></clipPath>',
        f'<text x="{LEFT + pw / 2}" y="22" text-anchor="middle" font-size="14">'
        f"{html.escape(title)}</text>",
    ]
    # Grid and ticks.
    for x in xt:
        out.append(f'<line x1="{px(x):.1f}" y1="{TOP}" x2="{px(x):.1f}" y2="{TOP + ph}" '
                   'stroke="#e6e6e6"/>')
        out.append(f'<line x1="{px(x):.1f}" y1="{TOP + ph}" x2="{px(x):.1f}" y2="{TOP + ph + 5}" '
                   'stroke="black"/>')
        out.append(f'<text x="{px(x):.1f}" y="{TOP + ph + 18}" text-anchor="middle">'
                   f"{fmt(x, xstep)}</text>")
    for y in yt:
        out.append(f'<line x1="{LEFT}" y1="{py(y):.1f}" x2="{LEFT + pw}" y2="{py(y):.1f}" '
                   'stroke="#e6e6e6"/>')
        out.append(f'<line x1="{LEFT - 5}" y1="{py(y):.1f}" x2="{LEFT}" y2="{py(y):.1f}" '
                   'stroke="black"/>')
        out.append(f'<text x="{LEFT - 8}" y="{py(y) + 4:.1f}" text-anchor="end">'
                   f"{fmt(y, ystep)}</text>")
    out.append(f'<rect x="{LEFT}" y="{TOP}" width="{pw}" height="{ph}" fill="none" '
               'stroke="black"/>')
    out.append(f'<text x="{LEFT + pw / 2}" y="{HEIGHT - 15}" text-anchor="middle">'
               f"{html.escape(xlabel)}</text>")
    out.append(f'<text transform="translate(18 {TOP + ph / 2}) rotate(-90)" '
               'text-anchor="middle">training loss (nats/token, moving average over '
               f'{doc["config"]["smooth"]} minibatches)</text>')
    # Reference lines: the best possible loss and the target of the table.
    refs = [(doc["entropy_rate"], "entropy rate", "#444444"),
            (doc["target"], "target", "#999999")]
    for y, label, colour in refs:
        if ymin <= y <= ymax:
            out.append(f'<line x1="{LEFT}" y1="{py(y):.1f}" x2="{LEFT + pw}" y2="{py(y):.1f}" '
                       f'stroke="{colour}" stroke-dasharray="2 3"/>')
    # Curves.
    out.append('<g clip-path="url(#plot)" fill="none" stroke-linejoin="round">')
    for i, s in enumerate(schedules):
        colour, dash, width = STYLES.get(s["name"], (FALLBACK[i % len(FALLBACK)], "", 1.8))
        pts = []
        for k, y in enumerate(s["smoothed"]):
            x = s["seconds"][k] if xkey == "seconds" else k + 1
            if x is None or y is None:
                continue
            pts.append(f"{px(x):.1f},{py(min(max(y, ymin - 1), ymax + 1)):.1f}")
        dash_attr = f' stroke-dasharray="{dash}"' if dash else ""
        out.append(f'<polyline points="{" ".join(pts)}" stroke="{colour}" '
                   f'stroke-width="{width}"{dash_attr}/>')
    out.append("</g>")
    # Legend, right of the plot.
    lx, ly = LEFT + pw + 15, TOP + 10
    out.append(f'<text x="{lx}" y="{ly}" font-weight="bold">schedule</text>')
    for i, s in enumerate(schedules):
        colour, dash, width = STYLES.get(s["name"], (FALLBACK[i % len(FALLBACK)], "", 1.8))
        y = ly + 22 * (i + 1)
        dash_attr = f' stroke-dasharray="{dash}"' if dash else ""
        out.append(f'<line x1="{lx}" y1="{y - 4}" x2="{lx + 36}" y2="{y - 4}" stroke="{colour}" '
                   f'stroke-width="{width}"{dash_attr}/>')
        label = s["name"]
        if s["name"] in ("gpipe", "1f1b", "umpipe"):
            label += " (flush)"
        out.append(f'<text x="{lx + 44}" y="{y}">{html.escape(label)}</text>')
    # The reference lines (named here: in the plot a label would cross the curves).
    for j, (yref, label, colour) in enumerate(refs):
        y = ly + 22 * (len(schedules) + 1 + j) + 6
        out.append(f'<line x1="{lx}" y1="{y - 4}" x2="{lx + 36}" y2="{y - 4}" stroke="{colour}" '
                   'stroke-dasharray="2 3"/>')
        out.append(f'<text x="{lx + 44}" y="{y}">{label} {yref:.3f}</text>')
    note_y = ly + 22 * (len(schedules) + 1 + len(refs)) + 12
    note = (["flush schedules lie on the", "single-device line"] if xkey == "steps" else
            ["flush schedules: the same losses", "as single-device, at other times"])
    for j, line in enumerate(note):
        out.append(f'<text x="{lx}" y="{note_y + 14 * j}" fill="#555555" font-size="11">'
                   f"{line}</text>")
    out.append("</svg>")
    return "\n".join(out) + "\n"


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("json", help="PREFIX.json written by bench_convergence")
    ap.add_argument("-o", "--out", default="convergence",
                    help="output prefix: PREFIX-steps.svg and PREFIX-seconds.svg")
    ap.add_argument("--ymin", type=float, default=None,
                    help="bottom of the loss axis (default: 0.1 below the entropy rate)")
    ap.add_argument("--ymax", type=float, default=2.2,
                    help="top of the loss axis; the first steps (near ln(vocab)) are cut off")
    args = ap.parse_args()
    with open(args.json) as f:
        doc = json.load(f)
    ymin = args.ymin if args.ymin is not None else math.floor(doc["entropy_rate"] * 10) / 10 - 0.1
    cfg = doc["config"]
    spec = dict(re.findall(r"(\w+)=(\w+)", cfg["model"]))
    what = (f'GPT ({spec.get("layers")} blocks, d_model {spec.get("d_model")}), '
            f'{cfg["stages"]} stages, minibatch {cfg["minibatch"]}, AdamW lr {cfg["lr"]:g}')
    for xkey, xlabel, name in (("steps", "minibatches (steps)", "steps"),
                               ("seconds", "wall seconds since the run started (2 shared cores)",
                                "seconds")):
        svg = plot(doc, xkey, xlabel, f"Loss against {name}: {what}", ymin, args.ymax)
        path = f"{args.out}-{name}.svg"
        with open(path, "w") as f:
            f.write(svg)
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
