// Shape rules of elementwise, view and data-movement ops. Where the inputs are constants, the
// rules also evaluate the output (see const_eval.cc).
#include <algorithm>
#include <numeric>

#include "op_rules_internal.h"

namespace memplan::rules {
namespace {

// Output 0 holds input 0's elements in `shape` (squeeze, unsqueeze, reshape); a constant
// input's value carries over.
void SetReshaped(InferContext& c, std::vector<int64_t> shape) {
  if (const ConstValue* v = c.value(0)) {
    ConstValue nv = *v;
    nv.shape = std::move(shape);
    return c.set_value(0, std::move(nv));
  }
  c.set(0, c.dtype(0), std::move(shape));
}

}  // namespace

int64_t NormAxis(int64_t axis, int64_t rank, const InferContext& c) {
  if (axis < -rank || axis >= rank) {
    c.fail("axis " + std::to_string(axis) + " is out of range for rank " + std::to_string(rank));
  }
  return axis < 0 ? axis + rank : axis;
}

std::vector<int64_t> Broadcast(const std::vector<int64_t>& a, const std::vector<int64_t>& b,
                               const InferContext& c) {
  size_t r = std::max(a.size(), b.size());
  std::vector<int64_t> out(r);
  for (size_t i = 0; i < r; ++i) {
    int64_t da = i < r - a.size() ? 1 : a[i - (r - a.size())];
    int64_t db = i < r - b.size() ? 1 : b[i - (r - b.size())];
    if (da != db && da != 1 && db != 1) {
      c.fail("cannot broadcast shapes " + ShapeString(a) + " and " + ShapeString(b));
    }
    out[i] = da == 1 ? db : da;
  }
  return out;
}

std::vector<int64_t> AxesInput(const InferContext& c, const char* attr_name, size_t input) {
  if (c.has(input)) return c.need_ints(input);
  return c.node().attr_ints(attr_name);
}

void InferSameAsInput(InferContext& c) { c.set(0, c.dtype(0), c.shape(0)); }

void InferVariadic(InferContext& c) {  // Sum, Max, Min, Mean of N inputs
  std::vector<int64_t> out = c.shape(0);
  for (size_t i = 1; i < c.num_inputs(); ++i) out = Broadcast(out, c.shape(i), c);
  c.set(0, c.dtype(0), out);
}

void InferCastLike(InferContext& c) { c.set(0, c.dtype(1), c.shape(0)); }

void InferUnsqueeze(InferContext& c) {
  std::vector<int64_t> axes = AxesInput(c, "axes", 1);
  int64_t out_rank = c.rank(0) + static_cast<int64_t>(axes.size());
  for (int64_t& a : axes) a = NormAxis(a, out_rank, c);
  std::sort(axes.begin(), axes.end());
  if (std::adjacent_find(axes.begin(), axes.end()) != axes.end())
    c.reject("Unsqueeze axes repeat an axis");
  std::vector<int64_t> out;
  size_t k = 0, j = 0;
  for (int64_t d = 0; d < out_rank; ++d) {
    if (k < axes.size() && axes[k] == d) {
      out.push_back(1);
      ++k;
    } else
      out.push_back(c.shape(0)[j++]);
  }
  SetReshaped(c, std::move(out));
}

void InferSqueeze(InferContext& c) {
  std::vector<int64_t> axes = AxesInput(c, "axes", 1);
  std::vector<bool> drop(c.rank(0), false);
  if (axes.empty()) {
    for (int64_t d = 0; d < c.rank(0); ++d) drop[d] = c.shape(0)[d] == 1;
  } else {
    for (int64_t a : axes) {
      int64_t d = NormAxis(a, c.rank(0), c);
      if (c.shape(0)[d] != 1)
        c.fail("Squeeze axis " + std::to_string(a) + " has size " + std::to_string(c.shape(0)[d]) +
               ", not 1");
      drop[d] = true;
    }
  }
  std::vector<int64_t> out;
  for (int64_t d = 0; d < c.rank(0); ++d)
    if (!drop[d]) out.push_back(c.shape(0)[d]);
  SetReshaped(c, std::move(out));
}

void InferConcat(InferContext& c) {
  int64_t r = c.rank(0);
  int64_t axis = NormAxis(c.node().attr_int("axis", 0), r, c);
  std::vector<int64_t> out = c.shape(0);
  out[axis] = 0;
  for (size_t i = 0; i < c.num_inputs(); ++i) {
    if (!c.has(i)) continue;
    if (c.rank(i) != r) c.fail("Concat inputs have different ranks");
    for (int64_t d = 0; d < r; ++d) {
      if (d != axis && c.shape(i)[d] != out[d]) {
        c.fail("Concat inputs " + ShapeString(c.shape(0)) + " and " + ShapeString(c.shape(i)) +
               " differ outside axis " + std::to_string(axis));
      }
    }
    if (__builtin_add_overflow(out[axis], c.shape(i)[axis], &out[axis]))
      c.reject("Concat output size overflows int64");
  }
  if (AllValues(c, c.num_inputs()) && Trackable(out)) {
    // Row-major: for each outer index, append each input's slab along the axis.
    ConstValue v = MakeValue(c.dtype(0), out);
    int64_t outer = Numel(std::vector<int64_t>(out.begin(), out.begin() + axis));
    int64_t k = 0;
    for (int64_t o = 0; o < outer; ++o) {
      for (size_t i = 0; i < c.num_inputs(); ++i) {
        if (!c.has(i)) continue;
        const ConstValue* in = c.value(i);
        int64_t slab = outer ? in->numel() / outer : 0;
        for (int64_t j = 0; j < slab; ++j) Put(v, k++, in->at(o * slab + j));
      }
    }
    return c.set_value(0, std::move(v));
  }
  c.set(0, c.dtype(0), out);
}

void InferGather(InferContext& c) {
  int64_t r = c.rank(0);
  int64_t axis = NormAxis(c.node().attr_int("axis", 0), r, c);
  const std::vector<int64_t>& data = c.shape(0);
  const std::vector<int64_t>& idx = c.shape(1);
  std::vector<int64_t> out(data.begin(), data.begin() + axis);
  out.insert(out.end(), idx.begin(), idx.end());
  out.insert(out.end(), data.begin() + axis + 1, data.end());
  const ConstValue *dv = c.value(0), *iv = c.value(1);
  if (dv && iv && Trackable(out)) {
    int64_t outer = Numel(std::vector<int64_t>(data.begin(), data.begin() + axis));
    int64_t inner = Numel(std::vector<int64_t>(data.begin() + axis + 1, data.end()));
    ConstValue v = MakeValue(c.dtype(0), out);
    int64_t k = 0;
    for (int64_t o = 0; o < outer; ++o) {
      for (int64_t j = 0; j < iv->numel(); ++j) {
        int64_t ix = static_cast<int64_t>(iv->at(j));
        if (ix < 0) ix += data[axis];
        if (ix < 0 || ix >= data[axis]) c.fail("Gather index out of range");
        for (int64_t in = 0; in < inner; ++in)
          Put(v, k++, dv->at((o * data[axis] + ix) * inner + in));
      }
    }
    return c.set_value(0, std::move(v));
  }
  c.set(0, c.dtype(0), out);
}

void InferSlice(InferContext& c) {
  const std::vector<int64_t>& data = c.shape(0);
  int64_t r = c.rank(0);
  std::vector<int64_t> starts, ends, axes, steps;
  if (c.has(1)) {
    starts = c.need_ints(1);
    ends = c.need_ints(2);
    if (c.has(3)) axes = c.need_ints(3);
    if (c.has(4)) steps = c.need_ints(4);
  } else {  // opset < 10: attributes
    starts = c.node().attr_ints("starts");
    ends = c.node().attr_ints("ends");
    axes = c.node().attr_ints("axes");
  }
  if (axes.empty()) {
    axes.resize(starts.size());
    std::iota(axes.begin(), axes.end(), 0);
  }
  if (steps.empty()) steps.assign(starts.size(), 1);
  if (ends.size() != starts.size() || axes.size() != starts.size() ||
      steps.size() != starts.size()) {
    c.reject("Slice starts, ends, axes and steps have different lengths");
  }
  std::vector<int64_t> out = data, first(r, 0), step(r, 1);
  for (size_t i = 0; i < axes.size(); ++i) {
    int64_t a = NormAxis(axes[i], r, c);
    int64_t dim = data[a], s = steps[i];
    if (s == 0 || s == INT64_MIN) c.reject("Slice step " + std::to_string(s) + " is invalid");
    int64_t b = starts[i], e = ends[i];
    if (b < 0) b += dim;
    if (e < 0) e += dim;
    if (s > 0) {
      b = std::clamp<int64_t>(b, 0, dim);
      e = std::clamp<int64_t>(e, 0, dim);
      out[a] = e > b ? (e - b - 1) / s + 1 : 0;
    } else if (dim == 0) {
      out[a] = 0;
    } else {
      b = std::clamp<int64_t>(b, 0, dim - 1);
      e = std::clamp<int64_t>(e, -1, dim - 1);
      out[a] = b > e ? (b - e - s - 1) / (-s) : 0;
    }
    first[a] = b;
    step[a] = s;
  }
  if (const ConstValue* v = c.value(0); v && Trackable(out)) {
    ConstValue nv = MakeValue(v->dtype, out);
    std::vector<int64_t> strides = ContiguousStrides(data);
    for (int64_t i = 0; i < Numel(out); ++i) {
      int64_t rem = i, src = 0;
      for (int64_t d = r - 1; d >= 0; --d) {
        int64_t coord = rem % out[d];
        rem /= out[d];
        src += (first[d] + coord * step[d]) * strides[d];
      }
      Put(nv, i, v->at(src));
    }
    return c.set_value(0, std::move(nv));
  }
  c.set(0, c.dtype(0), out);
}

void InferReshape(InferContext& c) {
  std::vector<int64_t> target = c.need_ints(1);
  const std::vector<int64_t>& in = c.shape(0);
  bool allowzero = c.node().attr_int("allowzero", 0) != 0;
  int64_t infer_at = -1, known = 1;
  std::vector<int64_t> out(target.size());
  for (size_t i = 0; i < target.size(); ++i) {
    int64_t t = target[i];
    if (t == 0 && !allowzero) {
      if (i >= in.size())
        c.fail("Reshape copies dimension " + std::to_string(i) + " the input lacks");
      t = in[i];
    }
    if (t == -1) {
      if (infer_at >= 0) c.fail("Reshape target has two -1 dimensions");
      infer_at = static_cast<int64_t>(i);
      continue;
    }
    if (t < 0) c.fail("Reshape target " + IntList(target) + " has a negative dimension");
    out[i] = t;
    if (__builtin_mul_overflow(known, t, &known))
      c.reject("Reshape target " + IntList(target) + " overflows int64");
  }
  int64_t total = Numel(in);
  if (infer_at >= 0) {
    if (known == 0 || total % known != 0) {
      c.fail("cannot reshape " + ShapeString(in) + " to " + IntList(target));
    }
    out[infer_at] = total / known;
  } else if (known != total) {
    c.fail("cannot reshape " + ShapeString(in) + " (" + std::to_string(total) + " elements) to " +
           ShapeString(out));
  }
  SetReshaped(c, std::move(out));
}

void InferFlatten(InferContext& c) {
  int64_t r = c.rank(0);
  int64_t axis = c.node().attr_int("axis", 1);
  if (axis < -r || axis > r)
    c.reject("Flatten axis " + std::to_string(axis) + " is out of range for rank " +
             std::to_string(r));
  if (axis < 0) axis += r;
  const std::vector<int64_t>& in = c.shape(0);
  int64_t outer = Numel(std::vector<int64_t>(in.begin(), in.begin() + axis));
  int64_t inner = Numel(std::vector<int64_t>(in.begin() + axis, in.end()));
  c.set(0, c.dtype(0), {outer, inner});
}

void InferTranspose(InferContext& c) {
  int64_t r = c.rank(0);
  std::vector<int64_t> perm = c.node().attr_ints("perm");
  if (perm.empty()) {
    perm.resize(r);
    for (int64_t i = 0; i < r; ++i) perm[i] = r - 1 - i;
  }
  if (static_cast<int64_t>(perm.size()) != r) c.fail("Transpose perm does not match the rank");
  std::vector<int64_t> out(r);
  for (int64_t i = 0; i < r; ++i) out[i] = c.shape(0)[NormAxis(perm[i], r, c)];
  if (const ConstValue* v = c.value(0); v && Trackable(out)) {
    ConstValue nv = MakeValue(v->dtype, out);
    std::vector<int64_t> strides = ContiguousStrides(c.shape(0));
    for (int64_t i = 0; i < Numel(out); ++i) {
      int64_t rem = i, src = 0;
      for (int64_t d = r - 1; d >= 0; --d) {
        src += (rem % out[d]) * strides[NormAxis(perm[d], r, c)];
        rem /= out[d];
      }
      Put(nv, i, v->at(src));
    }
    return c.set_value(0, std::move(nv));
  }
  c.set(0, c.dtype(0), out);
}

void InferExpand(InferContext& c) {
  std::vector<int64_t> out = Broadcast(c.shape(0), c.need_ints(1), c);
  if (const ConstValue* v = c.value(0); v && Trackable(out)) {
    ConstValue nv = MakeValue(v->dtype, out);
    for (int64_t i = 0; i < Numel(out); ++i) Put(nv, i, v->at(BroadcastIndex(i, out, v->shape)));
    return c.set_value(0, std::move(nv));
  }
  c.set(0, c.dtype(0), out);
}

void InferTile(InferContext& c) {
  std::vector<int64_t> reps = c.need_ints(1), out = c.shape(0);
  if (reps.size() != out.size()) c.fail("Tile repeats do not match the rank");
  for (size_t i = 0; i < out.size(); ++i) {
    if (reps[i] < 0) c.fail("Tile repeats " + IntList(reps) + " has a negative count");
    if (__builtin_mul_overflow(out[i], reps[i], &out[i]))
      c.reject("Tile output size overflows int64");
  }
  c.set(0, c.dtype(0), out);
}

void InferSplit(InferContext& c) {
  int64_t r = c.rank(0);
  int64_t axis = NormAxis(c.node().attr_int("axis", 0), r, c);
  int64_t dim = c.shape(0)[axis];
  std::vector<int64_t> split = c.has(1) ? c.need_ints(1) : c.node().attr_ints("split");
  size_t n = c.num_outputs();
  if (split.empty()) {
    int64_t each = (dim + static_cast<int64_t>(n) - 1) / static_cast<int64_t>(n);
    for (size_t i = 0; i < n; ++i)
      split.push_back(std::min(each, dim - each * static_cast<int64_t>(i)));
  }
  if (split.size() != n) c.fail("Split sizes do not match the number of outputs");
  int64_t total = 0;
  for (int64_t part : split) {
    if (part < 0) c.fail("Split sizes " + IntList(split) + " hold a negative size");
    if (__builtin_add_overflow(total, part, &total))
      c.reject("Split sizes " + IntList(split) + " overflow int64");
  }
  if (total != dim)
    c.fail("Split sizes " + IntList(split) + " do not add up to the axis size " +
           std::to_string(dim));
  for (size_t i = 0; i < n; ++i) {
    std::vector<int64_t> out = c.shape(0);
    out[axis] = split[i];
    if (c.has_output(i)) c.set(i, c.dtype(0), out);
  }
}

void InferPad(InferContext& c) {
  std::vector<int64_t> pads = c.has(1) ? c.need_ints(1) : c.node().attr_ints("pads");
  std::vector<int64_t> out = c.shape(0);
  int64_t r = c.rank(0);
  std::vector<int64_t> axes;
  if (c.has(3)) axes = c.need_ints(3);
  if (axes.empty()) {
    axes.resize(r);
    std::iota(axes.begin(), axes.end(), 0);
  }
  size_t k = axes.size();
  if (pads.size() != 2 * k) c.fail("Pad pads length does not match the axes");
  for (size_t i = 0; i < k; ++i) out[NormAxis(axes[i], r, c)] += pads[i] + pads[i + k];
  c.set(0, c.dtype(0), out);
}

void InferGatherElements(InferContext& c) { c.set(0, c.dtype(0), c.shape(1)); }

void InferTrilu(InferContext& c) { InferSameAsInput(c); }

// GatherND (opset 11/12/13): indices [b..., m..., k] pick k-tuples from data [b..., d...]:
// the output is indices' shape without its last axis, then data's axes after b + k.
void InferGatherND(InferContext& c) {
  const std::vector<int64_t>& data = c.shape(0);
  const std::vector<int64_t>& idx = c.shape(1);
  if (c.dtype(1) != DType::kInt64) c.reject("GatherND indices must be int64");
  const int64_t b = c.node().attr_int("batch_dims", 0);
  const int64_t r = static_cast<int64_t>(data.size()), q = static_cast<int64_t>(idx.size());
  if (r < 1 || q < 1) c.reject("GatherND data and indices must have rank >= 1");
  if (b < 0 || b >= std::min(r, q))
    c.reject("GatherND batch_dims " + std::to_string(b) + " must be below both ranks");
  const int64_t k = idx.back();
  if (k < 1 || k > r - b) {
    c.reject("GatherND indices' last dimension " + std::to_string(k) + " must be in [1, " +
             std::to_string(r - b) + "]");
  }
  for (int64_t d = 0; d < b; ++d) {
    if (data[d] != idx[d])
      c.reject("GatherND batch dimension " + std::to_string(d) +
               " differs between data and indices");
  }
  std::vector<int64_t> out(idx.begin(), idx.end() - 1);
  out.insert(out.end(), data.begin() + b + k, data.end());
  c.set(0, c.dtype(0), out);
}

}  // namespace memplan::rules
