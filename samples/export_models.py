#!/usr/bin/env python3
"""Export the memplan test corpus to ONNX (training mode, random weights).

Run with the project's Python environment (scripts/install-deps.sh makes it; PyPI torch,
torchvision, onnx, onnxscript, pinned in scripts/requirements.txt):

    PY=$(scripts/install-deps.sh --print-venv)/bin/python
    $PY samples/export_models.py --out /tmp/memplan-models
    $PY samples/export_models.py --out DIR --models all
    $PY samples/export_models.py --out DIR --models resnet18,gpt,gpt_dynamo --force
    $PY samples/export_models.py --list
    $PY samples/export_models.py --out DIR --report   # writes DIR/REPORT.txt

Two exporters: NAME uses the TorchScript-based exporter (torch.onnx.export(dynamo=False),
opset 17..15, training mode); NAME_dynamo uses torch.export and the ONNX IR exporter
(torch.onnx.export(dynamo=True), the default of current PyTorch), whose models are opset 18
and newer. The dynamo exporter writes what torch.export captured: it has no training mode, so
batch norm comes out in inference form (and its default graph optimizer folds it into the
preceding convolution), while dropout keeps its training_mode input.

Hugging Face transformers models (hf_llama, hf_bert, hf_gpt2, hf_vit and larger variants),
built from a config with random weights, are exported through the dynamo exporter only:
name them NAME_dynamo.  So are the *_sd models (convnext_tiny_sd, swin_t_sd and variants):
torchvision's own stochastic depth in training mode, at a small image size.

Every model becomes DIR/<name>.onnx plus its weights as external data in one file,
DIR/<name>.onnx.data.  Nothing is downloaded: torchvision models are built with
weights=None and torch.manual_seed(0).

Export settings: torch.onnx.TrainingMode.TRAINING (BatchNormalization keeps its
training outputs and Dropout nodes stay in the graph), do_constant_folding=False,
a dynamic batch axis on the input and output, and the highest opset in 17..15 that
works.  Each export is written into a temporary folder inside DIR and renamed into
place at the end (data file first, then the .onnx), so an interrupted run never
leaves a half model behind; an existing DIR/<name>.onnx is skipped unless --force.
"""

import argparse
import collections
import math
import os
import shutil
import sys
import tempfile
import time
import warnings

OPSETS = (17, 16, 15)
IMAGE_SIZE = 224
DUMMY_BATCH = 2


# ---------------------------------------------------------------------------
# GPT-style decoder language model, written out in plain torch.
# ---------------------------------------------------------------------------

