// What differs between the LibTorch versions the executor supports: 2.11 (the oldest; the lent
// GPU machines have 2.11.0+cu130) to the version scripts/requirements.txt pins. Every
// version-dependent spelling lives here, keyed on torch/version.h, so that the trainer and the
// communicator read the same on every version. Checked by building against 2.11.0 in CI (make
// check-torch211) and the pin in `make test`; the boundaries below were read in the PyPI wheels'
// headers (2.11.0, 2.12.1, 2.13.0, 2.14.1, 2.15.0).
#pragma once

#include <torch/csrc/autograd/variable.h>
#include <torch/version.h>

#include <memory>
#include <type_traits>
#include <utility>

// True when the LibTorch being compiled against is MAJOR.MINOR or newer.
#define MEMPLAN_TORCH_AT_LEAST(major, minor) \
  (TORCH_VERSION_MAJOR > (major) ||          \
   (TORCH_VERSION_MAJOR == (major) && TORCH_VERSION_MINOR >= (minor)))

#if !MEMPLAN_TORCH_AT_LEAST(2, 11)
#error "memplan's executor needs LibTorch 2.11 or newer (torch/version.h says " TORCH_VERSION ")"
#endif

namespace memplan::exec::torch_compat {

// A leaf's AccumulateGrad node, as torch::autograd::impl::grad_accumulator returns it: a
// std::shared_ptr up to 2.12, a c10::intrusive_ptr from 2.13 on.
#if MEMPLAN_TORCH_AT_LEAST(2, 13)
using NodePtr = c10::intrusive_ptr<torch::autograd::Node>;
#else
using NodePtr = std::shared_ptr<torch::autograd::Node>;
#endif
static_assert(std::is_same_v<NodePtr, decltype(torch::autograd::impl::grad_accumulator(
                                          std::declval<const at::Tensor&>()))>,
              "torch_compat.h: grad_accumulator's pointer type changed at another version than the "
              "one written here");

// Backend::all_gather_single (2.14 on; _allgather_base, its old name, is kept there as a
// deprecated alias) gathers each rank's `in` into `out` (world size x in's elements). A template,
// so that this header needs no c10d header (only distributed.cc includes them).
template <class Backend, class Tensor>
auto AllGatherSingle(Backend& backend, Tensor& out, Tensor& in) {
#if MEMPLAN_TORCH_AT_LEAST(2, 14)
  return backend.all_gather_single(out, in);
#else
  return backend._allgather_base(out, in);
#endif
}

}  // namespace memplan::exec::torch_compat
