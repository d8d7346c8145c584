// Temporary buffers an op holds inside its forward or backward, beyond its outputs and
// gradients: measured on LibTorch's CPU kernels.
#include <algorithm>
#include <string>
#include <utility>

#include "op_rules_internal.h"

namespace memplan::rules {
namespace {

int64_t StrideProduct(const Node& n) {
  int64_t product = 1;
  for (int64_t s : n.attr_ints("strides")) product *= std::max<int64_t>(s, 1);
  return product;
}
int64_t DivUp(int64_t a, int64_t b) { return (a + b - 1) / b; }
int64_t RoundUp(int64_t a, int64_t b) { return DivUp(a, b) * b; }

// oneDNN's best_divider (jit_uni_1x1_conv_utils.hpp): the divider of `value` in [lo, hi] that
// wastes the least when value is rounded up to it.
int64_t BestDivider(int64_t value, int64_t lo, int64_t hi, bool find_max) {
  hi = std::max<int64_t>(1, std::min(hi, value));
  lo = std::max<int64_t>(1, std::min(lo, hi));
  double best = 1e300;
  int64_t divider = hi;
  for (int64_t d = hi; d >= lo; --d) {
    const double up = static_cast<double>(RoundUp(value, d));
    const double loss = (up - static_cast<double>(value)) / up;
    if ((find_max && loss < best) || (!find_max && loss <= best)) {
      best = loss;
      divider = d;
    }
  }
  return divider;
}

// How many threads oneDNN 3.12's fp32 backward-weights kernels split the minibatch over; each
// one past the first needs its own weight-gradient buffer to reduce. Ports of balance() in
// jit_avx512_common_1x1_conv_kernel.cpp (1x1) and jit_avx512_common_conv_kernel.cpp (others,
// "2d reduction" harness when oh > 9): they pick the split of the least modelled memory traffic.
struct BwdWeightsSplit {
  int64_t mb, ic, oc, ih, iw, oh, ow, kh, kw, sh, sw, ic_block;
};
int64_t MinibatchThreads1x1(const BwdWeightsSplit& j, int64_t threads) {
  const int64_t is = j.ih * j.iw;
  int64_t rb = BestDivider(is, 7, 16, true);
  if (is % rb != 0) rb = BestDivider(j.iw, 4, j.iw, false);
  if (rb > 256) rb = 1;
  const int64_t nb_bcast = DivUp(j.ic, 16), nb_load = DivUp(j.oc, 16), nb_reduce = DivUp(is, rb);
  auto cost = [&](int64_t m, int64_t o, int64_t i) {
    return DivUp(j.mb * nb_reduce, m) * DivUp(nb_bcast, i) * 16 * rb / j.sh / j.sw +
           DivUp(j.mb * nb_reduce, m) * DivUp(nb_load, o) * 16 * rb +
           12 * DivUp(nb_load, o) * DivUp(nb_bcast, i) * 256;
  };
  int64_t best = cost(1, 1, 1), mb = 1;
  for (int64_t m = 1; m <= std::min(threads, j.mb * nb_reduce); ++m) {
    const int64_t par = threads / m;
    for (int64_t o = 1; o <= std::min(par, nb_load); ++o) {
      const int64_t c = cost(m, o, std::min(par / o, nb_bcast));
      if (c <= best) {
        best = c;
        mb = m;
      }
    }
  }
  if (mb > threads / 2 && mb < threads) mb = std::min(j.mb, threads);
  return mb;
}
// oneDNN 3.12's reduce_balancer_t (cpu_reducer.cpp, lock-free): `njobs` jobs of `job_size`
// floats, each reduced over `reduction` items, split over `threads` into groups of threads that
// reduce one job together; the split of the least modelled traffic.
struct ReductionSplit {
  int64_t groups = 1, threads_per_group = 1, jobs_per_group = 1;
};
ReductionSplit BalanceReduction(int64_t threads, int64_t job_size, int64_t njobs, int64_t reduction,
                                int64_t max_buffer) {
  const int64_t min_jobs = std::max<int64_t>(1, njobs / threads);
  const int64_t max_jobs = std::max<int64_t>(1, max_buffer / (threads * job_size));
  ReductionSplit r;
  r.groups = std::min(njobs / min_jobs, threads);
  r.threads_per_group = std::min(threads / r.groups, reduction);
  r.jobs_per_group = DivUp(njobs, r.groups);
  int64_t best = njobs * job_size * reduction;
  for (int64_t c = min_jobs; c < njobs; ++c) {
    const int64_t groups = std::min(njobs / c, threads);
    const int64_t per_group = std::min(threads / groups, reduction);
    const int64_t jobs = DivUp(njobs, groups);
    if (per_group > 1 && jobs > max_jobs) continue;
    const int64_t cost = job_size * jobs * (DivUp(reduction, per_group) + (per_group != 1));
    if (cost < best) {
      r = {groups, per_group, jobs};
      best = cost;
    }
  }
  return r;
}
// The bias gradient's cpu_reducer of the 1x1 backward-weights kernels (AVX2 and AVX-512): where
// threads share an output-channel block across the minibatch, each one past a group's first
// reduces into its own block of floats (page-aligned), beside the groups' barriers.
int64_t BiasReducerScratch(int64_t threads, int64_t oc_block, int64_t N, int64_t nb_oc,
                           int64_t max_buffer) {
  const ReductionSplit b = BalanceReduction(threads, oc_block, nb_oc, N, max_buffer);
  if (b.threads_per_group <= 1) return 0;
  return b.groups * (b.threads_per_group - 1) * b.jobs_per_group * oc_block * 4 + 4096 +
         b.groups * 4096 + 4096;
}
// AVX2's backward-weights bias: padded to 8 channels where it is not a multiple, and reduced.
int64_t Avx2BiasScratch(int64_t threads, int64_t N, int64_t O, int64_t max_buffer) {
  return (O % 8 != 0 ? 4 * RoundUp(O, 8) + 128 : 0) +
         BiasReducerScratch(threads, 8, N, DivUp(O, 8), max_buffer);
}
// The scratchpad of AVX2's other backward weights (jit_avx2_convolution_bwd_weights_t: nChw8c, or
// a flat 3-channel input): the weight reducer (cpu_reducer_t: a job per 8x8 channel block pair,
// reduced over the minibatch; each thread past a group's first holds its jobs, page-aligned,
// beside the groups' barriers), the padded bias and the bias reducer, the balancers' buffer limit
// 2^21 floats (init_balancers). Measured: shufflenet_v2's 3 -> 24 stem at batch 8, 14,880 B.
int64_t Avx2JitBwdWeightsScratch(int64_t N, int64_t C, int64_t O, int64_t kernel, int64_t threads,
                                 bool bias) {
  const int64_t ic_block = C == 3 ? 3 : 8;
  const int64_t nb_oc = DivUp(O, 8), job = kernel * ic_block * 8;
  const int64_t max_buffer = int64_t{1} << 21;
  int64_t bytes = 0;
  const ReductionSplit w =
      BalanceReduction(threads, job, DivUp(C, ic_block) * nb_oc, N, max_buffer);
  if (w.threads_per_group > 1)
    bytes += w.groups * (w.threads_per_group - 1) * w.jobs_per_group * job * 4 + 4096 +
             w.groups * 4096 + 4096;
  if (bias) bytes += Avx2BiasScratch(threads, N, O, max_buffer);
  return bytes;
}
// oneDNN's shrink of a block count to a limit by its factors 2 and 3 (jit_avx2_1x1 init_conf).
int64_t ShrinkBlocks(int64_t n, int64_t limit) {
  while (n > limit) {
    if (n % 2 == 0)
      n /= 2;
    else if (n % 3 == 0)
      n /= 3;
    else
      break;
  }
  return n;
}
// The scratchpad of AVX2's 1x1 backward weights (jit_avx2_1x1_convolution_bwd_weights_t, nChw8c):
// a weight-gradient slot per thread of each group that reduces a job together and the groups'
// barriers (page-aligned), the padded bias and the bias reducer's. Booked as one buffer
// (ideep's user scratchpad). `pixels`: the output's (the reduction's) per image.
int64_t Avx2OneByOneBwdWeightsScratch(int64_t N, int64_t C, int64_t O, int64_t pixels,
                                      int64_t threads, bool bias) {
  const int64_t nb_oc = DivUp(O, 8), nb_ic = DivUp(C, 8);
  const int64_t oc_blocks = ShrinkBlocks(nb_oc, 32), ic_blocks = ShrinkBlocks(nb_ic, 9);
  const int64_t job = oc_blocks * ic_blocks * 64;
  const int64_t njobs = DivUp(nb_oc, oc_blocks) * DivUp(nb_ic, ic_blocks);
  const int64_t max_buffer = threads * job * 8;
  int64_t bytes = 0;
  const ReductionSplit w = BalanceReduction(threads, job, njobs, N * pixels, max_buffer);
  if (w.threads_per_group > 1)
    bytes +=
        w.groups * w.threads_per_group * w.jobs_per_group * job * 4 + 128 + w.groups * 4096 + 4096;
  if (bias) bytes += Avx2BiasScratch(threads, N, O, max_buffer);
  return bytes;
}
int64_t MinibatchThreadsJit(const BwdWeightsSplit& j, int64_t threads) {
  const int64_t nb_ic = DivUp(j.ic, j.ic_block), nb_oc = DivUp(j.oc, 16);
  const bool two_d = j.oh > 9;  // min_oh_reduce
  const int64_t ih_r = two_d ? j.ih : 1, oh_r = two_d ? j.oh : 1;
  const int64_t ih_n = two_d ? 1 : j.ih, oh_n = two_d ? 1 : j.oh;
  const int64_t oh_threads = std::max<int64_t>(1, oh_r / 9);
  auto mem = [&](int64_t m, int64_t o, int64_t i) {
    return DivUp(j.mb * ih_r, m) * DivUp(nb_ic, i) * j.ic_block * ih_n * j.iw / j.sh / j.sw +
           DivUp(j.mb * oh_r, m) * DivUp(nb_oc, o) * 16 * oh_n * j.ow +
           8 * DivUp(nb_oc, o) * DivUp(nb_ic, i) * j.kh * j.kw * j.ic_block * 16;
  };
  auto comp = [&](int64_t m, int64_t o, int64_t i) {
    return DivUp(j.mb * oh_r, m) * DivUp(nb_oc, o) * DivUp(nb_ic, i);
  };
  const int64_t mb_max = std::min(threads, j.mb * oh_threads);
  int64_t best_mem = mem(1, 1, 1), bm = 1, bo = 1, bi = 1;
  for (int64_t m = 1; m <= mb_max; ++m) {
    const int64_t par = threads / m;
    for (int64_t o = 1; o <= std::min(par, nb_oc); ++o) {
      const int64_t i = std::min(par / o, nb_ic), c = mem(m, o, i);
      if (c <= best_mem) {
        best_mem = c;
        bm = m;
        bo = o;
        bi = i;
      }
    }
  }
  int64_t best_comp = comp(bm, bo, bi);
  for (int64_t m = 1; m <= mb_max; ++m) {
    const int64_t par = threads / m;
    for (int64_t o = 1; o <= std::min(par, nb_oc); ++o) {
      const int64_t i = std::min(par / o, nb_ic), mc = mem(m, o, i), cc = comp(m, o, i);
      const bool near_mem = static_cast<double>(mc) < 1.1 * static_cast<double>(best_mem);
      if ((cc <= best_comp && near_mem) || 4 * cc <= 3 * best_comp) {
        best_comp = cc;
        bm = m;
        bo = o;
        bi = i;
      }
    }
  }
  if (bm > threads / 2 && bm < threads) bm = std::min(j.mb * oh_threads, threads);
  return bm;
}

// A 2-D fp32 convolution as LibTorch 2.14 runs it on oneDNN 3.12 (AVX-512, measured on LibTorch's
// counting allocator: every conv of regnet_y_400mf, regnet_y_800mf, mobilenet_v3_small,
// efficientnet_b1 and resnet18 at batch 4, one to four threads). ideep reorders the dense
// operands into the layout the kernel picked (a new buffer unless it already is that layout),
// allocates the results in that layout, and reorders them back into dense tensors:
// - blocked layouts pad channels to 16 (nChw16c data, OIhw16i16o weights, Goihw16g depthwise
//   weights; 8 where a group's channels are multiples of 8 but not 16), so a 440-channel tensor
//   takes 448 channels' bytes;
// - a first convolution (fewer than 16 input channels, not 1x1) reads its input as it is;
// - a strided convolution's input gradient comes from a channels-last kernel (brgconv_strided),
//   copied once before its dense copy: three input-sized buffers at once;
// - a strided 1x1 convolution first gathers each thread's image subsampled (oneDNN's "rtus");
// - backward weights splits the minibatch over threads (balance(), ported above): each thread
//   past the first reduces into a weight-sized buffer (and a bias-sized one, non-1x1 kernels),
//   plus a barrier (8,320 B with the scratchpad's alignment);
// - a bias whose channels are not a multiple of 16 is padded into the scratchpad.
// Checked against every convolution of those models: none under; over only where counted as a
// bound below, and for depthwise kernels larger than 3x3 (by up to one input: their backward
// holds fewer blocked copies than modelled).
struct OneDnnConv {
  bool mkldnn = false;
  int64_t forward = 0;   // peak above the dense output
  int64_t backward = 0;  // peak above the dense gradients
};

bool IsOneByOne(const std::vector<int64_t>& ws) {
  for (size_t d = 2; d < ws.size(); ++d) {
    if (ws[d] != 1) return false;
  }
  return true;
}

// A channels-last input (ConvNeXt's permute, layer norm, permute back) takes oneDNN's nhwc
// kernels: input and output stay nhwc (no blocked copies of data), LibTorch first makes the weight
// channels-last (a copy unless it already is: 1x1 kernels, depthwise). Measured on LibTorch 2.14.1
// (1 and 2 threads, no bias): dense 1x1, 2x2 stride 2, 3x3 and depthwise 7x7 / 3x3-on-2x2 maps.
// - forward: the weight copy, its blocked reorder, and (dense) a 4096 + 4120 B per thread
//   scratchpad;
// - dense backward: the weight copy and three weight-sized buffers of backward weights at once;
// - depthwise backward weights where oneDNN's depthwise kernel declines (kernel wider than 3, or
//   a map smaller than the kernel: jit_uni_dw_conv_bwd_weights_kernel_t::init_conf) runs the
//   generic kernel, whose gOIhw16i16o gradient pads each group's 1x1 channels to 16x16 (256
//   times the weight; AVX2's gOIhw8i8o: 8x8, 64 times), beside the dense gradient and one more
//   weight-sized buffer.
// On AVX2 a depthwise kernel larger than its map (ConvNeXt's 7x7 on 4x4 and 2x2 maps) is declined
// by the jit kernels too, and runs gemm's backward weights; measured (LibTorch 2.14.1, 2 threads,
// 384 and 768 channels at batch 4) 256 B and 160 B above the rule: AVX2's margin keeps 1 KiB.
bool Avx2DepthwiseGemm(int64_t simd, const std::vector<int64_t>& ws, const std::vector<int64_t>& xs,
                       bool weight_gradient) {
  return simd == 8 && weight_gradient && ws.size() == 4 && xs.size() == 4 &&
         (ws[2] > xs[2] || ws[3] > xs[3]);
}
// Returns false where not measured (depthwise kernels that oneDNN's depthwise kernel takes).
bool ChannelsLastConv(const Node& n, const Tensor& x, const Tensor& w, int64_t Y, int64_t wB,
                      int64_t threads, int64_t simd, OneDnnConv* r) {
  const std::vector<int64_t>& ws = w.shape;
  const int64_t group = n.attr_int("group", 1), W = w.bytes, e = DTypeSize(w.dtype);
  const bool depthwise = group > 1 && ws[1] == 1 && ws[0] == group;
  const int64_t weight_copy = ws[1] > 1 && ws[2] * ws[3] > 1 ? W : 0;
  const bool gin = x.has_gradient, gw = w.has_gradient;
  if (depthwise) {
    const std::vector<int64_t> st = n.attr_ints("strides"), pads = n.attr_ints("pads");
    const int64_t kh = ws[2], kw = ws[3], sh = st.size() == 2 ? st[0] : 1,
                  sw = st.size() == 2 ? st[1] : 1;
    int64_t max_pad = 0;
    for (int64_t p : pads) max_pad = std::max(max_pad, p);
    const int64_t top = pads.empty() ? 0 : pads[0];
    const bool dw_kernel = kw <= 3 && sw <= kw && max_pad <= std::min(kh, kw) / 2 &&
                           x.shape[2] >= kh + ((-top % sh) + sh) % sh;
    if (dw_kernel && gw) return false;
    r->forward = weight_copy + wB;
    if (Avx2DepthwiseGemm(simd, ws, x.shape, gw)) {
      // gemm_convolution_bwd_weights: per thread four weight-sized buffers and an im2col matrix
      // (kernel x output pixels per group), plus 256 B, as for wide kernels below.
      const int64_t pixels = Y / std::max<int64_t>(1, e * x.shape[0] * ws[0]);
      const int64_t nthr = x.shape[0] > 1 && pixels / threads < 256 ? threads : 1;
      r->backward = nthr * (4 * W + e * kh * kw * pixels) + 256;
      return true;
    }
    const int64_t bwd_data = gin ? wB : 0;
    const int64_t bwd_weights = gw ? group * simd * simd * ws[2] * ws[3] * e + W : 0;
    r->backward = weight_copy + std::max(bwd_data, bwd_weights);
    return true;
  }
  if (group != 1) return false;
  r->forward = weight_copy + wB + 4096 + 4120 * threads;
  r->backward = weight_copy + std::max(gin ? wB : 0, gw ? 2 * W : 0);
  return true;
}

OneDnnConv ModelConv(const Node& n, const std::vector<Tensor>& t, const CpuKernels& k) {
  OneDnnConv r;
  const Tensor& x = t[n.inputs[0]];
  const Tensor& w = t[n.inputs[1]];
  const Tensor& y = t[n.outputs[0]];
  const std::vector<int64_t>& xs = x.shape;
  const std::vector<int64_t>& ws = w.shape;
  const int64_t threads = k.threads;
  const int64_t batch = xs.empty() ? 1 : xs[0];
  const bool one_by_one = IsOneByOne(ws);
  const int64_t group = n.attr_int("group", 1);
  const int64_t strides = StrideProduct(n);
  bool dilated = false;
  for (int64_t d : n.attr_ints("dilations")) dilated = dilated || d > 1;
  // LibTorch's use_mkldnn (Convolution.cpp): single-threaded 1x1 unit-stride convolutions under
  // batch 16 take the native kernel, as do tiny ones.
  const bool big_kernel = ws.size() == 4 && ws[2] > 3 && ws[3] > 3;
  if (one_by_one && strides == 1 && !dilated && batch < 16 && threads == 1) return r;
  if (!(group > 1 || big_kernel || batch > 1 || x.numel() > 20480)) return r;
  r.mkldnn = true;
  const int64_t X = x.bytes, W = w.bytes, Y = y.bytes, e = DTypeSize(x.dtype);
  const bool depthwise = group > 1 && ws.size() > 1 && ws[1] == 1 && ws[0] == group;
  if (xs.size() != 4 || ws.size() != 4 || y.shape.size() != 4 || e != 4) {
    // 1-D/3-D and other dtypes (not measured): the blocked copies of input and weight, or of
    // grad output and input gradient, whichever is larger.
    const int64_t in = x.has_gradient ? X : 0;
    r.backward = std::max(W, Y + in);
    r.forward = std::max(Y, X + W);
    return r;
  }
  const int64_t N = xs[0], C = xs[1], H = xs[2], Wd = xs[3], O = ws[0], Ig = ws[1];
  const int64_t kh = ws[2], kw = ws[3], oh = y.shape[2], ow = y.shape[3];
  const int64_t og = O / group;
  // AVX2's kernels (jit_avx2_*) block channels by 8, AVX-512's by 16 (8 for groups of 8).
  const int64_t simd = k.family() == CpuKernelFamily::kAvx2 ? 8 : 16;
  const int64_t block = group == 1 || depthwise || (Ig % simd == 0 && og % simd == 0) ? simd : 8;
  const bool small_ic = group == 1 && C < 16 && !one_by_one;
  const int64_t xB = e * N * RoundUp(C, block) * H * Wd;
  const int64_t yB = e * N * RoundUp(O, block) * oh * ow;
  const int64_t wB = small_ic    ? e * RoundUp(O, simd) * C * kh * kw
                     : depthwise ? e * RoundUp(group, simd) * kh * kw
                                 : e * group * RoundUp(og, block) * RoundUp(Ig, block) * kh * kw;
  const int64_t x_copy = small_ic ? 0 : xB;
  const bool has_bias = n.inputs.size() > 2 && n.inputs[2] != kNone;
  const int64_t padded_bias =
      has_bias && group == 1 && O % simd != 0 ? e * RoundUp(O, simd) + 128 : 0;
  const std::vector<int64_t> st = n.attr_ints("strides");
  const int64_t sh = st.size() == 2 ? std::max<int64_t>(st[0], 1) : 1;
  const int64_t sw = st.size() == 2 ? std::max<int64_t>(st[1], 1) : 1;
  const bool rtus_used = one_by_one && strides > 1;
  const int64_t rtus = rtus_used ? std::min(threads, N) * (xB / N) / strides + 128 : 0;
  if (IsChannelsLastLayout(xs, StridesOf(x))) {
    if (ChannelsLastConv(n, x, w, Y, wB, threads, simd, &r)) return r;
  }
  r.forward = std::max(x_copy + wB + yB + rtus + padded_bias, yB + Y) - Y;

  const int64_t gin = x.has_gradient ? X : 0;
  const int64_t gw = w.has_gradient ? W : 0;
  const int64_t gb = has_bias && t[n.inputs[2]].has_gradient ? t[n.inputs[2]].bytes : 0;
  int64_t peak = 0;
  // AVX2 runs strided grouped convolutions' input gradient as AVX-512 runs dense ones: 3X
  // (measured on regnet_x_400mf's groups of 16 at strides 2: 2X - W above the gradients, exactly).
  const bool avx2 = simd == 8;
  if (gin > 0) {
    if (strides > 1 && (group == 1 || (avx2 && !depthwise)))
      peak = std::max({peak, Y + wB + X, 3 * X});
    else
      peak = std::max({peak, yB + wB + xB, xB + gin});
  }
  if (gw > 0 && group == 1 && kw > 14) {
    // oneDNN's jit backward weights takes kernels up to 14 wide; wider ones (ViT's 16x16 patch
    // embedding) run gemm_convolution_bwd_weights on the dense tensors. Measured (LibTorch 2.14.1,
    // 1 and 2 threads, 3-32 input channels, 15-32 wide, bias or not): each of its threads holds
    // four weight-sized buffers and one im2col matrix (input channels x kernel x output pixels),
    // plus 256 B. It splits the minibatch over every thread where the batch has more than one image
    // and each thread gets fewer than 256 output pixels (jcp.outer_threading), else runs on one.
    const int64_t pixels = oh * ow;
    const int64_t nthr = N > 1 && pixels / threads < 256 ? threads : 1;
    const int64_t col = e * C * kh * kw * pixels;
    peak = std::max(peak, gin + gw + gb + nthr * (4 * W + col) + 256);
  } else if (gw > 0) {
    int64_t scratch = padded_bias;
    int64_t weights_rtus = rtus;
    if (group == 1 && avx2 && one_by_one && !(H == 1 && Wd == 1)) {
      // The padded bias is part of this scratchpad.
      scratch = Avx2OneByOneBwdWeightsScratch(N, C, O, oh * ow, threads, gb > 0);
      // A strided 1x1 reduces its input per thread for the input-channel blocks of one job
      // (rtus_prepare_space_info: nb_bcast_blocking x output pixels x 8 channels).
      if (rtus_used) weights_rtus = threads * ShrinkBlocks(DivUp(C, 8), 9) * oh * ow * 8 * e + 128;
    } else if (group == 1 && avx2 && (C == 3 || C % 8 == 0) && O % 8 == 0) {
      scratch = Avx2JitBwdWeightsScratch(N, C, O, kh * kw, threads, gb > 0);
    } else if (group == 1) {
      // AVX-512's strided 1x1 reduces its input per thread for nb_bcast_blocking input-channel
      // blocks of 16 (best_divider(nb_ic, 5, nb_ic)): 8 of resnet's 16 and 32, 5 of regnet's 10.
      if (rtus_used && !avx2)
        weights_rtus =
            threads * BestDivider(DivUp(C, 16), 5, DivUp(C, 16), false) * oh * ow * 16 * e + 128;
      BwdWeightsSplit j{N, C, O, H, Wd, oh, ow, kh, kw, sh, sw, small_ic ? C : 16};
      if (one_by_one && strides > 1) j = {N, C, O, oh, ow, oh, ow, 1, 1, 1, 1, 16};  // after rtus
      const int64_t m =
          one_by_one ? MinibatchThreads1x1(j, threads) : MinibatchThreadsJit(j, threads);
      const int64_t per_thread = one_by_one ? wB : wB + e * RoundUp(O, 16);
      if (m > 1) scratch += (m - 1) * per_thread + 8320;
      // The bias reducer (jit_avx512_common_1x1_convolution.hpp's init_balancers; measured on
      // squeezenet1_1's squeezes: 12,352 B at 16 channels, 12,480 B at 48, batch 8, 2 threads).
      // (A 1x1 map runs the inner-product kernel instead.)
      if (one_by_one && gb > 0 && !(H == 1 && Wd == 1))
        scratch += BiasReducerScratch(threads, 16, N, DivUp(O, 16), threads * 3 * 5 * 5 * 16 * 16);
      // A 1x1 convolution on a 1x1 map (squeeze-and-excitation, a classifier written as a
      // convolution): its small-channel scratchpads are not modelled; measured up to 12,544 B
      // beyond the above (2 threads), counted as 24 KiB.
      if (one_by_one && H == 1 && Wd == 1) scratch += 24576;
    } else if (depthwise && DivUp(group, 16) < threads) {
      // Fewer channel blocks than threads: the minibatch is split too.
      scratch += (std::min(threads, N) - 1) * wB + 128;
    }
    // The bias gradient is computed in oneDNN's buffer, then copied to the dense one.
    peak = std::max(
        {peak, gin + yB + x_copy + wB + gb + scratch + weights_rtus, gin + wB + gw + 2 * gb});
  }
  // A depthwise kernel larger than its map (5x5 on 4x4): measured 4.53 input-sized buffers at
  // once (1152 channels); not modelled, counted as 5.
  if (depthwise && gin > 0 && (kh > H || kw > Wd)) peak = std::max(peak, 5 * X + gw);
  r.backward = std::max<int64_t>(0, peak - gin - gw - gb);
  return r;
}

}  // namespace

// nll_loss backward materializes the gradient of the log-probabilities before
// log_softmax backward turns it into the logits' gradient.
int64_t CrossEntropyWorkspace(const Node& n, const std::vector<Tensor>& t, const CpuKernels&) {
  return t[n.inputs[0]].bytes;
}
// Convolution backward and forward on LibTorch's CPU (oneDNN): ModelConv above. The native
// kernels LibTorch takes for tiny or single-threaded 1x1 convolutions hold nothing extra.
int64_t ConvWorkspace(const Node& n, const std::vector<Tensor>& t, const CpuKernels& k) {
  return ModelConv(n, t, k).backward;
}
int64_t ConvForwardWorkspace(const Node& n, const std::vector<Tensor>& t, const CpuKernels& k) {
  return ModelConv(n, t, k).forward;
}
// What the rules above may fall short by where they were not verified exactly: envelopes of
// measurements (bench/conv_workspaces.py, LibTorch 2.14.1, oneDNN 3.12, 2 threads, batch 4: the 94
// distinct convolutions of resnet18, mobilenet_v3_small, regnet_y_400mf and convnext_tiny, and the
// 3x3 and 1x1 convolutions of bench/conv_workspaces.md at 1 and 2 threads), never a bound oneDNN
// documents. The forward passes were never above the rules on any ISA: no forward margin.
// - AVX-512 (avx512_core and up): none under; no margin.
// - AVX2: unit-stride 1x1 convolutions reduce their weight gradient per thread (one weight-sized
//   buffer each and the 8,320 B barrier: measured exactly that on 48x144 and 440x440 maps, less on
//   the rest); every other convolution measured at or under the rule.
// - Other ISAs (SSE4.1: oneDNN's gemm convolutions): backward up to 9.2 weights (512x512 3x3 on a
//   7x7 map, 2 threads) or 3.7 input-plus-output sizes (64x64 3x3 on 56x56) per pass, growing with
//   the threads: counted as threads x (6 weights + 3 x (input + output)), blocked sizes.
WorkspaceMargin ConvWorkspaceMargin(const Node& n, const std::vector<Tensor>& t,
                                    const CpuKernels& k) {
  const CpuKernelFamily family = k.family();
  if (family == CpuKernelFamily::kAvx512) return {};
  if (!ModelConv(n, t, k).mkldnn || !n.has_backward) return {};
  const Tensor& x = t[n.inputs[0]];
  const Tensor& w = t[n.inputs[1]];
  const Tensor& y = t[n.outputs[0]];
  if (!w.has_gradient) return {};
  const int64_t wB = RoundUp(w.bytes, 64);
  if (family == CpuKernelFamily::kAvx2) {
    const int64_t group = n.attr_int("group", 1);
    const bool unit_1x1 = IsOneByOne(w.shape) && StrideProduct(n) == 1 && group == 1;
    const bool depthwise =
        group > 1 && w.shape.size() == 4 && w.shape[1] == 1 && w.shape[0] == group;
    if (depthwise && IsChannelsLastLayout(x.shape, StridesOf(x)) &&
        Avx2DepthwiseGemm(8, w.shape, x.shape, true))
      return {0, 1024};
    // 1x1 on a 1x1 map runs the inner-product kernel (its scratchpads are not modelled): a
    // weight per thread and the barrier, as the reduction it might take.
    const bool one_pixel = x.shape.size() == 4 && x.shape[2] == 1 && x.shape[3] == 1;
    return {0, unit_1x1 && one_pixel ? k.threads * wB + 8320 : 0};
  }
  return {0, k.threads * (6 * wB + 3 * (x.bytes + y.bytes))};
}
// erf backward computes 2/sqrt(pi) * exp(-x^2) * grad out of place: four input-sized
// temporaries are alive at its peak besides the input gradient.
int64_t ErfWorkspace(const Node& n, const std::vector<Tensor>& t, const CpuKernels&) {
  return 4 * t[n.inputs[0]].bytes;
}
// at::rms_norm's backward on the CPU is composite (pow, mean, rsqrt, two muls): besides the
// gradients the schedule holds, pow's and mean's backward hold input-sized temporaries (the
// expanded mean gradient, 2x, and their product) while the first product's gradient waits to be
// summed with them: three inputs' worth. Where the scale trains, the normalised tensor it saved
// (counted until the node's backward ends) is already freed then: two more.
// Measured on LibTorch 2.14: x[16,256] with a constant and with a trained scale.
int64_t RmsNormWorkspace(const Node& n, const std::vector<Tensor>& t, const CpuKernels&) {
  const bool scale_trains =
      n.inputs.size() > 1 && n.inputs[1] != kNone && t[n.inputs[1]].has_gradient;
  return (scale_trains ? 2 : 3) * t[n.inputs[0]].bytes;
}
// Its forward: the normalised tensor is a temporary beside the output where the scale does not
// train (else it is saved, an extra).
// native_layer_norm (CPU) runs on input.expect_contiguous(), forward and backward: a
// non-contiguous input (ConvNeXt's stem: a permuted convolution output) is copied each time.
int64_t LayerNormWorkspace(const Node& n, const std::vector<Tensor>& t, const CpuKernels&) {
  const Tensor& x = t[n.inputs[0]];
  return IsContiguousLayout(x.shape, StridesOf(x)) ? 0 : x.bytes;
}
int64_t RmsNormForwardWorkspace(const Node& n, const std::vector<Tensor>& t, const CpuKernels&) {
  const bool scale_trains =
      n.inputs.size() > 1 && n.inputs[1] != kNone && t[n.inputs[1]].has_gradient;
  return scale_trains ? 0 : t[n.inputs[0]].bytes;
}
// The CPU's flash attention backward (LibTorch 2.14) gives each intra-op thread two float blocks of
// qSplit x kvSplit (the probabilities and their gradient): qSplit 32, 64 from 192 query rows on,
// 256 from 768; kvSplit the key length up to 512. Measured: 8 KiB per thread at T = 32 and 128 KiB
// at T = 256, with one and two threads. The analyzer cannot know how many threads a run will use:
// it counts LibTorch's default (Threads(): one per physical core unless OMP_NUM_THREADS says;
// runs with fewer threads are over-predicted by that much).
int64_t AttentionWorkspace(const Node& n, const std::vector<Tensor>& t, const CpuKernels& k) {
  const std::vector<int64_t>& q = t[n.inputs[0]].shape;
  const std::vector<int64_t>& kt = t[n.inputs[1]].shape;
  if (q.size() != 4 || kt.size() != 4) return 0;
  const int64_t rows = q[2], keys = kt[3];
  const int64_t q_split = std::min<int64_t>(rows, rows >= 768 ? 256 : rows >= 192 ? 64 : 32);
  const int64_t kv_split = std::min<int64_t>(keys, 512);
  // And one float per row of a query block (the row sums of grad_out * out) in each chunk of
  // at::parallel_for over batch x heads, allocated inside the chunk: the threads' chunks run at
  // once, so as many as there are chunks are alive together (OpenMP splits n items among
  // min(threads, n) threads into chunks of ceil(n / that), the last ones possibly empty).
  // Measured on LibTorch 2.14.1, hf_vit_dynamo b4 (qSplit 17, 4 x 4 heads), two threads: two
  // 68 B blocks from two threads alive together at the attention backward's peak; one where one
  // thread's chunk ends before the other's starts (a loaded machine): counted as all at once.
  const int64_t items = std::max<int64_t>(1, q[0] * q[1]);
  const int64_t threads = std::min(k.threads, items);
  const int64_t per_chunk = (items + threads - 1) / threads;
  const int64_t chunks = (items + per_chunk - 1) / per_chunk;
  return k.threads * 2 * q_split * kv_split * 4 + chunks * 4 * q_split;
}
// Its forward copies K^T into a contiguous K (unless K^T is a transposed view of one): saved for
// the backward where autograd records (an extra), a temporary where it does not (a plan's early
// segments, recompute). Counted in every mode (the workspace rule has no mode): the recorded
// forward is over-predicted by K's bytes while it runs. Measured: vit_b_16 at batch 4, optimal at
// 75%: -0.28% without it. The CPU's flash attention forward (LibTorch 2.14) then gives each
// intra-op thread one float block of qSplit x kvSplit scores, qSplit row maxima and sums and a
// qSplit x head-size output (the splits as in the backward; hf_vit_dynamo, T = 17, head 16, two
// threads: 4,760 B measured), and a qSplit x kvSplit block of the element type for 16-bit types.
int64_t AttentionForwardWorkspace(const Node& n, const std::vector<Tensor>& t,
                                  const CpuKernels& k) {
  const Tensor& q = t[n.inputs[0]];
  const Tensor& kt = t[n.inputs[1]];
  int64_t bytes = AttentionCopiesK(kt) ? kt.bytes : 0;
  if (q.shape.size() != 4 || kt.shape.size() != 4) return bytes;
  const int64_t rows = q.shape[2], keys = kt.shape[3], head = q.shape[3];
  const int64_t q_split = std::min<int64_t>(rows, rows >= 768 ? 256 : rows >= 192 ? 64 : 32);
  const int64_t kv_split = std::min<int64_t>(keys, 512);
  const int64_t elem = DTypeSize(q.dtype);
  const int64_t per_thread = 4 * (q_split * kv_split + 2 * q_split + q_split * head) +
                             (elem == 2 ? elem * q_split * kv_split : 0);
  return bytes + k.threads * per_thread;
}
// GatherND's forward (the executor's at::index on [batch, rest...]) holds its index tensors while
// it runs: arange(batch) and the k index columns with negative indices wrapped, int64 each. Where
// the data trains they are saved extras instead (measured: x[64,128,256], batch_dims 0 and 1).
int64_t GatherNDForwardWorkspace(const Node& n, const std::vector<Tensor>& t, const CpuKernels&) {
  const Tensor& data = t[n.inputs[0]];
  const Tensor& idx = t[n.inputs[1]];
  if (idx.shape.empty() || data.shape.empty() || data.has_gradient) return 0;
  const int64_t b = n.attr_int("batch_dims", 0);
  const int64_t k = std::max<int64_t>(idx.shape.back(), 1);
  int64_t nb = 1;
  for (int64_t d = 0; d < b && d < static_cast<int64_t>(data.shape.size()); ++d)
    nb *= data.shape[d];
  return 8 * nb + 8 * k * (idx.numel() / k);
}
// ScatterND (reduction none or add) holds its wrapped int64 index columns while index_put runs;
// where it has a backward they are saved extras instead (SavesScatterND).
int64_t ScatterNDForwardWorkspace(const Node& n, const std::vector<Tensor>& t, const CpuKernels&) {
  const std::string red = n.attr_string("reduction", "none");
  const Tensor& idx = t[n.inputs[1]];
  if ((red != "none" && red != "add") || idx.shape.empty()) return 0;
  if (n.has_backward) return 0;
  const int64_t k = std::max<int64_t>(idx.shape.back(), 1);
  return 8 * k * (idx.numel() / k);
}
// clamp_backward builds two bool masks (x >= min, x <= max).
int64_t ClipWorkspace(const Node& n, const std::vector<Tensor>& t, const CpuKernels&) {
  return 2 * t[n.inputs[0]].numel();
}
// native_batch_norm_backward (CPU) allocates an input-sized temporary besides grad_input.
int64_t BatchNormWorkspace(const Node& n, const std::vector<Tensor>& t, const CpuKernels&) {
  return BatchNormIsTraining(n) ? t[n.inputs[0]].bytes : 0;
}

// mul / div backward (LibTorch 2.11 to 2.14): the gradient of each input is computed at the
// output's shape (grad * other, grad / other) and only then reduced to the input's shape (sum_to in
// the engine's validate_outputs, after the backward function returned all its gradients):
// an input smaller than the output (broadcast) needs an output-sized temporary.
int64_t BroadcastGradWorkspace(const Node& n, const std::vector<Tensor>& t, const CpuKernels&) {
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

namespace memplan {
namespace {

std::string Ints(const std::vector<int64_t>& v) {
  std::string s = "[";
  for (size_t i = 0; i < v.size(); ++i) s += (i ? "," : "") + std::to_string(v[i]);
  return s + "]";
}

}  // namespace

std::string WorkspaceSignature(const Node& n, const std::vector<Tensor>& t) {
  if (n.op_type != "Conv" || n.inputs.size() < 2) return "";
  const Tensor& x = t[n.inputs[0]];
  const Tensor& w = t[n.inputs[1]];
  const bool bias = n.inputs.size() > 2 && n.inputs[2] != kNone;
  std::string grads;
  if (n.has_backward) {
    if (x.has_gradient) grads += "x";
    if (w.has_gradient) grads += "w";
    if (bias && t[n.inputs[2]].has_gradient) grads += "b";
  }
  return "Conv " + std::string(DTypeName(x.dtype)) + " x" + Ints(x.shape) + " w" + Ints(w.shape) +
         " s" + Ints(n.attr_ints("strides")) + " p" + Ints(n.attr_ints("pads")) + " d" +
         Ints(n.attr_ints("dilations")) + " g" + std::to_string(n.attr_int("group", 1)) +
         (bias ? " bias" : "") + " grads[" + grads + "]" +
         (IsChannelsLastLayout(x.shape, StridesOf(x)) && !IsContiguousLayout(x.shape, StridesOf(x))
              ? " nhwc"
              : " nchw");
}

void SetCpuDevice(LoadOptions& options, const CpuDevice& d) {
  options.cpu_kernels = d.kernels;
  options.cpu_workspaces = d.workspaces;
}

std::map<std::string, int64_t> WorkspaceMarginsByOp(const TrainingGraph& g) {
  std::map<std::string, int64_t> by_op;
  for (const Node& n : g.nodes) {
    const int64_t m = std::max(n.forward_workspace_margin_bytes, n.backward_workspace_margin_bytes);
    if (m > 0) by_op[n.op_type] = std::max(by_op[n.op_type], m);
  }
  return by_op;
}

}  // namespace memplan