def _gpt_classes():
    import torch
    import torch.nn as nn
    import torch.nn.functional as F

    class CausalSelfAttention(nn.Module):
        def __init__(self, d_model, n_heads, seq_len, dropout):
            super().__init__()
            assert d_model % n_heads == 0
            self.n_heads = n_heads
            self.head_dim = d_model // n_heads
            self.q = nn.Linear(d_model, d_model)
            self.k = nn.Linear(d_model, d_model)
            self.v = nn.Linear(d_model, d_model)
            self.proj = nn.Linear(d_model, d_model)
            self.attn_drop = nn.Dropout(dropout)
            self.resid_drop = nn.Dropout(dropout)
            mask = torch.tril(torch.ones(seq_len, seq_len, dtype=torch.bool))
            self.register_buffer("causal_mask", mask.view(1, 1, seq_len, seq_len),
                                 persistent=False)

        def forward(self, x):
            b, t, c = x.shape
            # [b, t, c] -> [b, h, t, hd]
            q = self.q(x).view(b, t, self.n_heads, self.head_dim).transpose(1, 2)
            k = self.k(x).view(b, t, self.n_heads, self.head_dim).transpose(1, 2)
            v = self.v(x).view(b, t, self.n_heads, self.head_dim).transpose(1, 2)
            att = torch.matmul(q, k.transpose(-2, -1)) * (1.0 / math.sqrt(self.head_dim))
            mask = self.causal_mask[:, :, :t, :t]
            att = att.masked_fill(~mask, float("-inf"))
            att = F.softmax(att, dim=-1)
            att = self.attn_drop(att)
            y = torch.matmul(att, v)                       # [b, h, t, hd]
            y = y.transpose(1, 2).contiguous().view(b, t, c)  # merge heads
            return self.resid_drop(self.proj(y))

    class MLP(nn.Module):
        def __init__(self, d_model, dropout):
            super().__init__()
            self.fc = nn.Linear(d_model, 4 * d_model)
            self.act = nn.GELU()
            self.proj = nn.Linear(4 * d_model, d_model)
            self.drop = nn.Dropout(dropout)

        def forward(self, x):
            return self.drop(self.proj(self.act(self.fc(x))))

    class Block(nn.Module):
        def __init__(self, d_model, n_heads, seq_len, dropout):
            super().__init__()
            self.ln1 = nn.LayerNorm(d_model)
            self.attn = CausalSelfAttention(d_model, n_heads, seq_len, dropout)
            self.ln2 = nn.LayerNorm(d_model)
            self.mlp = MLP(d_model, dropout)

        def forward(self, x):
            x = x + self.attn(self.ln1(x))
            x = x + self.mlp(self.ln2(x))
            return x

    class GPT(nn.Module):
        def __init__(self, vocab=8192, seq_len=128, d_model=256, n_heads=4,
                     n_layers=4, dropout=0.1):
            super().__init__()
            self.seq_len = seq_len
            self.tok_emb = nn.Embedding(vocab, d_model)
            self.pos_emb = nn.Parameter(torch.zeros(1, seq_len, d_model))
            nn.init.normal_(self.pos_emb, std=0.02)
            self.drop = nn.Dropout(dropout)
            self.blocks = nn.ModuleList(
                [Block(d_model, n_heads, seq_len, dropout) for _ in range(n_layers)])
            self.ln_f = nn.LayerNorm(d_model)
            self.head = nn.Linear(d_model, vocab, bias=False)

        def forward(self, input_ids):
            t = input_ids.shape[1]
            x = self.tok_emb(input_ids) + self.pos_emb[:, :t, :]
            x = self.drop(x)
            for blk in self.blocks:
                x = blk(x)
            return self.head(self.ln_f(x))             # [b, t, vocab]

    return GPT


# ---------------------------------------------------------------------------
# Model registry
# ---------------------------------------------------------------------------

class Spec:
    def __init__(self, name, build, dummy, input_name="input", output_name="logits",
                 dynamo_only=False):
        self.name = name
        self.build = build          # () -> nn.Module
        self.dummy = dummy          # () -> example input tensor
        self.input_name = input_name
        self.output_name = output_name
        self.dynamo_only = dynamo_only  # exported as NAME_dynamo only


def _image_dummy(size=IMAGE_SIZE):
    import torch
    return lambda: torch.randn(DUMMY_BATCH, 3, size, size)


def _exportable_stochastic_depth(model):
    """Swap torchvision's StochasticDepth for an equivalent module that exports.

    torchvision.ops.stochastic_depth draws its mask with Tensor.bernoulli_(p), which
    torch 1.13's TorchScript exporter could not export ("ONNX export of operator
    Bernoulli, out parameter is not supported").  The replacement draws the same
    per-sample (mode "row") or per-batch (mode "batch") keep mask with the
    out-of-place torch.bernoulli on a tensor filled with the survival rate (the
    TorchScript exporter writes that as Shape/Gather/Concat/ConstantOfShape ->
    RandomUniformLike -> Less -> Cast) and scales by 1/survival_rate exactly as
    torchvision does.  Affects efficientnet_*, convnext_*, swin_*, maxvit_t.
    """
    import torch
    import torch.nn as nn
    from torchvision.ops import StochasticDepth

    class ExportableStochasticDepth(nn.Module):
        def __init__(self, p, mode):
            super().__init__()
            self.p = p
            self.mode = mode

        def forward(self, x):
            if not self.training or self.p == 0.0:
                return x
            survival = 1.0 - self.p
            if self.mode == "row":
                size = [x.shape[0]] + [1] * (x.dim() - 1)
            else:
                size = [1] * x.dim()
            noise = torch.bernoulli(torch.full(size, survival, dtype=x.dtype))
            if survival > 0.0:
                noise = noise / survival
            return x * noise

    for parent in list(model.modules()):
        for child_name, child in list(parent.named_children()):
            if isinstance(child, StochasticDepth):
                setattr(parent, child_name, ExportableStochasticDepth(child.p, child.mode))
    return model


