#!/usr/bin/env python3
"""What LibTorch's CPU convolution holds beyond its results, op by op (issue 22 item 5).

For every distinct Conv of the given ONNX models (shapes from onnx's shape inference at --batch),
runs aten::convolution and aten::convolution_backward alone, as autograd calls them (the input
gradient only where the conv's input is not a graph input; weight and bias gradients), and prints
the peak bytes each holds above its results: the forward above its output, the backward above the
gradients it returns. Those are what analyzer/src/op_workspaces.cc's ConvForwardWorkspace and
ConvWorkspace predict (backward_workspace_bytes / forward_workspace_bytes of each node).

Memory is counted by samples/pytorch_peer_bench.py's LD_PRELOAD shim (live bytes of c10's
posix_memalign allocations: every tensor and oneDNN buffer LibTorch allocates). The thread count
matters (oneDNN splits the minibatch over threads): --threads, default LibTorch's.

usage: $VENV/bin/python bench/conv_workspaces.py MODEL.onnx... [--batch 4] [--threads N]
"""
import argparse
import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "samples"))
import pytorch_peer_bench as peer  # noqa: E402  (the shim)


def signatures(path, batch):
    import onnx
    from onnx import shape_inference
    m = onnx.load(path, load_external_data=False)
    for inp in m.graph.input:
        d = inp.type.tensor_type.shape.dim
        if d and d[0].dim_param:
            d[0].dim_value = batch
    m = shape_inference.infer_shapes(m)
    shapes = {vi.name: [d.dim_value for d in vi.type.tensor_type.shape.dim]
              for vi in list(m.graph.value_info) + list(m.graph.input) + list(m.graph.output)}
    shapes.update({i.name: list(i.dims) for i in m.graph.initializer})
    graph_inputs = {i.name for i in m.graph.input} - {i.name for i in m.graph.initializer}
    seen, out = set(), []
    for n in m.graph.node:
        if n.op_type != "Conv":
            continue
        a = {x.name: (list(x.ints) if x.ints else x.i) for x in n.attribute}
        s = dict(x=shapes[n.input[0]], w=shapes[n.input[1]], strides=a.get("strides", [1, 1]),
                 pads=a.get("pads", [0, 0, 0, 0]), group=a.get("group", 1),
                 dil=a.get("dilations", [1, 1]), bias=len(n.input) > 2 and n.input[2] != "",
                 input_grad=n.input[0] not in graph_inputs)
        key = json.dumps(s, sort_keys=True)
        if key not in seen and len(s["x"]) == 4 and s["pads"][:2] == s["pads"][2:]:
            seen.add(key)
            out.append(dict(s, name=n.name))
    return out


def worker(paths, batch, threads):
    import ctypes
    lib = ctypes.CDLL(peer.shim_path())
    for f in ("memcount_current", "memcount_peak"):
        getattr(lib, f).restype = ctypes.c_longlong
    import torch
    if threads:
        torch.set_num_threads(threads)

    def held(fn):
        lib.memcount_reset_peak()
        before = lib.memcount_current()
        r = fn()
        return lib.memcount_peak() - lib.memcount_current(), r

    print(f"LibTorch {torch.__version__}, {torch.get_num_threads()} threads, batch {batch}")
    print(f"{'conv':60s} {'input':>18s} {'weight':>18s} {'s':>2s} {'g':>4s}  {'forward':>10s} {'backward':>10s}")
    for path in paths:
        for s in signatures(path, batch):
            x, w = torch.randn(*s["x"]), torch.randn(*s["w"])
            b = torch.randn(s["w"][0]) if s["bias"] else None
            args = (s["strides"], s["pads"][:2], s["dil"], False, [0, 0], s["group"])
            fwd, y = held(lambda: torch.ops.aten.convolution(x, w, b, *args))
            go = torch.randn_like(y)
            mask = [s["input_grad"], True, s["bias"]]
            bwd, _ = held(lambda: torch.ops.aten.convolution_backward(
                go, x, w, [w.shape[0]] if s["bias"] else None, *args, mask))
            name = os.path.basename(path)[:-5] + ":" + s["name"]
            print(f"{name[-60:]:60s} {str(s['x']):>18s} {str(s['w']):>18s} {s['strides'][0]:2d} "
                  f"{s['group']:4d}  {fwd:10d} {bwd:10d}", flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("models", nargs="+")
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--threads", type=int, default=0)
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.worker:
        return worker(a.models, a.batch, a.threads)
    env = peer.counted_env(a.threads or os.cpu_count())
    if not a.threads:
        env.pop("OMP_NUM_THREADS", None)  # LibTorch's default
    cmd = [sys.executable, os.path.abspath(__file__), "--worker", "--batch", str(a.batch),
           "--threads", str(a.threads)] + a.models
    return subprocess.call(cmd, env=env)


if __name__ == "__main__":
    sys.exit(main())
