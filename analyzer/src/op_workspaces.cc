// Temporary buffers an op holds inside its forward or backward, beyond its outputs and
// gradients: measured on LibTorch's CPU kernels.
#include <algorithm>
#include <thread>

#include "op_rules_internal.h"

namespace memplan::rules {
namespace {

int64_t StrideProduct(const Node& n) {
  int64_t product = 1;
  for (int64_t s : n.attr_ints("strides")) product *= std::max<int64_t>(s, 1);
  return product;
}
// A 1x1 kernel with a stride: oneDNN subsamples its input (forward) and scatters the input
// gradient back (backward).
bool StridedOneByOne(const Node& n, const std::vector<int64_t>& weight_shape) {
  for (size_t d = 2; d < weight_shape.size(); ++d) {
    if (weight_shape[d] != 1) return false;
  }
  return StrideProduct(n) > 1;
}

}  // namespace

// nll_loss backward materializes the gradient of the log-probabilities before
// log_softmax backward turns it into the logits' gradient.
int64_t CrossEntropyWorkspace(const Node& n, const std::vector<Tensor>& t) { return t[n.inputs[0]].bytes; }
// Measured by the executor (LibTorch 2.14 CPU, oneDNN; resnext50_32x4d at batch 2, 4 and 16):
// convolution backward computes the weight gradient in oneDNN's blocked layout and reorders it
// (a weight-sized buffer), and passes grad_output and the input gradient through blocked
// copies (output + input sized); the transient is the larger of the two. A strided 1x1 conv
// also scatters the subsampled input gradient back (input + twice the output, measured).
// LibTorch takes oneDNN's path unless the conv is tiny (batch 1, kernel <= 3x3, no groups,
// input <= 20480 elements). (1.13 also skipped it for 1x1 stride-1 kernels under batch 16;
// 2.14 does not.)
int64_t ConvWorkspace(const Node& n, const std::vector<Tensor>& t) {
  const Tensor& x = t[n.inputs[0]];
  const std::vector<int64_t>& ws = t[n.inputs[1]].shape;
  const bool strided_one_by_one = StridedOneByOne(n, ws);
  int64_t batch = x.shape.empty() ? 1 : x.shape[0];
  bool big_kernel = ws.size() == 4 && ws[2] > 3 && ws[3] > 3;
  bool mkldnn = n.attr_int("group", 1) > 1 || big_kernel || batch > 1 || x.numel() > 20480;
  if (!mkldnn) return 0;
  int64_t w = t[n.inputs[1]].bytes, out = t[n.outputs[0]].bytes;
  int64_t in = x.has_gradient ? x.bytes : 0;
  int64_t bytes = std::max(w, out + in);
  if (strided_one_by_one) bytes = std::max(bytes, in + 2 * out);
  return bytes;
}
// Measured on LibTorch 2.14's CPU convolution (oneDNN), forward with and without autograd:
// the peak inside the op is the output plus max(0, input + weight - output): oneDNN's
// blocked-layout copies of the source and weights, or of the destination, whichever is
// larger (resnext50_32x4d, every conv within 0.02 MiB). A strided 1x1 conv also subsamples
// its input (a per-thread buffer of one image's strided input; counted for every image, an
// upper bound for any thread count).
int64_t ConvForwardWorkspace(const Node& n, const std::vector<Tensor>& t) {
  const Tensor& x = t[n.inputs[0]];
  const Tensor& w = t[n.inputs[1]];
  const int64_t out = t[n.outputs[0]].bytes;
  int64_t bytes = std::max(out, x.bytes + w.bytes);
  if (StridedOneByOne(n, w.shape)) bytes += x.bytes / StrideProduct(n);
  return bytes;
}
// erf backward computes 2/sqrt(pi) * exp(-x^2) * grad out of place: four input-sized
// temporaries are alive at its peak besides the input gradient.
int64_t ErfWorkspace(const Node& n, const std::vector<Tensor>& t) { return 4 * t[n.inputs[0]].bytes; }
// at::rms_norm's backward on the CPU is composite (pow, mean, rsqrt, two muls): besides the
// gradients the schedule holds, pow's and mean's backward hold input-sized temporaries (the
// expanded mean gradient, 2x, and their product) while the first product's gradient waits to be
// summed with them: three inputs' worth. Where the scale trains, the normalised tensor it saved
// (counted until the node's backward ends) is already freed then: two more.
// Measured on LibTorch 2.14: x[16,256] with a constant and with a trained scale.
int64_t RmsNormWorkspace(const Node& n, const std::vector<Tensor>& t) {
  const bool scale_trains = n.inputs.size() > 1 && n.inputs[1] != kNone && t[n.inputs[1]].has_gradient;
  return (scale_trains ? 2 : 3) * t[n.inputs[0]].bytes;
}
// Its forward: the normalised tensor is a temporary beside the output where the scale does not
// train (else it is saved, an extra).
int64_t RmsNormForwardWorkspace(const Node& n, const std::vector<Tensor>& t) {
  const bool scale_trains = n.inputs.size() > 1 && n.inputs[1] != kNone && t[n.inputs[1]].has_gradient;
  return scale_trains ? 0 : t[n.inputs[0]].bytes;
}
// The CPU's flash attention backward (LibTorch 2.14) gives each intra-op thread two float blocks of
// qSplit x kvSplit (the probabilities and their gradient): qSplit 32, 64 from 192 query rows on,
// 256 from 768; kvSplit the key length up to 512. Measured: 8 KiB per thread at T = 32 and 128 KiB
// at T = 256, with one and two threads. The analyzer cannot know how many threads a run will use:
// it counts LibTorch's default, one per hardware thread of this machine (runs with fewer threads
// are over-predicted by that much).
int64_t AttentionWorkspace(const Node& n, const std::vector<Tensor>& t) {
  const std::vector<int64_t>& q = t[n.inputs[0]].shape;
  const std::vector<int64_t>& kt = t[n.inputs[1]].shape;
  if (q.size() != 4 || kt.size() != 4) return 0;
  const int64_t rows = q[2], keys = kt[3];
  const int64_t q_split = std::min<int64_t>(rows, rows >= 768 ? 256 : rows >= 192 ? 64 : 32);
  const int64_t kv_split = std::min<int64_t>(keys, 512);
  const int64_t threads = std::max<int64_t>(1, static_cast<int64_t>(std::thread::hardware_concurrency()));
  return threads * 2 * q_split * kv_split * 4;
}
// Its forward copies K^T into a contiguous K (unless K^T is a transposed view of one): saved for the backward where autograd records (an
// extra), a temporary where it does not (a plan's early segments, recompute). Counted in every mode
// (the workspace rule has no mode): the recorded forward is over-predicted by K's bytes while it
// runs. Measured: vit_b_16 at batch 4, optimal at 75%: -0.28% without it.
int64_t AttentionForwardWorkspace(const Node& n, const std::vector<Tensor>& t) {
  return AttentionCopiesK(t[n.inputs[1]]) ? t[n.inputs[1]].bytes : 0;
}
// GatherND's forward (the executor's at::index on [batch, rest...]) holds its index tensors while it
// runs: arange(batch) and the k index columns with negative indices wrapped, int64 each. Where the
// data trains they are saved extras instead (measured: x[64,128,256], batch_dims 0 and 1).
int64_t GatherNDForwardWorkspace(const Node& n, const std::vector<Tensor>& t) {
  const Tensor& data = t[n.inputs[0]];
  const Tensor& idx = t[n.inputs[1]];
  if (idx.shape.empty() || data.shape.empty() || data.has_gradient) return 0;
  const int64_t b = n.attr_int("batch_dims", 0);
  const int64_t k = std::max<int64_t>(idx.shape.back(), 1);
  int64_t nb = 1;
  for (int64_t d = 0; d < b && d < static_cast<int64_t>(data.shape.size()); ++d) nb *= data.shape[d];
  return 8 * nb + 8 * k * (idx.numel() / k);
}
// clamp_backward builds two bool masks (x >= min, x <= max).
int64_t ClipWorkspace(const Node& n, const std::vector<Tensor>& t) { return 2 * t[n.inputs[0]].numel(); }
// native_batch_norm_backward (CPU) allocates an input-sized temporary besides grad_input.
int64_t BatchNormWorkspace(const Node& n, const std::vector<Tensor>& t) {
  return BatchNormIsTraining(n) ? t[n.inputs[0]].bytes : 0;
}

// mul / div backward (LibTorch 2.11 to 2.14): the gradient of each input is computed at the output's
// shape (grad * other, grad / other) and only then reduced to the input's shape (sum_to in
// the engine's validate_outputs, after the backward function returned all its gradients):
// an input smaller than the output (broadcast) needs an output-sized temporary.
int64_t BroadcastGradWorkspace(const Node& n, const std::vector<Tensor>& t) {
  int64_t bytes = 0;
  const Tensor& out = t[n.outputs[0]];
  for (size_t s = 0; s < n.inputs.size() && s < 2; ++s) {
    if (n.inputs[s] == kNone) continue;
    const Tensor& x = t[n.inputs[s]];
    if (x.has_gradient && x.numel() < out.numel()) bytes += out.bytes;
  }
  return bytes;
}

}  // namespace memplan::rules