_ZERO_REGISTERED = False


def _register_zero_symbolic():
    """Teach the TorchScript exporter aten::zero (Tensor.zero_), used by swin_v2_*.

    Missing in torch 1.13, which first exported the corpus.

    torchvision's shifted_window_attention does `qkv_bias[L:2L].zero_()` on a
    clone of the qkv bias; without a symbolic the export fails with "Exporting the
    operator 'aten::zero' to ONNX opset version 17 is not supported".  Exported as
    Mul(x, 0); the exporter turns the in-place slice write into ScatterND.
    """
    global _ZERO_REGISTERED
    if _ZERO_REGISTERED:
        return
    import torch

    def zero(g, self):
        return g.op("Mul", self, g.op("Constant", value_t=torch.tensor(0.0)))
    for opset in OPSETS:
        torch.onnx.register_custom_op_symbolic("aten::zero", zero, opset)
    _ZERO_REGISTERED = True


def _tv(name, **kwargs):
    def build():
        import torchvision
        if name.startswith("swin_v2"):
            _register_zero_symbolic()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            model = getattr(torchvision.models, name)(weights=None, **kwargs)
        return _exportable_stochastic_depth(model)
    return Spec(name, build, _image_dummy())


def _tv_sd(name, arch, image_size, **kwargs):
    """A torchvision model whose stochastic depth stays torchvision's own, dynamo only.

    torchvision.ops.stochastic_depth in training mode: an empty [N, 1, ..., 1] tensor,
    bernoulli_(survival), div_(survival), input * noise.  torch.export captures it and the
    dynamo exporter writes RandomUniformLike, Less, Cast, Div and Mul per block (what a user
    of current PyTorch gets); _exportable_stochastic_depth, which the TorchScript exporter
    needs, would write Bernoulli instead.  A small image_size keeps CPU runs quick.
    """
    def build():
        import torchvision
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return getattr(torchvision.models, arch)(weights=None, **kwargs)
    return Spec(name, build, _image_dummy(image_size), dynamo_only=True)


def _tv_seg(name, **kwargs):
    """Segmentation model; the wrapper returns only the 'out' tensor of the dict."""
    def build():
        import torch.nn as nn
        import torchvision
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            m = getattr(torchvision.models.segmentation, name)(
                weights=None, weights_backbone=None, **kwargs)

        class OutOnly(nn.Module):
            def __init__(self, inner):
                super().__init__()
                self.inner = inner

            def forward(self, x):
                return self.inner(x)["out"]
        return OutOnly(m)
    return Spec(name, build, _image_dummy(), output_name="out")


def _gpt(name, **kwargs):
    seq_len = kwargs.get("seq_len", 128)
    vocab = kwargs.get("vocab", 8192)

    def build():
        return _gpt_classes()(**kwargs)

    def dummy():
        import torch
        return torch.randint(0, vocab, (DUMMY_BATCH, seq_len), dtype=torch.int64)
    return Spec(name, build, dummy, input_name="input_ids", output_name="logits")


# ---------------------------------------------------------------------------
# Hugging Face transformers models, randomly initialised from a config (nothing is
# downloaded), exported with the dynamo exporter only (what users of transformers export
# today; the TorchScript exporter is deprecated there).  Attention is transformers' default
# "sdpa" implementation: torch.export captures scaled_dot_product_attention and the exporter
# writes it as MatMul, Softmax, MatMul (with IsNaN/Where for fully masked rows).  Tiny sizes:
# two layers, hidden 64-128, sequence 32-64, so the 2-core test machine trains them quickly.
# ---------------------------------------------------------------------------

