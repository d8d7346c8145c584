// ONNX bytes into loading (protobuf, ONNX shape inference, memplan's shape rules, the loss)
// and analysis (schedule, simulation, bottlenecks, JSON): what `memplan analyze` does.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include <nlohmann/json.hpp>

#include "fuzz_common.h"
#include "memplan/analyzer.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace memplan;
  const std::string bytes(reinterpret_cast<const char*>(data), size);
  // The options come from the input's length, so that one corpus covers both shape paths
  // (ONNX inference first, or memplan's rules alone) and every appended loss.
  // MEMPLAN_FUZZ_ONNX_INFERENCE=0 keeps ONNX's inference out: long runs on memplan's own
  // rules, past crashes inside ONNX (which memplan's validation must keep it from reaching).
  static const bool inference = [] {
    const char* v = std::getenv("MEMPLAN_FUZZ_ONNX_INFERENCE");
    return !(v && *v == '0');
  }();
  LoadOptions options;
  options.batch = 2;
  options.onnx_shape_inference = inference && size % 2 == 0;
  options.loss = static_cast<LossKind>((size / 2) % 3);
  options.optimizer = Optimizer::kAdam;
  fuzz::Guard([&] {
    Analysis a = Analyze(LoadTrainingGraphFromBytes(bytes, "fuzz.onnx", options));
    (void)AnalysisToJson(a).dump();
  });
  return 0;
}
