// Plan JSON into PlanFromJson against a small model: what `memplan run --plan` reads before
// it trains. The plan's batch helpers run first, as the CLI calls them before loading.
#include <cstddef>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

#include "fuzz_common.h"
#include "memplan/plan.h"

namespace {

const memplan::TrainingGraph& Model() {
  static const memplan::TrainingGraph g = [] {
    memplan::LoadOptions o;
    o.batch = memplan::fuzz::kPlanModelBatch;
    o.loss = memplan::LossKind::kSum;
    return memplan::fuzz::PlanModel().Load(o);
  }();
  return g;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace memplan;
  const TrainingGraph& g = Model();
  static const std::string fingerprint = ModelFingerprint(g);
  nlohmann::json j = nlohmann::json::parse(data, data + size, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return 0;
  // A mutated fingerprint only reaches the "made for another model" check; putting the right
  // one back lets the fuzzer past it into sections, checkpoints and the replay.
  if (j.is_object() && j.contains("fingerprint") && j["fingerprint"].is_string())
    j["fingerprint"] = fingerprint;
  fuzz::Guard([&] {
    if (j.is_object()) {
      (void)PlanGraphBatch(j);
      (void)PlanMicroBatches(j);
    }
    Plan p = PlanFromJson(j, g);
    (void)PlanToJson(p, g).dump();
  });
  return 0;
}