def _hf_build(family, config):
    """The model of `family` for a config dict, returning logits only (no cache)."""
    import torch.nn as nn
    import transformers as tf

    kinds = {
        # LLaMA: RMSNorm, rotary embeddings, SiLU-gated MLP, grouped-query attention.
        "llama": (tf.LlamaConfig, tf.LlamaForCausalLM, "input_ids"),
        "bert": (tf.BertConfig, tf.BertForMaskedLM, "input_ids"),
        "gpt2": (tf.GPT2Config, tf.GPT2LMHeadModel, "input_ids"),
        "vit": (tf.ViTConfig, tf.ViTForImageClassification, "pixel_values"),
    }
    config_cls, model_cls, arg = kinds[family]
    cfg = config_cls(**config)
    cfg._attn_implementation = "sdpa"

    class LogitsOnly(nn.Module):
        def __init__(self, inner):
            super().__init__()
            self.inner = inner

        def forward(self, x):
            kwargs = {arg: x}
            if arg == "input_ids":
                kwargs["use_cache"] = False
            return self.inner(**kwargs).logits
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return LogitsOnly(model_cls(cfg))


def _hf(name, family, seq_len=32, image_size=32, **config):
    def build():
        return _hf_build(family, config)

    if family == "vit":
        config.setdefault("image_size", image_size)
        return Spec(name, build, _image_dummy(image_size), input_name="pixel_values",
                    output_name="logits", dynamo_only=True)
    vocab = config["vocab_size"]

    def dummy():
        import torch
        return torch.randint(0, vocab, (DUMMY_BATCH, seq_len), dtype=torch.int64)
    return Spec(name, build, dummy, input_name="input_ids", output_name="logits",
                dynamo_only=True)


HF = [
    _hf("hf_llama", "llama", seq_len=32, vocab_size=1024, hidden_size=64,
        intermediate_size=176, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, max_position_embeddings=128),
    _hf("hf_bert", "bert", seq_len=32, vocab_size=1024, hidden_size=64,
        intermediate_size=256, num_hidden_layers=2, num_attention_heads=4,
        max_position_embeddings=128),
    _hf("hf_gpt2", "gpt2", seq_len=32, vocab_size=1024, n_embd=64, n_layer=2, n_head=4,
        n_positions=128, bos_token_id=0, eos_token_id=0),
    _hf("hf_vit", "vit", image_size=32, hidden_size=64, intermediate_size=256,
        num_hidden_layers=2, num_attention_heads=4, patch_size=8, num_labels=10),
    # Variants no test uses: other sizes of the same families, to check that the rules
    # generalise (bench/accuracy_torch214.md).
    _hf("hf_llama_wide", "llama", seq_len=64, vocab_size=2048, hidden_size=128,
        intermediate_size=352, num_hidden_layers=3, num_attention_heads=8,
        num_key_value_heads=2, max_position_embeddings=256),
    _hf("hf_llama_long", "llama", seq_len=256, vocab_size=512, hidden_size=64,
        intermediate_size=176, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, max_position_embeddings=512),
    _hf("hf_llama_1k", "llama", seq_len=1024, vocab_size=256, hidden_size=64,
        intermediate_size=176, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, max_position_embeddings=1024),
    _hf("hf_bert_wide", "bert", seq_len=64, vocab_size=2048, hidden_size=128,
        intermediate_size=512, num_hidden_layers=3, num_attention_heads=4,
        max_position_embeddings=256),
]

CORE = [
    _tv("resnet18"),
    _tv("resnet50"),
    _tv("vgg16"),
    _tv("mobilenet_v2"),
    _tv("vit_b_16"),
    _gpt("gpt", vocab=8192, seq_len=128, d_model=256, n_heads=4, n_layers=4),
    _gpt("gpt_deep", vocab=8192, seq_len=128, d_model=128, n_heads=4, n_layers=48),
]

