#!/usr/bin/env python3
"""PipeDream's VGG-16 profile (tests/planner/data/pipedream-vgg16.json, 40 PyTorch modules at
minibatch 128) as a Tandem profile of the zoo's vgg16 (22 layers: each ReLU, Size/View and
Dropout folded into the layer before it), scaled for scripts/bench-pipedream-vgg: times as
PipeDream profiled them, bytes those of the emulated model (width_mult 1/8, 125 classes,
224-pixel images, 16 samples), which are the paper's bytes / 64 (biases aside). Its
`minibatch` is 16, so a sim slice of 16 samples takes the times of PipeDream's 128.

    python3 scripts/vgg16_pipedream_profile.py > configs/bench/vgg16-pipedream-profile.json
"""
import json
import pathlib
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
SCALE = 64          # bytes: the paper's / SCALE
SAMPLES = 16        # the emulated minibatch (the paper's 128 / 8)
WIDTH = 8           # channels: the paper's / WIDTH
CLASSES = 125       # 1000 / 8: the last Linear scales as the others, by 1/64

# The zoo's vgg16 layers (models/zoo.cpp, dropout 0) and the PipeDream modules each covers.
CONVS = [64, 64, 0, 128, 128, 0, 256, 256, 256, 0, 512, 512, 512, 0, 512, 512, 512, 0]


def zoo_layers():
    """(name, parameter count, output elements per sample, PipeDream modules) per layer."""
    out, channels, side, first = [], 3, 224, 0
    for c in CONVS:
        if c == 0:
            side //= 2
            out.append(("maxpool2d", 0, channels * side * side, first, first + 1))
            first += 1
        else:
            c //= WIDTH
            out.append((f"conv2d({channels}->{c}, relu)", channels * c * 9 + c,
                        c * side * side, first, first + 2))
            channels, first = c, first + 2
    flat = channels * side * side
    out.append(("flatten", 0, flat, first, first + 2))  # Size, View
    hidden = 4096 // WIDTH
    out.append((f"linear({flat}->{hidden}, relu)", flat * hidden + hidden, hidden, 33, 36))
    out.append((f"linear({hidden}->{hidden}, relu)", hidden * hidden + hidden, hidden, 36, 39))
    out.append((f"linear({hidden}->{CLASSES})", hidden * CLASSES + CLASSES, CLASSES, 39, 40))
    return out


def main():
    ref = json.loads((ROOT / "tests/planner/data/pipedream-vgg16.json").read_text())
    modules = ref["profile"]["layers"]
    layers = []
    for i, (name, params, elements, a, b) in enumerate(zoo_layers()):
        group = modules[a:b]
        fwd = sum(m["forward_ms"] for m in group)
        bwd = sum(m["backward_ms"] for m in group)
        activation = 4.0 * elements * SAMPLES
        layers.append({
            "name": name,
            "forward_ms": round(fwd, 6),
            "backward_ms": round(bwd, 6),
            # Layer 0's input gradient is never computed: its whole backward is the weights'.
            "backward_weight_ms": round(bwd, 6) if i == 0 else 0.0,
            "activation_bytes": activation,
            "parameter_bytes": 4.0 * params,
            "memory_bytes": sum(m["activation_bytes"] for m in group) / SCALE,
        })
    assert [l for l in zoo_layers()][-1][4] == len(modules)
    profile = {"model": "vgg16 (PipeDream's profile, bytes / 64)",
               "device": "PipeDream's profiling GPU", "minibatch": SAMPLES, "layers": layers}
    json.dump(profile, sys.stdout, indent=1)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
