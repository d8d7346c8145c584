#!/usr/bin/env python3
"""Write the ONNX backend node test cases of the installed `onnx` package to a folder.

The PyPI onnx wheel carries no backend test data, but it carries the generators
(onnx.backend.test.case.node): this script runs them and writes every node case in the layout of
ONNX's repository and of Debian's libonnx-testdata, which the executor's conformance test reads:

    OUT/node/<case>/model.onnx
    OUT/node/<case>/test_data_set_<i>/input_<j>.pb, output_<j>.pb

plus OUT/ONNX_VERSION (the onnx version the cases come from). Run it with the project's Python
environment (scripts/install-deps.sh makes it):

    PY=$(scripts/install-deps.sh --print-venv)/bin/python
    $PY samples/onnx_node_cases.py --out DIR            # skips if DIR holds this onnx's cases
    $PY samples/onnx_node_cases.py --out DIR --force    # regenerates

Deterministic: numpy's global generator is seeded before the generators run (several of them
draw random inputs unseeded), so two runs write the same bytes. Nothing is downloaded. The cases
are written into a temporary folder inside OUT and renamed into place at the end, so an
interrupted run never leaves a partial set behind.
"""

import argparse
import os
import random
import shutil
import sys
import tempfile
import time
import warnings


def write_value(f, value, type_proto, name):
    from onnx import TensorProto, numpy_helper

    if type_proto.HasField("map_type"):
        proto = numpy_helper.from_dict(value, name)
    elif type_proto.HasField("sequence_type"):
        proto = numpy_helper.from_list(value, name)
    elif type_proto.HasField("optional_type"):
        proto = numpy_helper.from_optional(value, name)
    elif isinstance(value, TensorProto):
        proto = value
    else:
        proto = numpy_helper.from_array(value, name)
    f.write(proto.SerializeToString())


def write_cases(node_dir):
    """Write every node case under node_dir; returns the number of cases."""
    import numpy as np

    # Before the generators' modules are imported: some draw at import time.
    np.random.seed(0)
    warnings.simplefilter("ignore", RuntimeWarning)  # the inf/nan cases divide by zero on purpose
    random.seed(0)
    from onnx.backend.test.case import node as node_cases

    cases = node_cases.collect_testcases()
    names = set()
    for case in cases:
        if case.kind != "node":
            continue
        if case.name in names:
            raise SystemExit(f"duplicate case name {case.name}")
        names.add(case.name)
        case_dir = os.path.join(node_dir, case.name)
        os.makedirs(case_dir)
        with open(os.path.join(case_dir, "model.onnx"), "wb") as f:
            f.write(case.model.SerializeToString())
        graph = case.model.graph
        for i, (inputs, outputs) in enumerate(case.data_sets):
            set_dir = os.path.join(case_dir, f"test_data_set_{i}")
            os.makedirs(set_dir)
            for j, value in enumerate(inputs):
                with open(os.path.join(set_dir, f"input_{j}.pb"), "wb") as f:
                    write_value(f, value, graph.input[j].type, graph.input[j].name)
            for j, value in enumerate(outputs):
                with open(os.path.join(set_dir, f"output_{j}.pb"), "wb") as f:
                    write_value(f, value, graph.output[j].type, graph.output[j].name)
    return len(names)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True, help="folder to write (OUT/node/<case>/..., OUT/ONNX_VERSION)")
    ap.add_argument("--force", action="store_true", help="regenerate even if OUT holds this onnx's cases")
    args = ap.parse_args()

    import onnx

    version = onnx.__version__
    out = os.path.abspath(args.out)
    stamp = os.path.join(out, "ONNX_VERSION")
    node_dir = os.path.join(out, "node")
    if not args.force and os.path.isdir(node_dir) and os.path.exists(stamp):
        with open(stamp) as f:
            if f.read().strip() == version:
                print(f"{node_dir}: the node cases of onnx {version} are there")
                return 0

    os.makedirs(out, exist_ok=True)
    start = time.time()
    tmp = tempfile.mkdtemp(prefix=".node-cases-", dir=out)
    try:
        n = write_cases(os.path.join(tmp, "node"))
        with open(os.path.join(tmp, "ONNX_VERSION"), "w") as f:
            f.write(version + "\n")
        # Old set out of the way, new set in; the stamp last, so it only names a complete set.
        if os.path.exists(stamp):
            os.remove(stamp)
        if os.path.isdir(node_dir):
            shutil.rmtree(node_dir)
        os.rename(os.path.join(tmp, "node"), node_dir)
        os.rename(os.path.join(tmp, "ONNX_VERSION"), stamp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print(f"{node_dir}: {n} node cases of onnx {version} written in {time.time() - start:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