# Exported only when named with --models (or --models all).  All of these export
# in training mode at opset 17 (checked with torch 1.13.1 / torchvision 0.14.1, which first
# exported the corpus), two families only thanks to the workarounds above:
#   efficientnet_*, convnext_*, swin_*, maxvit_t: StochasticDepth's bernoulli_(p)
#     -> "ONNX export of operator Bernoulli, out parameter is not supported"
#     (fixed by _exportable_stochastic_depth);
#   swin_v2_*: "Exporting the operator 'aten::zero' ... is not supported"
#     (fixed by _register_zero_symbolic).
# Not attempted: video models (mvit_*, r3d_18, s3d: 5-D input), detection models
# (dict/list outputs, data-dependent control flow), quantized models.
EXTENDED = [
    _tv("resnet34"),
    _tv("resnet101"),
    _tv("resnet152"),
    _tv("wide_resnet50_2"),
    _tv("resnext50_32x4d"),
    _tv("vgg11_bn"),
    _tv("vgg19"),
    _tv("alexnet"),
    _tv("densenet121"),
    _tv("mobilenet_v3_small"),
    _tv("mobilenet_v3_large"),
    _tv("efficientnet_b0"),
    _tv("efficientnet_v2_s"),
    _tv("squeezenet1_1"),
    _tv("shufflenet_v2_x1_0"),
    _tv("mnasnet1_0"),
    _tv("regnet_y_400mf"),
    _tv("regnet_x_400mf"),
    _tv("convnext_tiny"),
    _tv("swin_t"),
    _tv("swin_v2_t"),
    _tv("maxvit_t"),
    _tv("vit_b_32"),
    _tv("googlenet", aux_logits=False, init_weights=True),
    _tv("inception_v3", aux_logits=False, init_weights=True),
    _tv_seg("fcn_resnet50", aux_loss=False),
    _tv_seg("deeplabv3_mobilenet_v3_large", aux_loss=False),
    _tv_seg("lraspp_mobilenet_v3_large"),
]

# Stochastic depth in training mode as the dynamo exporter writes torchvision's own
# (issue 26): ConvNeXt and Swin at small inputs.  The last three are variants no test uses.
STOCHASTIC_DEPTH = [
    _tv_sd("convnext_tiny_sd", "convnext_tiny", 64, stochastic_depth_prob=0.1),
    _tv_sd("swin_t_sd", "swin_t", 224),  # stochastic depth 0.2 (fixed by torchvision)
    _tv_sd("convnext_small_sd", "convnext_small", 64, stochastic_depth_prob=0.4),
    _tv_sd("swin_s_sd", "swin_s", 112),  # 0.3
    _tv_sd("swin_v2_t_sd", "swin_v2_t", 128),  # 0.2
]

SPECS = collections.OrderedDict(
    (s.name, s) for s in CORE + EXTENDED + HF + STOCHASTIC_DEPTH)


# ---------------------------------------------------------------------------
# Export
# ---------------------------------------------------------------------------

def _fmt_size(n):
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.1f} {unit}" if unit != "B" else f"{n} B"
        n /= 1024.0


