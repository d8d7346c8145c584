// Analysis, plan, run and profile JSON into the GUI's document loader (gui/src/document.*,
// Qt-free): LoadItem's JSON branch, then what the dashboard computes from the item.
#include <cstddef>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

#include "document.h"
#include "fuzz_common.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace memplan;
  nlohmann::json j = nlohmann::json::parse(data, data + size, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return 0;
  fuzz::Guard([&] {
    gui::Item item = gui::ItemFromJson(j, "fuzz.json");
    for (const auto& t : {item.timeline, item.measured}) {
      if (!t) continue;
      (void)gui::DownsampleIndices(t->bytes, 300);
      (void)gui::BytesText(t->peak_bytes);
    }
    (void)gui::BytesText(item.plan_peak_bytes);
    (void)gui::BytesText(item.measured_peak_bytes);
    (void)gui::PercentText(item.overhead);
  });
  return 0;
}
