#!/usr/bin/env python3
"""scripts/pipedream-graph-config: what it writes from a small graph, and hostile graph.txt
files refused with GRAPH:line (run by ctest as pipedream_graph_config)."""
import json
import os
import subprocess
import sys
import tempfile
import unittest

SCRIPT = os.path.join(os.path.dirname(__file__), "..", "..", "scripts", "pipedream-graph-config")

GOOD = """node1 -- Input0 -- forward_compute_time=0.000, backward_compute_time=0.000, activation_size=6400.0, parameter_size=0.000
node10 -- Conv2d(3, 8) -- forward_compute_time=2.000, backward_compute_time=3.000, activation_size=12800.0, parameter_size=512.000
node2 -- ReLU -- forward_compute_time=1.000, backward_compute_time=1.500, activation_size=[6400.0; 6400.0], parameter_size=0.000
node3 -- Add -- forward_compute_time=0.500, backward_compute_time=0.500, activation_size=640.0, parameter_size=64.000
node4 -- __getitem__ -- forward_compute_time=0.000, backward_compute_time=0.000, activation_size=4.0, parameter_size=0.000
\tnode1 -- node2
\tnode1 -- node10
\tnode2 -- node3
\tnode10 -- node3
\tnode3 -- node4
"""


def run(text, *extra):
    d = tempfile.mkdtemp()
    g = os.path.join(d, "graph.txt")
    with open(g, "w") as f:
        f.write(text)
    r = subprocess.run([sys.executable, SCRIPT, g, "--scale", "2", "--minibatch", "4",
                        "--model-out", os.path.join(d, "m.yaml"),
                        "--profile-out", os.path.join(d, "p.json"), *extra],
                       capture_output=True, text=True)
    return r, g, d


class PipedreamGraphConfig(unittest.TestCase):
    def test_writes_the_scaled_graph_in_tandems_order(self):
        r, _, d = run(GOOD)
        self.assertEqual(r.returncode, 0, r.stderr)
        p = json.load(open(os.path.join(d, "p.json")))
        # Input and __getitem__ dropped; node2 before node10 (ids numerically).
        self.assertEqual([l["name"].split()[0] for l in p["layers"]], ["node2", "node10", "node3"])
        self.assertEqual([l["inputs"] for l in p["layers"]], [[-1], [-1], [0, 1]])
        # 12800 bytes / (4 x scale 2 x 4 samples) = 400 features; 512 / (4 x 2) = 64 weights.
        self.assertEqual(p["layers"][1]["activation_bytes"], 4.0 * 400 * 4)
        self.assertEqual(p["layers"][1]["parameter_bytes"], 4.0 * 64)
        self.assertEqual(p["layers"][0]["activation_bytes"], 4.0 * 400 * 4)  # the list, summed
        self.assertEqual(p["minibatch"], 4)
        model = open(os.path.join(d, "m.yaml")).read()
        self.assertIn("input: {name: x, shape: [200]}", model)
        self.assertIn("{name: n2, layer: sim, inputs: [n0, n1], out: 20, params: 8}", model)

    def test_hostile_graphs_name_the_line(self):
        cases = [
            (GOOD.replace("forward_compute_time=2.000", "forward_compute_time=-2"), 2, "forward"),
            (GOOD.replace("forward_compute_time=2.000", "forward_compute_time=nan"), 2, "finite"),
            (GOOD.replace("activation_size=12800.0", "activation_size=lots"), 2, "activation"),
            (GOOD.replace("[6400.0; 6400.0]", "[6400.0; 6400.0"), 3, "unclosed"),
            (GOOD.replace("node3 -- Add", "node2 -- Add"), 4, "declared again"),
            (GOOD.replace("\tnode2 -- node3", "\tnode2 -- node9"), 8, "node9"),
            (GOOD.replace("\tnode2 -- node3", "\tnode2 -- node2"), 8, "itself"),
            (GOOD.replace("\tnode10 -- node3", "\tnode2 -- node3"), 9, "duplicate"),
            (GOOD + "\tnode3 -- node2\n", 3, "cycle"),
            (GOOD + "node9 -- X -- forward_compute_time=1\n", 11, "a node line after"),
            ("node1 -- garbage\n", 1, "expected"),
            ("\tnode1 -- node2 -- node3\n", 1, "expected an edge"),
        ]
        for text, line, word in cases:
            r, g, _ = run(text)
            self.assertNotEqual(r.returncode, 0, text)
            self.assertIn(f"{g}:{line}:", r.stderr, text)
            self.assertIn(word, r.stderr)
        r, g, _ = run("")
        self.assertIn("no nodes", r.stderr)
        r, _, _ = run(GOOD, "--scale", "0")
        self.assertIn("--scale", r.stderr)


if __name__ == "__main__":
    unittest.main()