def export_one(spec, out_dir, force=False, dynamo=False):
    """Export one model; returns a one-line summary. Raises on failure."""
    import onnx
    import torch

    name = spec.name + ("_dynamo" if dynamo else "")
    final_onnx = os.path.join(out_dir, name + ".onnx")
    final_data = final_onnx + ".data"
    if os.path.exists(final_onnx) and os.path.exists(final_data) and not force:
        return f"{name:32s} skipped (exists; use --force to re-export)"

    t0 = time.time()
    torch.manual_seed(0)
    model = spec.build()
    model.train()
    torch.manual_seed(0)
    dummy = spec.dummy()

    tmp = tempfile.mkdtemp(prefix=f".tmp-{name}-", dir=out_dir)
    try:
        raw = os.path.join(tmp, "raw.onnx")
        errors = []
        opset = None
        if dynamo:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                torch.onnx.export(
                    model, (dummy,), raw, dynamo=True, external_data=True,
                    input_names=[spec.input_name], output_names=[spec.output_name],
                    dynamic_axes={spec.input_name: {0: "batch"},
                                  spec.output_name: {0: "batch"}})
            opset = max(o.version for o in onnx.load(raw, load_external_data=False).opset_import
                        if o.domain in ("", "ai.onnx"))
        for candidate in ([] if dynamo else OPSETS):
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    torch.onnx.export(
                        model, (dummy,), raw, dynamo=False,
                        opset_version=candidate,
                        training=torch.onnx.TrainingMode.TRAINING,
                        do_constant_folding=False,
                        input_names=[spec.input_name],
                        output_names=[spec.output_name],
                        dynamic_axes={spec.input_name: {0: "batch"},
                                      spec.output_name: {0: "batch"}},
                    )
                opset = candidate
                break
            except Exception as e:  # try the next lower opset
                errors.append(f"opset {candidate}: {type(e).__name__}: {e}")
                for f in os.listdir(tmp):
                    os.remove(os.path.join(tmp, f))
        if opset is None:
            raise RuntimeError("export failed at every opset:\n  " + "\n  ".join(errors))

        # Re-save with all weights in one external data file next to the model.
        proto = onnx.load(raw)  # loads any external data torch itself wrote
        tmp_onnx = os.path.join(tmp, name + ".onnx")
        onnx.save_model(proto, tmp_onnx, save_as_external_data=True,
                        all_tensors_to_one_file=True,
                        location=name + ".onnx.data", size_threshold=1024)
        del proto
        tmp_data = tmp_onnx + ".data"

        # Validate: structure without the weights, then the full checker by path.
        light = onnx.load(tmp_onnx, load_external_data=False)
        n_nodes = len(light.graph.node)
        onnx.checker.check_model(tmp_onnx)

        # Move into place: data first, so an existing .onnx always has its data.
        if os.path.exists(final_onnx):
            os.remove(final_onnx)
        if os.path.exists(tmp_data):
            os.replace(tmp_data, final_data)
        elif os.path.exists(final_data):
            os.remove(final_data)
        os.replace(tmp_onnx, final_onnx)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)

    secs = time.time() - t0
    data_size = os.path.getsize(final_data) if os.path.exists(final_data) else 0
    return (f"{name:32s} {secs:7.1f}s  opset {opset}  {n_nodes:6d} nodes  "
            f"onnx {_fmt_size(os.path.getsize(final_onnx)):>10s}  "
            f"data {_fmt_size(data_size):>10s}")


# ---------------------------------------------------------------------------
# Report (onnx python package only)
# ---------------------------------------------------------------------------

def _shape_is_concrete(vi):
    t = vi.type
    if not t.HasField("tensor_type"):
        return False
    tt = t.tensor_type
    if not tt.HasField("shape"):
        return False
    return all(d.HasField("dim_value") for d in tt.shape.dim)


