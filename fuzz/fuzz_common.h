// Shared by the fuzz targets: what counts as a finding, and the small model the plan target
// and the seed generator agree on.
#pragma once

#include <cstdio>
#include <cstdlib>
#include <exception>
#include <new>

#include "memplan/training_graph.h"
#include "testing/graph_builder.h"

namespace memplan::fuzz {

// The CLI's contract (cli/main.cc): MemplanError and std::bad_alloc are exit 1, a clear user
// error; any other exception is exit 3, "internal error". Signals and sanitizer reports are
// always findings. Internal errors are findings only with MEMPLAN_FUZZ_STRICT=1, so that the
// known ones (issue 13) do not stop every run while they are being fixed.
inline bool Strict() {
  static const bool strict = [] {
    const char* v = std::getenv("MEMPLAN_FUZZ_STRICT");
    return v && *v && *v != '0';
  }();
  return strict;
}

template <class F>
void Guard(F&& f) {
  try {
    f();
  } catch (const MemplanError&) {
  } catch (const std::bad_alloc&) {
  } catch (const std::exception& e) {
    if (Strict()) {
      std::fprintf(stderr, "memplan fuzz: internal error (exit 3 in the CLI): %s\n", e.what());
      std::abort();
    }
  }
}

// The model plan JSON is checked against: a residual MLP with a fan-out, small enough that
// every strategy plans it in microseconds and large enough for several sections.
//   x[N,16] -> Mul w0 -> Relu -> MatMul w1 -> Relu -> Add(skip) -> MatMul w2 -> Relu -> MatMul w3
inline testing::GraphBuilder PlanModel() {
  testing::GraphBuilder b;
  b.Input("x", {-1, 16})
      .Param("w0", {16})
      .Param("w1", {16, 16})
      .Param("w2", {16, 16})
      .Param("w3", {16, 8});
  b.Node("Mul", {"x", "w0"}, {"h0"}).Node("Relu", {"h0"}, {"h1"});
  b.Node("MatMul", {"h1", "w1"}, {"h2"}).Node("Relu", {"h2"}, {"h3"});
  b.Node("Add", {"h3", "h1"}, {"h4"}).Node("MatMul", {"h4", "w2"}, {"h5"});
  b.Node("Relu", {"h5"}, {"h6"}).Node("MatMul", {"h6", "w3"}, {"y"}).Output("y");
  return b;
}
constexpr int64_t kPlanModelBatch = 4;

}  // namespace memplan::fuzz
