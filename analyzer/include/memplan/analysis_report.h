// What `memplan analyze --json` writes ("kind": "analysis", DESIGN.md's contract) as a value
// type, with its one writer and one reader; and the pieces plan and run files share with it:
// the predicted timeline (TimelineToJson's points) and a CUDA prediction's fields
// (DeviceMemoryToJson's). The command line fills an AnalysisReport from an Analysis; the GUI
// reads analysis files with AnalysisReportFromJson only.
//
// Every field but "kind" is optional when read, so that files of older versions open (a field
// absent is unknown); AnalysisReportOf sets all of them, and an unset one is not written. A
// field present with the wrong type throws MemplanError naming it ("field 'timeline[3].bytes'
// is not a number"). Writing what was read gives the same JSON (tests/report_json_test.cc).
#pragma once

#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

namespace memplan {

struct Analysis;
struct DeviceMemory;
struct CudaDevice;
struct MemoryTimeline;
struct Schedule;
struct TrainingGraph;

// One step of a predicted timeline.
struct TimelinePoint {
  std::string event;        // "forward /conv1/Conv (Conv)" (Schedule::StepLabel)
  std::string phase;        // PhaseName: "setup", "forward", "loss", "backward", "recompute", ...
  int64_t bytes = 0;        // alive during the step (after its allocations, before its frees)
  int64_t bytes_after = 0;  // alive after the step's frees
  std::string node;         // the node's name; "" for steps without one (then not written)
  // Pinned host memory alive during the step (MemoryTimeline::host_bytes_during); -1 (not
  // written) when the schedule has no host buffer.
  int64_t host_bytes = -1;

  bool operator==(const TimelinePoint&) const = default;
};
std::vector<TimelinePoint> TimelinePoints(const TrainingGraph& g, const Schedule& s,
                                          const MemoryTimeline& t);
nlohmann::json TimelinePointsToJson(const std::vector<TimelinePoint>& points);
// Every point needs event, phase, bytes and bytes_after (counts); `field` names the array in
// messages.
std::vector<TimelinePoint> TimelinePointsFromJson(const nlohmann::json& points,
                                                  const std::string& field = "timeline");

// The fields of a prediction for a CUDA device (analysis and plan files made with --device
// cuda), at the top level of the file.
struct DevicePrediction {
  std::string device;          // "cuda" or "cuda:K"
  std::string device_name;     // "NVIDIA H200"; "" when not measured
  std::string device_source;   // where the device's figures come from
  std::string allocator_mode;  // "default" or "expandable_segments"
  int64_t workspace_bytes = 0;
  int64_t context_bytes = 0;
  bool context_measured = false;
  // The analysis writes it; a plan's reserved peak is its predicted_reserved_peak_bytes.
  std::optional<int64_t> reserved_peak_bytes;
  int64_t workspace_margin_bytes = 0;
  int64_t card_peak_bytes = 0;

  bool operator==(const DevicePrediction&) const = default;
};
DevicePrediction DevicePredictionOf(const DeviceMemory& m, const CudaDevice& d);
// Sets the fields in `j` (an object).
void WriteDevicePrediction(nlohmann::json& j, const DevicePrediction& d);
// The prediction when `j` has a "device" naming a CUDA device (cuda or cuda:K), else nullopt.
std::optional<DevicePrediction> ReadDevicePrediction(const nlohmann::json& j);

// A tensor that cuts the graph ("bottleneck_details").
struct BottleneckDetail {
  std::string name;
  int64_t bytes = 0;
  std::string producer;  // its producing node

  bool operator==(const BottleneckDetail&) const = default;
};

// A buffer alive at the peak ("largest_at_peak", the 20 largest).
struct BufferAtPeak {
  std::string name;
  int64_t bytes = 0;
  std::string category;  // MemoryCategoryName

  bool operator==(const BufferAtPeak&) const = default;
};

struct AnalysisReport {
  std::optional<std::string> memplan_version;
  std::optional<std::string> model;
  std::optional<int64_t> batch;
  std::optional<std::map<std::string, int64_t>> dims;  // the bound symbolic dims
  std::optional<int64_t> opset;
  std::optional<std::string> loss;       // LossKindName
  std::optional<std::string> optimizer;  // OptimizerName
  std::optional<std::string> grads;      // GradientLifetimeName
  std::optional<int64_t> num_nodes;
  std::optional<int64_t> num_tensors;
  std::optional<int64_t> num_parameters;
  std::optional<int64_t> param_bytes;
  std::optional<int64_t> input_bytes;
  std::optional<int64_t> peak_bytes;  // the unplanned step's peak
  std::optional<std::string> peak_event;
  std::optional<int64_t> peak_step;
  std::optional<std::map<std::string, int64_t>> breakdown;  // bytes by MemoryCategoryName
  std::optional<double> forward_flops;
  std::optional<double> backward_flops;
  std::optional<std::vector<std::string>> bottlenecks;  // tensor names
  std::optional<std::vector<BottleneckDetail>> bottleneck_details;
  std::optional<std::vector<BufferAtPeak>> largest_at_peak;
  std::optional<bool> weights_present;
  std::optional<int64_t> tensors_shaped_by_onnx;
  std::optional<int64_t> tensors_shaped_by_rules;
  std::optional<std::vector<std::string>> notes;
  std::optional<double> analysis_seconds;
  std::optional<std::vector<TimelinePoint>> timeline;
  // --device cuda: the device's prediction and the allocated peak under it.
  std::optional<DevicePrediction> device;
  std::optional<int64_t> allocated_peak_bytes;
  // Workspaces whose rules are unverified on the device's kernels (Analysis::margin_bytes), and
  // the CPU the prediction is for (CpuDeviceSummaryJson; the CLI sets it).
  std::optional<int64_t> margin_bytes;
  std::optional<std::map<std::string, int64_t>> margin_by_op;
  std::optional<nlohmann::json> cpu_device;

  bool operator==(const AnalysisReport&) const = default;
};

// The report of an analysis (every field but the CUDA ones set).
AnalysisReport AnalysisReportOf(const Analysis& a);
nlohmann::json AnalysisReportToJson(const AnalysisReport& r);
// "kind" must be "analysis".
AnalysisReport AnalysisReportFromJson(const nlohmann::json& j);

// A map of names to counts ("breakdown", "dims"), written and read the same in plan files.
namespace report_json {
nlohmann::json CountMapToJson(const std::map<std::string, int64_t>& m);
// Throws MemplanError naming `field` and the key of a value that is not a count.
std::map<std::string, int64_t> CountMap(const nlohmann::json& v, const std::string& field);
}  // namespace report_json

}  // namespace memplan