def analyze(path):
    """Node count, op histogram, and what ONNX shape inference leaves unknown
    after binding the batch axis to 1 (torch's own value_info is removed first)."""
    import onnx
    m = onnx.load(path, load_external_data=False)
    g = m.graph
    ops = collections.Counter(n.op_type for n in g.node)
    opset = max((o.version for o in m.opset_import if o.domain in ("", "ai.onnx")),
                default=0)

    del g.value_info[:]
    for vi in g.input:
        dims = vi.type.tensor_type.shape.dim
        if len(dims) > 0 and not dims[0].HasField("dim_value"):
            dims[0].Clear()
            dims[0].dim_value = 1
    for vi in g.output:  # let inference derive output shapes by itself
        vi.type.tensor_type.ClearField("shape")

    inferred = onnx.shape_inference.infer_shapes(m, strict_mode=False, data_prop=True)
    known = {vi.name: vi for vi in list(inferred.graph.value_info) +
             list(inferred.graph.output) + list(inferred.graph.input)}
    init_names = {t.name for t in g.initializer}

    unknown = collections.Counter()     # producing op type -> count
    missing = collections.Counter()     # no type info at all
    examples = {}
    n_tensors = 0
    for node in inferred.graph.node:
        for out in node.output:
            if not out or out in init_names:
                continue
            n_tensors += 1
            vi = known.get(out)
            if vi is None:
                missing[node.op_type] += 1
                unknown[node.op_type] += 1
                examples.setdefault(node.op_type, f"{out}: <no type>")
            elif not _shape_is_concrete(vi):
                unknown[node.op_type] += 1
                tt = vi.type.tensor_type
                dims = ([d.dim_value if d.HasField("dim_value") else
                         (d.dim_param or "?") for d in tt.shape.dim]
                        if tt.HasField("shape") else "<no shape>")
                examples.setdefault(node.op_type, f"{out}: {dims}")

    # Where does it start?  A "root" is a node whose outputs are not concrete
    # although all its inputs have concrete shapes and every Shape node feeding
    # its shape-like inputs reads a concrete tensor: what is missing is the *value*
    # of a shape-like input (Reshape shape, Slice ends, Resize sizes, ...) that
    # data propagation did not compute.  Record the ops that compute those inputs
    # (walking back to Shape nodes, inputs and initializers).
    def concrete(t):
        if not t or t in init_names:
            return True
        vi = known.get(t)
        return vi is not None and _shape_is_concrete(vi)
    producer = {o: n for n in inferred.graph.node for o in n.output}
    roots = collections.Counter()
    for node in inferred.graph.node:
        if all(concrete(o) for o in node.output if o):
            continue
        if not all(concrete(i) for i in node.input):
            continue
        chain = set()
        secondary = False   # the shape value derives from an already-unknown tensor
        stack = [i for i in list(node.input)[1:] if i in producer]
        if node.op_type in ("ConstantOfShape", "Range"):
            stack = [i for i in node.input if i in producer]
        seen = set()
        while stack:
            t = stack.pop()
            if t in seen:
                continue
            seen.add(t)
            pn = producer[t]
            if pn.op_type == "Constant":
                continue
            chain.add(pn.op_type)
            if pn.op_type == "Shape":
                secondary = secondary or not concrete(pn.input[0])
                continue
            stack.extend(i for i in pn.input if i in producer)
        if secondary:
            continue
        roots[f"{node.op_type} <- [{','.join(sorted(chain))}]"] += 1
    return dict(nodes=len(g.node), opset=opset, ops=ops, tensors=n_tensors,
                unknown=unknown, missing=missing, examples=examples, roots=roots,
                model=m)


def _attr_summary(m):
    """A few facts about training-specific ops worth knowing."""
    from onnx import helper
    lines = []
    seen = set()
    for n in m.graph.node:
        if n.op_type in ("BatchNormalization", "Dropout") and n.op_type not in seen:
            seen.add(n.op_type)
            attrs = {a.name: helper.get_attribute_value(a) for a in n.attribute}
            lines.append(f"    e.g. {n.op_type}: inputs={len(n.input)} "
                         f"outputs={len([o for o in n.output if o])}/{len(n.output)} "
                         f"attrs={attrs}")
    return lines


def write_report(out_dir):
    names = sorted(f[:-5] for f in os.listdir(out_dir) if f.endswith(".onnx"))
    order = {n: i for i, n in enumerate(SPECS)}
    names.sort(key=lambda n: (order.get(n, len(order)), n))
    lines = []
    union = collections.Counter()
    unknown_union = collections.Counter()
    roots_union = collections.Counter()
    for name in names:
        r = analyze(os.path.join(out_dir, name + ".onnx"))
        union.update({op: 1 for op in r["ops"]})
        unknown_union.update(r["unknown"])
        n_unknown = sum(r["unknown"].values())
        lines.append(f"== {name}: opset {r['opset']}, {r['nodes']} nodes, "
                     f"{r['tensors']} node-output tensors, {n_unknown} not fully "
                     f"concrete after infer_shapes(data_prop=True) with batch=1")
        lines.append("  ops: " + ", ".join(f"{op}:{c}" for op, c in
                                            sorted(r["ops"].items(),
                                                   key=lambda kv: (-kv[1], kv[0]))))
        if r["roots"]:
            lines.append("  unknown starts at (op <- ops computing its shape input): " +
                         "; ".join(f"{k} x{c}" for k, c in r["roots"].most_common()))
            roots_union.update(r["roots"])
        if n_unknown:
            lines.append("  unknown by producing op: " + ", ".join(
                f"{op}:{c}" + (f" (no type: {r['missing'][op]})" if r["missing"][op] else "")
                for op, c in r["unknown"].most_common()))
            for op, ex in r["examples"].items():
                lines.append(f"    e.g. {op} -> {ex}")
        lines.extend(_attr_summary(r["model"]))
        lines.append("")
    lines.append(f"== union of op types over {len(names)} models "
                 f"(op: number of models using it)")
    for op, c in sorted(union.items(), key=lambda kv: (-kv[1], kv[0])):
        lines.append(f"  {op}: {c}")
    lines.append("")
    lines.append("== tensors left not fully concrete, by producing op, all models")
    for op, c in unknown_union.most_common():
        lines.append(f"  {op}: {c}")
    if not unknown_union:
        lines.append("  (none)")
    lines.append("")
    lines.append("== where the unknowns start, all models (op <- ops computing its "
                 "shape-like input)")
    lines.append("   onnx 1.12 with data_prop: Reshape, Expand and ConstantOfShape use "
                 "propagated shape values, but Slice (starts/ends), Pad (pads), Resize "
                 "(sizes), Range and Tile read only Constant/initializer inputs, and "
                 "there is no value propagator for Div (torch's int floor-division) "
                 "or Where.")
    for k, c in roots_union.most_common():
        lines.append(f"  {k}: {c}")
    text = "\n".join(lines) + "\n"
    path = os.path.join(out_dir, "REPORT.txt")
    with open(path + ".tmp", "w") as f:
        f.write(text)
    os.replace(path + ".tmp", path)
    return path


