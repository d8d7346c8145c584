// The time model: a roofline from FLOPs and bytes moved at a machine's rates, and its
// calibration by measured per-node times.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "memplan/planner.h"
#include "memplan/rates_cache.h"

namespace memplan {

MachineRates DefaultMachineRates(const std::string& device) {
  MachineRates r;
  if (device == "cuda" || device.rfind("cuda:", 0) == 0) {
    r.flops_per_second = 50e12;
    r.bytes_per_second = 2e12;
    r.op_overhead_seconds = 20e-6;
  } else {
    r.flops_per_second = 100e9;
    r.bytes_per_second = 10e9;
    r.op_overhead_seconds = 10e-6;
  }
  r.device = device;
  r.measured = false;
  return r;
}

double MachineRates::FlopsPerSecond(ComputeClass c) const {
  const double v = classes[static_cast<size_t>(c)].flops_per_second;
  return v > 0 ? v : flops_per_second;
}

double MachineRates::BytesPerSecond(ComputeClass c) const {
  const double v = classes[static_cast<size_t>(c)].bytes_per_second;
  return v > 0 ? v : bytes_per_second;
}

nlohmann::json MachineRatesToJson(const MachineRates& r) {
  nlohmann::json j = {{"device", r.device},
                      {"measured", r.measured},
                      {"flops_per_second", r.flops_per_second},
                      {"bytes_per_second", r.bytes_per_second},
                      {"op_overhead_seconds", r.op_overhead_seconds}};
  nlohmann::json classes = nlohmann::json::object();
  for (int k = 0; k < kNumComputeClasses; ++k) {
    const MachineRates::ClassRates& c = r.classes[k];
    if (c.flops_per_second <= 0 && c.bytes_per_second <= 0) continue;
    nlohmann::json e = nlohmann::json::object();
    if (c.flops_per_second > 0) e["flops_per_second"] = c.flops_per_second;
    if (c.bytes_per_second > 0) e["bytes_per_second"] = c.bytes_per_second;
    classes[ComputeClassName(static_cast<ComputeClass>(k))] = e;
  }
  if (!classes.empty()) j["classes"] = classes;
  j["fresh_bytes_per_second"] = r.fresh_bytes_per_second;
  j["fresh_threshold_bytes"] = r.fresh_threshold_bytes;
  if (r.link.device_to_host_bytes_per_second > 0 || r.link.host_to_device_bytes_per_second > 0) {
    j["link"] = {{"device_to_host_bytes_per_second", r.link.device_to_host_bytes_per_second},
                 {"host_to_device_bytes_per_second", r.link.host_to_device_bytes_per_second}};
  }
  return j;
}

namespace {

double Rate(const nlohmann::json& j, const std::string& key, bool may_be_zero,
            const std::string& where = "") {
  auto it = j.find(key);
  if (it == j.end() || !it->is_number()) {
    throw MemplanError("machine rates: \"" + where + key + "\" must be a number");
  }
  const double v = it->get<double>();
  if (!std::isfinite(v) || v < 0 || (v == 0 && !may_be_zero)) {
    throw MemplanError("machine rates: \"" + where + key + "\" must be finite and " +
                       (may_be_zero ? ">= 0" : "> 0") + ", not " + it->dump());
  }
  return v;
}

void ReadClassRates(const nlohmann::json& classes, MachineRates& r) {
  if (!classes.is_object()) throw MemplanError("machine rates: \"classes\" must be an object");
  for (const auto& [name, rates] : classes.items()) {
    int k = 0;
    while (k < kNumComputeClasses && name != ComputeClassName(static_cast<ComputeClass>(k))) ++k;
    if (k == kNumComputeClasses) {
      std::string known;
      for (int i = 0; i < kNumComputeClasses; ++i) {
        known += std::string(i ? ", " : "") + ComputeClassName(static_cast<ComputeClass>(i));
      }
      throw MemplanError("machine rates: \"classes\" names an unknown class '" + name +
                         "' (known: " + known + ")");
    }
    if (!rates.is_object())
      throw MemplanError("machine rates: \"classes." + name + "\" must be an object");
    const std::string where = "classes." + name + ".";
    MachineRates::ClassRates& c = r.classes[k];
    if (rates.contains("flops_per_second"))
      c.flops_per_second = Rate(rates, "flops_per_second", true, where);
    if (rates.contains("bytes_per_second"))
      c.bytes_per_second = Rate(rates, "bytes_per_second", true, where);
  }
}

}  // namespace

MachineRates MachineRatesFromJson(const nlohmann::json& j) {
  if (!j.is_object()) throw MemplanError("machine rates: expected a JSON object");
  MachineRates r;
  r.flops_per_second = Rate(j, "flops_per_second", false);
  r.bytes_per_second = Rate(j, "bytes_per_second", false);
  r.op_overhead_seconds = Rate(j, "op_overhead_seconds", true);
  auto device = j.find("device");
  if (device != j.end()) {
    if (!device->is_string()) throw MemplanError("machine rates: \"device\" must be a string");
    r.device = device->get<std::string>();
  }
  auto classes = j.find("classes");
  if (classes != j.end()) ReadClassRates(*classes, r);
  if (j.contains("fresh_bytes_per_second")) {
    r.fresh_bytes_per_second = Rate(j, "fresh_bytes_per_second", true);
    const double threshold = Rate(j, "fresh_threshold_bytes", true);
    if (threshold > 9e18)
      throw MemplanError("machine rates: \"fresh_threshold_bytes\" is too large");
    r.fresh_threshold_bytes = static_cast<int64_t>(threshold);
  }
  auto link = j.find("link");
  if (link != j.end()) {
    if (!link->is_object()) throw MemplanError("machine rates: \"link\" must be an object");
    r.link.device_to_host_bytes_per_second =
        Rate(*link, "device_to_host_bytes_per_second", false, "link.");
    r.link.host_to_device_bytes_per_second =
        Rate(*link, "host_to_device_bytes_per_second", false, "link.");
  }
  auto measured = j.find("measured");
  if (measured != j.end()) {
    if (!measured->is_boolean())
      throw MemplanError("machine rates: \"measured\" must be true or false");
    r.measured = measured->get<bool>();
  }
  return r;
}

double NodeBytesMoved(const TrainingGraph& g, const Node& n) {
  bool writes = false;
  double bytes = 0;
  for (TensorId o : n.outputs) {
    if (o == kNone || g.tensors[o].is_view()) continue;
    writes = true;
    bytes += static_cast<double>(g.tensors[o].bytes);
  }
  // A view op only makes a new header for its input's storage.
  if (!writes) return 0;
  std::set<TensorId> read;
  for (TensorId i : n.inputs) {
    if (i != kNone && read.insert(i).second) bytes += static_cast<double>(g.tensors[i].bytes);
  }
  return bytes;
}

bool NodeIsFolded(const TrainingGraph& g, const Node& n) {
  if (n.outputs.empty()) return false;
  for (TensorId o : n.outputs) {
    if (o != kNone && g.tensors[o].category != TensorCategory::kConstant) return false;
  }
  return true;
}

double RooflineSeconds(const TrainingGraph& g, const Node& n, const MachineRates& rates) {
  if (NodeIsFolded(g, n)) return 0;
  const ComputeClass c = ComputeClassOf(n, g.tensors);
  const double flops_rate = rates.FlopsPerSecond(c), bytes_rate = rates.BytesPerSecond(c);
  const double compute = flops_rate > 0 ? n.forward_flops / flops_rate : 0;
  const double memory = bytes_rate > 0 ? NodeBytesMoved(g, n) / bytes_rate : 0;
  double fresh = 0;
  if (rates.fresh_bytes_per_second > 0) {
    auto add = [&](int64_t bytes) {
      if (bytes >= rates.fresh_threshold_bytes) fresh += static_cast<double>(bytes);
    };
    for (TensorId o : n.outputs) {
      if (o != kNone && !g.tensors[o].is_view()) add(g.tensors[o].bytes);
    }
    for (const SavedExtra& e : n.saved_extras) add(e.bytes);
    fresh /= rates.fresh_bytes_per_second;
  }
  return std::max(compute, memory) + fresh + rates.op_overhead_seconds;
}

NodeSecondsFn RooflineNodeSeconds(const MachineRates& rates) {
  return [rates](const TrainingGraph& g, const Node& n) { return RooflineSeconds(g, n, rates); };
}

std::vector<double> PredictNodeSeconds(const TrainingGraph& g, const CostModel& cost) {
  const bool costed = cost.tensor_bytes || cost.node_flops;
  const TrainingGraph applied = costed ? ApplyCostModel(g, cost) : TrainingGraph{};
  const TrainingGraph& graph = costed ? applied : g;
  const NodeSecondsFn seconds =
      cost.node_seconds ? cost.node_seconds : RooflineNodeSeconds(DefaultMachineRates("cpu"));
  std::vector<double> out(graph.nodes.size());
  for (const Node& n : graph.nodes) out[n.id] = seconds(graph, n);
  return out;
}

Calibration CalibrateNodeSeconds(const TrainingGraph& g, const MeasuredTimes& measured,
                                 const MachineRates& rates) {
  const std::string& src =
      measured.source.empty() ? std::string("the measured times") : measured.source;
  if (measured.nodes.empty()) {
    throw MemplanError(src +
                       " has no forward or recompute time of any node; profile the model with "
                       "`memplan run " +
                       g.model_path + " --profile " + src + "`");
  }
  // 1. Every measured node must be a node of this graph with the same op.
  std::map<std::string, double> seconds;  // per call, at the measured batch
  for (const MeasuredNodeTime& m : measured.nodes) {
    const NodeId id = g.FindNode(m.name);
    if (id == kNone || (!m.op.empty() && g.nodes[id].op_type != m.op)) {
      throw MemplanError(
          src + " is a profile of another model: its node '" + m.name + "' (" + m.op + ") " +
          (id == kNone ? "is not a node of " + g.model_path
                       : "is a " + g.nodes[id].op_type + " in " + g.model_path) +
          "; profile this model with `memplan run " + g.model_path + " --profile " + src + "`");
    }
    seconds[m.name] = m.seconds;
  }
  // 2. Times at another batch: as the roofline scales when it was measured at this graph's batch
  // (its roofline there is at hand), else a fixed per-op part and a per-row part.
  const int64_t measured_rows = measured.batch > 0 ? measured.batch : g.batch;
  const double measured_batch = static_cast<double>(measured_rows);
  const double overhead = rates.op_overhead_seconds;
  auto affine = [overhead, measured_batch](double s, int64_t batch) {
    const double fixed = std::min(s, overhead);
    return fixed + (s - fixed) * static_cast<double>(batch) / measured_batch;
  };
  Calibration c;
  std::vector<double> ratios;
  std::map<std::string, double> measured_roofline;  // at the measured batch, when g is at it
  for (const Node& n : g.nodes) {
    auto it = seconds.find(n.name);
    if (it == seconds.end()) {
      ++(NodeIsFolded(g, n) ? c.folded_nodes : c.missing_nodes);
      continue;
    }
    ++c.measured_nodes;
    const double roofline = RooflineSeconds(g, n, rates);
    if (g.batch == measured_rows) measured_roofline[n.name] = roofline;
    if (roofline > 0) ratios.push_back(affine(it->second, g.batch) / roofline);
  }
  // 3. The median ratio prices the nodes the measurement lacks.
  if (!ratios.empty()) {
    std::sort(ratios.begin(), ratios.end());
    const size_t mid = ratios.size() / 2;
    c.median_ratio = ratios.size() % 2 ? ratios[mid] : (ratios[mid - 1] + ratios[mid]) / 2;
  }
  const double ratio = c.median_ratio;
  c.node_seconds = [seconds, measured_rows, measured_roofline, affine, rates, ratio](
                       const TrainingGraph& graph, const Node& n) {
    auto it = seconds.find(n.name);
    if (it == seconds.end()) return RooflineSeconds(graph, n, rates) * ratio;
    if (graph.batch == measured_rows) return it->second;
    auto m = measured_roofline.find(n.name);
    if (m != measured_roofline.end() && m->second > 0)
      return it->second * RooflineSeconds(graph, n, rates) / m->second;
    return affine(it->second, graph.batch);
  };
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.3g", ratio);
  c.notes.push_back(
      "times calibrated by " + src + ": " + std::to_string(c.measured_nodes) + " of " +
      std::to_string(g.nodes.size()) + " nodes measured" +
      (c.missing_nodes > 0 ? ", " + std::to_string(c.missing_nodes) + " at the roofline x " + buf +
                                 " (the median measured / roofline)"
                           : "") +
      (c.folded_nodes > 0 ? ", " + std::to_string(c.folded_nodes) + " folded to constants (not run)"
                          : ""));
  if (measured.batch > 0 && measured.batch != g.batch) {
    c.notes.push_back(src + " was measured at batch " + std::to_string(measured.batch) +
                      "; its times are scaled "
                      "linearly to batch " +
                      std::to_string(g.batch) + " (but for the per-op overhead)");
  }
  return c;
}

namespace {
bool IsRatesCache(const nlohmann::json& cache) {
  if (!cache.is_object()) return false;
  auto kind = cache.find("kind"), format = cache.find("format"), rates = cache.find("rates");
  return kind != cache.end() && *kind == "machine_rates" && format != cache.end() &&
         *format == kRatesCacheFormat && rates != cache.end() && rates->is_object();
}
}  // namespace

std::optional<MachineRates> RatesFromCache(const nlohmann::json& cache, const std::string& key) {
  // An entry without class or fresh-memory rates was written before they were measured.
  if (!IsRatesCache(cache)) return std::nullopt;
  const nlohmann::json& rates = cache["rates"];
  auto it = rates.find(key);
  if (it == rates.end() || !it->is_object() || !it->contains("classes") ||
      !it->contains("fresh_bytes_per_second")) {
    return std::nullopt;
  }
  return MachineRatesFromJson(*it);
}

nlohmann::json CacheWithRates(nlohmann::json cache, const std::string& key,
                              const MachineRates& rates) {
  if (!IsRatesCache(cache)) cache = nlohmann::json::object();
  cache["kind"] = "machine_rates";
  cache["format"] = kRatesCacheFormat;
  cache["memplan_version"] = MEMPLAN_VERSION;
  cache["rates"][key] = MachineRatesToJson(rates);
  return cache;
}

MachineRates CachedMachineRates(const std::string& path, const std::string& key,
                                const std::function<MachineRates()>& measure, std::string* source) {
  nlohmann::json cache = nlohmann::json::object();
  std::error_code ec;
  if (!path.empty() && std::filesystem::exists(path, ec)) {
    try {
      std::ifstream in(path, std::ios::binary);
      std::stringstream text;
      text << in.rdbuf();
      cache = nlohmann::json::parse(text.str());
    } catch (const std::exception&) {  // a damaged cache is measured again and rewritten
      cache = nlohmann::json::object();
    }
    try {
      if (std::optional<MachineRates> r = RatesFromCache(cache, key)) {
        *source = "measured, cached in " + path;
        return *r;
      }
    } catch (const std::exception&) {  // a damaged entry: measured again and rewritten
    }
  }
  MachineRates r = measure();
  *source = "measured now";
  if (!path.empty()) {
    try {
      const std::filesystem::path folder = std::filesystem::path(path).parent_path();
      if (!folder.empty()) std::filesystem::create_directories(folder);
      WriteJsonFile(path, CacheWithRates(std::move(cache), key, r));
      *source += ", cached in " + path;
    } catch (const std::exception& e) {
      *source += std::string(" (not cached: ") + e.what() + ")";
    }
  }
  return r;
}

}  // namespace memplan
