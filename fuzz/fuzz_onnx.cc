// ONNX bytes into loading (protobuf, ONNX shape inference, memplan's shape rules, the loss)
// and analysis (schedule, simulation, bottlenecks, JSON): what `memplan analyze` does.
#include <cstddef>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

#include "fuzz_common.h"
#include "memplan/analyzer.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace memplan;
  const std::string bytes(reinterpret_cast<const char*>(data), size);
  // The options come from the input's length, so that one corpus covers every appended loss.
  // ONNX's C++ shape inference stays off, as in memplan itself: libonnx 1.12 crashes on
  // malformed files (unsorted graphs, short initializer data), so it is only a test oracle
  // on the trusted corpus (LoadOptions::onnx_shape_inference).
  LoadOptions options;
  options.batch = 2;
  options.loss = static_cast<LossKind>((size / 2) % 3);
  options.optimizer = Optimizer::kAdam;
  fuzz::Guard([&] {
    Analysis a = Analyze(LoadTrainingGraphFromBytes(bytes, "fuzz.onnx", options));
    (void)AnalysisToJson(a).dump();
  });
  return 0;
}