# ---------------------------------------------------------------------------
# CLI
# ---------------------------------------------------------------------------

DYNAMO_SUFFIX = "_dynamo"


def _spec_of(name):
    """'gpt_dynamo' -> ('gpt', True): the same model through the dynamo exporter."""
    if name.endswith(DYNAMO_SUFFIX):
        return name[:-len(DYNAMO_SUFFIX)], True
    return name, False


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", help="output folder (created if missing)")
    ap.add_argument("--models", help="comma-separated names, 'core' (default) or 'all'")
    ap.add_argument("--list", action="store_true", help="print model names and exit")
    ap.add_argument("--force", action="store_true", help="re-export existing models")
    ap.add_argument("--report", action="store_true",
                    help="write OUT/REPORT.txt about every .onnx in OUT (no export "
                         "unless --models is given too)")
    args = ap.parse_args(argv)

    if args.list:
        for name, spec in SPECS.items():
            if not spec.dynamo_only:
                print(name)
        for name in SPECS:
            print(name + DYNAMO_SUFFIX)
        return 0
    if not args.out:
        ap.error("--out is required")

    if args.models in (None, "", "core"):
        selected = [] if (args.report and args.models is None) else [s.name for s in CORE]
    elif args.models == "all":
        selected = [n + DYNAMO_SUFFIX if s.dynamo_only else n for n, s in SPECS.items()]
    else:
        selected = [n.strip() for n in args.models.split(",") if n.strip()]
        unknown = [n for n in selected if _spec_of(n)[0] not in SPECS]
        if unknown:
            print(f"error: unknown model(s): {', '.join(unknown)} "
                  f"(see --list)", file=sys.stderr)
            return 2
        static = [n for n in selected if not _spec_of(n)[1] and SPECS[n].dynamo_only]
        if static:
            print(f"error: {', '.join(static)}: exported with the dynamo exporter only; "
                  f"name {', '.join(n + DYNAMO_SUFFIX for n in static)}", file=sys.stderr)
            return 2

    os.makedirs(args.out, exist_ok=True)
    failed = []
    for name in selected:
        try:
            base, dynamo = _spec_of(name)
            print(export_one(SPECS[base], args.out, force=args.force, dynamo=dynamo), flush=True)
        except BrokenPipeError:
            raise
        except Exception as e:
            msg = str(e).strip().splitlines()
            print(f"{name:32s} FAILED: {type(e).__name__}: "
                  f"{msg[0] if msg else ''}", flush=True)
            print(f"error: exporting {name} failed:\n{e}", file=sys.stderr)
            failed.append(name)
    if args.report:
        print(f"report: {write_report(args.out)}")
    if failed:
        print(f"error: {len(failed)} model(s) failed: {', '.join(failed)}",
              file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
