#!/usr/bin/env python3
"""Print ONNX's own shape inference (the Python onnx package, which knows every opset up to
its version's) for a model with its symbolic dims bound, as JSON: {tensor: [elem_type, dims]}.

memplan's C++ ONNX library stops at opset 17, so for newer models memplan's rules alone give
the shapes; tests compare them against this independent answer.

    python samples/onnx_shapes.py MODEL.onnx --dim batch=2
"""
import argparse
import json
import sys


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("model")
    ap.add_argument("--dim", action="append", default=[], help="NAME=VALUE binds a symbolic dim")
    args = ap.parse_args(argv)
    import onnx
    dims = dict(d.split("=", 1) for d in args.dim)
    m = onnx.load(args.model, load_external_data=False)
    del m.graph.value_info[:]  # the exporter's own answers are not ONNX's inference
    for vi in list(m.graph.input) + list(m.graph.output):
        for d in vi.type.tensor_type.shape.dim:
            if d.HasField("dim_param") and d.dim_param in dims:
                value = int(dims[d.dim_param])
                d.Clear()
                d.dim_value = value
    inferred = onnx.shape_inference.infer_shapes(m, strict_mode=True, data_prop=True)
    out = {}
    for vi in list(inferred.graph.value_info) + list(inferred.graph.output):
        tt = vi.type.tensor_type
        if not tt.HasField("shape") or not all(d.HasField("dim_value") for d in tt.shape.dim):
            continue
        out[vi.name] = [tt.elem_type, [d.dim_value for d in tt.shape.dim]]
    json.dump(out, sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main())
