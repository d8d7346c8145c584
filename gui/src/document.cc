#include "document.h"

#include <sys/stat.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <tuple>
#include <unordered_map>
#include <unordered_set>

#include "memplan/analysis_report.h"
#include "memplan/cuda_device.h"
#include "memplan/json_read.h"
#include "memplan/lifetimes.h"
#include "memplan/plan.h"
#include "memplan/plan_report.h"
#include "memplan/planner.h"
#include "memplan/run_report.h"
#include "memplan/storage_facts.h"

namespace memplan::gui {

namespace {

using nlohmann::json;

std::string BaseName(const std::string& path) {
  size_t slash = path.find_last_of('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

Phase PhaseFromName(const std::string& s) {
  if (s == "setup") return Phase::kSetup;
  if (s == "loss") return Phase::kLoss;
  if (s == "backward") return Phase::kBackward;
  if (s == "recompute") return Phase::kRecompute;
  if (s == "optimizer") return Phase::kOptimizer;
  if (s == "communication") return Phase::kCommunication;
  return Phase::kForward;
}

int CategoryFromName(const std::string& s) {
  for (int c = 0; c < kNumMemoryCategories; ++c) {
    if (s == MemoryCategoryName(static_cast<MemoryCategory>(c))) return c;
  }
  return -1;
}

// Appends one step: `event` when given, else "phase node".
void AddTimelinePoint(TimelineData& t, int64_t bytes, const std::string& phase, std::string event,
                      std::string node) {
  if (event.empty()) event = node.empty() ? phase : phase + " " + node;
  if (bytes > t.peak_bytes || t.bytes.empty()) {
    t.peak_bytes = bytes;
    t.peak_step = static_cast<int64_t>(t.bytes.size());
  }
  t.bytes.push_back(bytes);
  t.phases.push_back(PhaseFromName(phase));
  t.events.push_back(std::move(event));
  t.nodes.push_back(std::move(node));
}

// An analysis's, plan's or run's predicted timeline: the bytes during each step.
std::shared_ptr<TimelineData> TimelineOf(const std::vector<TimelinePoint>& points,
                                         const std::string& label) {
  auto t = std::make_shared<TimelineData>();
  t->label = label;
  t->bytes.reserve(points.size());
  for (const TimelinePoint& p : points) AddTimelinePoint(*t, p.bytes, p.phase, p.event, p.node);
  return t;
}

void ReadBreakdown(const std::optional<std::map<std::string, int64_t>>& breakdown, Item& item) {
  if (!breakdown) return;
  item.breakdown = {};
  item.has_breakdown = false;
  for (const auto& [k, v] : *breakdown) {
    int c = CategoryFromName(k);
    if (c < 0) continue;
    item.breakdown[c] = v;
    item.has_breakdown = true;
  }
}

// The plan's data-parallel layout, read by the planner's reader (PlanLayout).
void ReadLayout(const PlanReport& r, Item& item) {
  if (!r.layout) return;
  const json plan = {{"layout", *r.layout}};
  const ParallelLayout layout = PlanLayout(plan);
  if (layout.devices <= 1) return;
  item.devices = layout.devices;
  item.shard = ShardModeName(layout.shard);
  using namespace json_read;
  item.bucket_count =
      static_cast<int64_t>(Get(*r.layout, "layout", "buckets", ArrayOf(ArrayOf(String))).size());
  if (r.layout->contains("comm_seconds"))
    item.predicted_comm_seconds = Seconds((*r.layout)["comm_seconds"], "layout.comm_seconds");
}

// The CUDA fields of an analysis or plan made with --device cuda.
void ReadDeviceFields(const std::optional<DevicePrediction>& d, Item& item) {
  if (!d) return;
  item.predicted_for = d->device;
  item.allocator_mode = d->allocator_mode;
  item.workspace_bytes = d->workspace_bytes;
  item.context_bytes = d->context_bytes;
}

void ReadPlanFields(const PlanReport& r, Item& item) {
  item.strategy = r.strategy.value_or("");
  ReadDeviceFields(r.device, item);
  item.predicted_reserved_peak_bytes = r.predicted_reserved_peak_bytes.value_or(-1);
  item.budget_of = r.budget_of.value_or("");
  if (item.structure_fingerprint.empty())
    item.structure_fingerprint = r.structure_fingerprint.value_or("");
  if (item.loss.empty()) item.loss = r.loss.value_or("");
  if (item.grads.empty()) item.grads = r.grads.value_or("");
  if (item.dims.empty() && r.dims) item.dims = *r.dims;
  if (item.micro_batches < 0) item.micro_batches = r.micro_batches.value_or(-1);
  item.budget_bytes = r.budget_bytes.value_or(-1);
  item.plan_peak_bytes = r.predicted_peak_bytes.value_or(-1);
  if (r.baseline_peak_bytes) item.baseline_peak_bytes = *r.baseline_peak_bytes;
  item.recompute_flops = r.recompute_flops.value_or(-1);
  if (r.forward_flops && *r.forward_flops > 0) item.forward_flops = *r.forward_flops;
  item.overhead = r.overhead.value_or(-1);  // Plan::overhead(), as the planner wrote it
  if (r.feasible) item.feasible = *r.feasible ? 1 : 0;
  item.solve_seconds = r.solve_seconds.value_or(-1);
  item.predicted_recompute_seconds = r.predicted_recompute_seconds.value_or(-1);
  ReadLayout(r, item);
  item.checkpoints = r.checkpoints.value_or(std::vector<std::string>{});
  // Selective plans: the dropped storages' names.
  item.recomputed = r.recomputed.value_or(std::vector<std::string>{});
  if (r.sections) item.num_sections = static_cast<int64_t>(r.sections->size());
  if (item.model.empty()) item.model = r.model.value_or("");
  if (item.batch < 0) item.batch = r.batch.value_or(-1);
  if (item.optimizer.empty()) item.optimizer = r.optimizer.value_or("");
  if (item.num_nodes < 0) item.num_nodes = r.num_nodes.value_or(-1);
  if (item.peak_event.empty()) item.peak_event = r.peak_event.value_or("");
  ReadBreakdown(r.breakdown, item);
  // The sweep (Pareto curve), when the plan carries it (`memplan plan --sweep`). The strategy
  // comparison table has no file form: the explorer fills it when it plans.
  if (r.sweep) item.sweep = ParetoPoints(*r.sweep, /*series=*/"");
  if (r.timeline) {
    std::shared_ptr<TimelineData> t = TimelineOf(*r.timeline, "plan " + item.strategy);
    if (std::any_of(r.timeline->begin(), r.timeline->end(),
                    [](const TimelinePoint& p) { return p.host_bytes >= 0; })) {
      for (const TimelinePoint& p : *r.timeline)
        t->host_bytes.push_back(std::max<int64_t>(0, p.host_bytes));
    }
    item.timeline = std::move(t);
  }
  if (r.offloaded) {
    item.offload = true;
    item.offloaded = *r.offloaded;
    item.predicted_host_peak_bytes = r.predicted_host_peak_bytes.value_or(-1);
    item.predicted_stall_seconds = r.predicted_stall_seconds.value_or(-1);
    if (r.offload && r.offload->is_object()) {
      auto number = [&](const char* key) {
        const auto it = r.offload->find(key);
        return it != r.offload->end() && it->is_number() ? it->get<double>() : -1.0;
      };
      const double host_budget = number("host_budget_bytes");
      item.host_budget_bytes = host_budget < 0 ? -1 : static_cast<int64_t>(host_budget);
      item.device_to_host_bytes_per_second = number("device_to_host_bytes_per_second");
      item.host_to_device_bytes_per_second = number("host_to_device_bytes_per_second");
    }
  }
}

void ReadAnalysisFields(const AnalysisReport& r, Item& item) {
  item.model = r.model.value_or("");
  item.batch = r.batch.value_or(-1);
  item.optimizer = r.optimizer.value_or("");
  item.loss = r.loss.value_or("");
  item.grads = r.grads.value_or("");
  if (r.dims) item.dims = *r.dims;
  ReadDeviceFields(r.device, item);
  if (r.device) item.predicted_reserved_peak_bytes = r.device->reserved_peak_bytes.value_or(-1);
  item.num_nodes = r.num_nodes.value_or(-1);
  item.param_bytes = r.param_bytes.value_or(-1);
  item.forward_flops = r.forward_flops.value_or(-1);
  item.baseline_peak_bytes = r.peak_bytes.value_or(-1);
  item.peak_event = r.peak_event.value_or("");
  ReadBreakdown(r.breakdown, item);
  item.bottlenecks = r.bottlenecks.value_or(std::vector<std::string>{});
  item.notes = r.notes.value_or(std::vector<std::string>{});
  if (r.timeline) item.timeline = TimelineOf(*r.timeline, "analysis");
}

// A run file, parsed by the run report's one reader.
void ReadRun(const RunReport& r, Item& item) {
  item.model = r.model.value_or("");
  item.batch = r.batch.value_or(-1);
  item.optimizer = r.optimizer.value_or("");
  item.loss = r.loss_kind.value_or("");
  item.grads = r.grads.value_or("");
  item.micro_batches = r.micro_batches.value_or(-1);
  item.device = r.device;
  // On a GPU the run measured the caching allocator: allocated (measured_peak_bytes) and
  // reserved, each step's; the last step is the steady state. On a CPU "reserved" repeats the
  // allocator's bytes: not a kind of its own.
  if (r.device.rfind("cuda", 0) == 0 && r.reserved_peak_bytes && !r.reserved_peak_bytes->empty())
    item.measured_reserved_peak_bytes = r.reserved_peak_bytes->back();
  if (r.allocator_mode) item.allocator_mode = *r.allocator_mode;
  if (r.workspace_bytes) item.workspace_bytes = *r.workspace_bytes;
  item.steps = r.steps;
  item.measured_peak_bytes = r.measured_peak_bytes;
  item.run_predicted_peak_bytes = r.predicted_peak_bytes;
  // The last step is the steady state.
  item.step_seconds = r.step_seconds.empty() ? -1 : r.step_seconds.back();
  item.recompute_seconds = r.recompute_seconds.empty() ? -1 : r.recompute_seconds.back();
  item.losses = r.loss;
  if (r.ranks) {
    for (const RunRank& k : *r.ranks) {
      item.ranks.push_back({k.rank, k.measured_peak_bytes, k.predicted_peak_bytes,
                            k.step_seconds.empty() ? -1 : k.step_seconds.back(),
                            k.comm_seconds.empty() ? -1 : k.comm_seconds.back()});
    }
  }
  ReadPlanFields(PlanReportFromJson(r.plan, /*require_kind=*/false), item);
  if (item.plan_peak_bytes < 0) item.plan_peak_bytes = item.run_predicted_peak_bytes;
  if (r.predicted_reserved_peak_bytes)
    item.predicted_reserved_peak_bytes = *r.predicted_reserved_peak_bytes;
  if (r.predicted_timeline) {
    item.timeline = TimelineOf(*r.predicted_timeline, "predicted");
  }
  // The measured trace: per event, the highest bytes seen during it.
  if (r.measured_trace) {
    auto t = std::make_shared<TimelineData>();
    t->label = "measured";
    for (const RunTraceEvent& e : *r.measured_trace) {
      AddTimelinePoint(*t, e.peak_during, e.phase, "", e.node);
    }
    item.measured = std::move(t);
  }
}

std::string ReadFile(const std::string& path) {
  struct stat st;
  if (::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode))
    throw MemplanError(path + ": is a directory, not a file");
  std::ifstream in(path, std::ios::binary);
  if (!in) throw MemplanError(path + ": cannot open the file (does it exist and is it readable?)");
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace

std::vector<ParetoPoint> ParetoPoints(const SweepResult& sweep, const std::string& series) {
  std::vector<ParetoPoint> points;
  for (const SweepPoint& sp : sweep.points) {
    ParetoPoint pt;
    pt.strategy = sp.strategy;
    pt.budget_bytes = sp.budget_bytes;
    pt.peak_bytes = sp.peak_bytes;
    pt.recompute_flops = sp.recompute_flops;
    pt.overhead = sp.overhead;
    pt.recompute_seconds = sp.recompute_seconds;
    pt.series = series;
    points.push_back(pt);
  }
  return points;
}

const char* SourceKindName(SourceKind k) {
  switch (k) {
    case SourceKind::kModel:
      return "model";
    case SourceKind::kAnalysis:
      return "analysis";
    case SourceKind::kPlan:
      return "plan";
    case SourceKind::kRun:
      return "run";
    case SourceKind::kProfile:
      return "profile";
  }
  return "?";
}

std::vector<LinkCopy> LinkOccupancy(const TrainingGraph& g, const Schedule& s,
                                    const StreamTimeline& t) {
  // Where a time falls on the step axis: in the first step that ends at or after it.
  auto at = [&](double seconds) {
    const auto it = std::lower_bound(t.step_end.begin(), t.step_end.end(), seconds);
    if (it == t.step_end.end()) return static_cast<double>(t.step_end.size());
    const size_t i = static_cast<size_t>(it - t.step_end.begin());
    const double begin = i == 0 ? 0.0 : t.step_end[i - 1];
    const double length = t.step_end[i] - begin;
    return static_cast<double>(i) + (length > 0 ? (seconds - begin) / length : 1.0);
  };
  std::vector<LinkCopy> out;
  out.reserve(t.copies.size());
  for (const StreamTimeline::Copy& c : t.copies) {
    LinkCopy l;
    l.to_host = c.to_host;
    const Buffer& from = s.buffers[c.from];
    l.name = from.tensor != kNone && from.tensor < static_cast<TensorId>(g.tensors.size())
                 ? g.tensors[from.tensor].name
                 : from.name;
    l.bytes = from.bytes;
    l.start_step = c.start_step;
    l.wait_step = c.wait_step;
    l.begin_seconds = c.begin;
    l.end_seconds = c.end;
    l.begin_step = at(c.begin);
    l.end_step = std::max(l.begin_step, at(c.end));
    out.push_back(std::move(l));
  }
  return out;
}

std::vector<CategoryBytes> ReplayByCategory(const Schedule& s, AllocatorPolicy policy) {
  // Per category, the simulator replays the schedule restricted to that category's buffers:
  // the bytes (and their accounting under `policy`) are Simulate's, not the GUI's.
  std::vector<CategoryBytes> out(s.steps.size(), CategoryBytes{});
  Schedule only;
  only.buffers = s.buffers;
  only.steps.resize(s.steps.size());
  for (int c = 0; c < kNumMemoryCategories; ++c) {
    auto in_category = [&](BufferId b) { return static_cast<int>(s.buffers[b].category) == c; };
    for (size_t i = 0; i < s.steps.size(); ++i) {
      only.steps[i].allocs.clear();
      only.steps[i].frees.clear();
      std::copy_if(s.steps[i].allocs.begin(), s.steps[i].allocs.end(),
                   std::back_inserter(only.steps[i].allocs), in_category);
      std::copy_if(s.steps[i].frees.begin(), s.steps[i].frees.end(),
                   std::back_inserter(only.steps[i].frees), in_category);
    }
    // The prediction, as the analysis and the plan report it: workspace margins apart.
    const MemoryTimeline t = Simulate(only, {.policy = policy, .count_margins = false});
    for (size_t i = 0; i < s.steps.size(); ++i) out[i][c] = t.bytes_during[i];
  }
  return out;
}

std::vector<AliveBuffer> AliveAt(const Schedule& s, size_t step, AllocatorPolicy policy) {
  std::vector<AliveBuffer> out;
  for (BufferId b : AliveDuring(s, step)) {
    const Buffer& buf = s.buffers[b];
    out.push_back(
        {b, buf.name, buf.category, AccountedBytes(buf.bytes - buf.margin_bytes, policy)});
  }
  std::stable_sort(out.begin(), out.end(),
                   [](const AliveBuffer& a, const AliveBuffer& b) { return a.bytes > b.bytes; });
  return out;
}

std::vector<LifetimeSpan> Lifetimes(const Schedule& s, const LifetimeMarks& marks,
                                    const LifetimeOptions& options) {
  const int32_t n = static_cast<int32_t>(s.steps.size());
  const int32_t first = std::max(0, options.first_step);
  const int32_t last = options.last_step < 0 ? n - 1 : std::min(options.last_step, n - 1);
  const std::unordered_set<TensorId> dropped(marks.recomputed.begin(), marks.recomputed.end());
  const std::vector<BufferSpan> buffer_spans = BufferSpans(s);
  // A dropped storage's row: its forward buffer (the activation buffer of the tensor that no
  // recompute step allocates). Its recomputed buffers hold the same tensor.
  std::unordered_map<TensorId, BufferId> forward_of;
  std::unordered_map<TensorId, int> recomputes;
  auto holds_dropped = [&](BufferId b) {
    const Buffer& buf = s.buffers[b];
    return buf.category == MemoryCategory::kActivation && buf.tensor != kNone &&
           dropped.count(buf.tensor);
  };
  for (const BufferSpan& b : buffer_spans) {
    if (!holds_dropped(b.buffer)) continue;
    if (b.recomputed)
      ++recomputes[s.buffers[b.buffer].tensor];
    else
      forward_of.emplace(s.buffers[b.buffer].tensor, b.buffer);
  }
  // An offloaded storage's row: its device buffer (the first allocated of its tensor's device
  // activation buffers); its host buffer and its prefetched buffer hold the same tensor.
  std::unordered_map<TensorId, BufferId> device_of;
  for (const Buffer& buf : s.buffers)
    if (buf.host && buf.tensor != kNone) device_of.emplace(buf.tensor, kNone);
  auto holds_offloaded = [&](BufferId b) {
    const Buffer& buf = s.buffers[b];
    return buf.tensor != kNone && (buf.host || buf.category == MemoryCategory::kActivation) &&
           device_of.count(buf.tensor);
  };
  for (const BufferSpan& b : buffer_spans) {  // in allocation order
    if (!holds_offloaded(b.buffer) || s.buffers[b.buffer].host || b.recomputed) continue;
    BufferId& row = device_of[s.buffers[b.buffer].tensor];
    if (row == kNone) row = b.buffer;
  }
  std::vector<LifetimeSpan> spans;
  for (const BufferSpan& b : buffer_spans) {
    LifetimeSpan sp;
    sp.buffer = b.buffer;
    sp.row = b.buffer;
    sp.begin = b.alloc_step;
    sp.end = b.free_step < 0 ? n - 1 : b.free_step;  // alive to the end of the step
    sp.recomputed = b.recomputed;
    sp.host = s.buffers[b.buffer].host;
    if (holds_offloaded(b.buffer)) {
      const BufferId device = device_of[s.buffers[b.buffer].tensor];
      sp.offloaded = true;
      if (device != kNone) sp.row = device;
      sp.prefetched = !sp.host && device != kNone && device != b.buffer &&
                      s.steps[b.alloc_step].phase == Phase::kPrefetch;
    }
    if (holds_dropped(b.buffer)) {
      const TensorId t = s.buffers[b.buffer].tensor;
      auto it = forward_of.find(t);
      if (it != forward_of.end()) sp.row = it->second;
      sp.dropped = true;
      sp.recompute_count = recomputes[t];
    }
    spans.push_back(sp);
  }
  // Choose the largest rows with a span in the range.
  std::vector<char> in_range(s.buffers.size(), 0);
  for (const LifetimeSpan& sp : spans) {
    const Buffer& buf = s.buffers[sp.row];
    if (!options.include_persistent && IsPersistentCategory(buf.category)) continue;
    if (sp.end < first || sp.begin > last) continue;
    in_range[sp.row] = 1;
  }
  std::vector<BufferId> chosen;
  for (size_t b = 0; b < s.buffers.size(); ++b)
    if (in_range[b]) chosen.push_back(static_cast<BufferId>(b));
  std::stable_sort(chosen.begin(), chosen.end(),
                   [&](BufferId a, BufferId b) { return s.buffers[a].bytes > s.buffers[b].bytes; });
  if (chosen.size() > options.max_buffers) chosen.resize(options.max_buffers);
  std::vector<char> keep(s.buffers.size(), 0);
  for (BufferId b : chosen) keep[b] = 1;
  std::unordered_set<TensorId> bn(marks.bottlenecks.begin(), marks.bottlenecks.end());
  std::unordered_set<TensorId> ck(marks.checkpoints.begin(), marks.checkpoints.end());
  std::unordered_set<TensorId> kept(marks.kept.begin(), marks.kept.end());
  std::vector<LifetimeSpan> out;
  for (LifetimeSpan sp : spans) {
    if (!keep[sp.row]) continue;
    const Buffer& buf = s.buffers[sp.buffer];
    sp.name = buf.name;
    sp.category = buf.category;
    sp.bytes = buf.bytes;
    bool holds_value = buf.category == MemoryCategory::kActivation;
    sp.bottleneck = holds_value && buf.tensor != kNone && bn.count(buf.tensor);
    sp.checkpoint = holds_value && buf.tensor != kNone && ck.count(buf.tensor);
    sp.kept = holds_value && !sp.recomputed && !sp.dropped && buf.tensor != kNone &&
              kept.count(buf.tensor);
    out.push_back(std::move(sp));
  }
  std::stable_sort(out.begin(), out.end(), [](const LifetimeSpan& a, const LifetimeSpan& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.buffer < b.buffer;
  });
  return out;
}

std::vector<LifetimeSpan> Lifetimes(const Schedule& s, const std::vector<TensorId>& bottlenecks,
                                    const std::vector<TensorId>& checkpoints,
                                    const LifetimeOptions& options) {
  LifetimeMarks marks;
  marks.bottlenecks = bottlenecks;
  marks.checkpoints = checkpoints;
  return Lifetimes(s, marks, options);
}

std::vector<StorageDecision> SelectiveStorages(const TrainingGraph& g, const Schedule& s,
                                               const std::vector<TensorId>& recomputed) {
  const GraphFacts f = ComputeGraphFacts(g);
  const std::unordered_set<TensorId> dropped(recomputed.begin(), recomputed.end());
  // An offload plan's storages: those with a host buffer in the schedule.
  std::unordered_set<TensorId> on_host;
  for (const Buffer& b : s.buffers)
    if (b.host) on_host.insert(b.tensor);
  const int32_t n = static_cast<int32_t>(s.steps.size());
  // The storages: saved activations (a backward op saves them) and every dropped one.
  std::unordered_map<TensorId, size_t> index;
  std::vector<StorageDecision> out;
  for (const GraphFacts::Root& r : f.root) {
    if (r.producer == f.loss_node) continue;
    const bool saved = r.first_saver != kNone;
    if (!saved && !dropped.count(r.tensor)) continue;
    StorageDecision d;
    d.tensor = r.tensor;
    d.name = g.tensors[r.tensor].name;
    d.saved = saved;
    d.recomputed = dropped.count(r.tensor) > 0;
    d.offloaded = on_host.count(r.tensor) > 0;
    index.emplace(r.tensor, out.size());
    out.push_back(std::move(d));
  }
  // Their spans, in allocation order: the forward buffer once, each recompute after it.
  std::vector<char> have_forward(out.size(), 0);
  for (const BufferSpan& b : BufferSpans(s)) {
    const Buffer& buf = s.buffers[b.buffer];
    if (buf.category != MemoryCategory::kActivation || buf.tensor == kNone) continue;
    auto it = index.find(buf.tensor);
    if (it == index.end()) continue;
    StorageDecision& d = out[it->second];
    const int32_t end = b.free_step < 0 ? n - 1 : b.free_step;
    if (b.recomputed) {
      if (d.recomputed) d.recompute_spans.emplace_back(b.alloc_step, end);
    } else if (!have_forward[it->second] && !buf.host) {
      have_forward[it->second] = 1;
      d.bytes = buf.bytes;
      d.forward_begin = b.alloc_step;
      d.forward_end = end;
    }
  }
  return out;
}

SelectiveCounts CountSelective(const std::vector<StorageDecision>& storages) {
  SelectiveCounts c;
  for (const StorageDecision& d : storages) {
    if (d.saved) {
      ++c.saved;
      c.saved_bytes += d.bytes;
    }
    if (d.recomputed) {
      c.recomputes += d.recompute_count();
      if (d.saved) {
        ++c.recomputed_saved;
        c.recomputed_saved_bytes += d.bytes;
      } else {
        ++c.recomputed_unsaved;
        c.recomputed_unsaved_bytes += d.bytes;
      }
    } else if (d.offloaded) {
      ++c.offloaded;
      c.offloaded_bytes += d.bytes;
    } else if (d.saved) {
      ++c.kept;
      c.kept_bytes += d.bytes;
    }
  }
  return c;
}

std::shared_ptr<const TimelineData> ReservedSeries(const TimelineData& t) {
  auto r = std::make_shared<TimelineData>();
  r->label = t.label + " (reserved)";
  if (t.reserved.size() != t.size()) return r;
  r->bytes = t.reserved;
  r->phases = t.phases;
  r->events = t.events;
  r->nodes = t.nodes;
  for (size_t i = 0; i < r->bytes.size(); ++i) {
    if (i == 0 || r->bytes[i] > r->peak_bytes) {
      r->peak_bytes = r->bytes[i];
      r->peak_step = static_cast<int64_t>(i);
    }
  }
  return r;
}

TimelineData TimelineFromSchedule(const TrainingGraph& g, const Schedule& s,
                                  const MemoryTimeline& t, const std::string& label) {
  TimelineData d;
  d.label = label;
  d.bytes = t.bytes_during;
  d.peak_bytes = t.peak_bytes;
  d.peak_step = t.peak_step;
  d.phases.reserve(s.steps.size());
  d.events.reserve(s.steps.size());
  d.nodes.reserve(s.steps.size());
  for (size_t i = 0; i < s.steps.size(); ++i) {
    d.phases.push_back(s.steps[i].phase);
    d.events.push_back(s.StepLabel(g, i));
    d.nodes.push_back(s.steps[i].node == kNone ? std::string() : g.nodes[s.steps[i].node].name);
  }
  d.by_category = ReplayByCategory(s);
  d.host_bytes = t.host_bytes_during;
  return d;
}

Item ItemFromAnalysis(Analysis analysis, const std::string& path) {
  auto a = std::make_shared<Analysis>(std::move(analysis));
  const TrainingGraph& g = a->graph;
  Item item;
  item.kind = SourceKind::kModel;
  item.path = path;
  item.title = BaseName(path);
  item.model = g.model_path.empty() ? path : g.model_path;
  item.batch = g.batch;
  item.optimizer = OptimizerName(g.optimizer);
  item.loss = LossKindName(g.loss_kind);
  item.grads = GradientLifetimeName(g.grads);
  item.dims = g.dims;
  item.structure_fingerprint = StructureFingerprint(g);
  item.num_nodes = static_cast<int64_t>(g.nodes.size());
  item.param_bytes = g.param_bytes();
  item.forward_flops = g.forward_flops();
  item.baseline_peak_bytes = a->timeline.peak_bytes;
  item.peak_event = a->schedule.StepLabel(g, a->timeline.peak_step);
  item.has_breakdown = true;
  item.breakdown = a->timeline.breakdown_at_peak;
  for (TensorId t : a->bottlenecks) item.bottlenecks.push_back(g.tensors[t].name);
  item.notes = g.notes;
  item.timeline =
      std::make_shared<TimelineData>(TimelineFromSchedule(g, a->schedule, a->timeline, "analysis"));
  item.schedule = std::shared_ptr<const Schedule>(a, &a->schedule);
  item.bottleneck_ids = a->bottlenecks;
  item.analysis = std::move(a);
  return item;
}

Item ItemFromJson(const json& j, const std::string& path) {
  if (!j.is_object()) throw MemplanError(path + ": not a memplan result (expected a JSON object)");
  std::string kind =
      j.contains("kind") && j["kind"].is_string() ? j["kind"].get<std::string>() : "";
  Item item;
  item.path = path;
  item.title = BaseName(path);
  try {
    if (kind == "analysis") {
      item.kind = SourceKind::kAnalysis;
      ReadAnalysisFields(AnalysisReportFromJson(j), item);
    } else if (kind == "plan") {
      item.kind = SourceKind::kPlan;
      ReadPlanFields(PlanReportFromJson(j), item);
    } else if (kind == "run") {
      item.kind = SourceKind::kRun;
      ReadRun(RunReportFromJson(j), item);
    } else if (kind == "profile") {
      return ItemFromProfile(ProfileFromJson(j), path);
    } else if (kind.empty()) {
      throw MemplanError("no \"kind\" field: not a memplan analysis, plan, run or profile JSON");
    } else {
      throw MemplanError("unknown kind \"" + kind + "\" (expected analysis, plan, run or profile)");
    }
  } catch (const MemplanError& e) {
    throw MemplanError(path + ": " + e.what());
  } catch (const nlohmann::json::exception& e) {
    throw MemplanError(path + ": malformed memplan JSON: " + e.what());
  }
  if (item.timeline && !item.timeline->size()) item.timeline.reset();
  if (item.measured && !item.measured->size()) item.measured.reset();
  return item;
}

Item ItemFromProfile(Profile profile, const std::string& path) {
  auto p = std::make_shared<const Profile>(std::move(profile));
  Item item;
  item.kind = SourceKind::kProfile;
  item.path = path;
  item.title = BaseName(path);
  item.model = p->model;
  item.batch = p->batch;
  item.micro_batches = p->micro_batches;
  item.device = p->device;
  item.step_seconds = p->step_seconds;
  if (HasDeviceTimes(*p)) {
    // CUPTI's memory is the device's (what cudaMalloc holds); the caching allocator's peaks
    // are separate figures of the same step.
    item.device_memory_peak_bytes = p->peak_bytes;
    item.measured_peak_bytes = p->cuda_allocated_peak_bytes > 0 ? p->cuda_allocated_peak_bytes : -1;
    if (p->cuda_reserved_peak_bytes > 0)
      item.measured_reserved_peak_bytes = p->cuda_reserved_peak_bytes;
  } else {
    item.measured_peak_bytes = p->peak_bytes;
  }
  item.recompute_seconds = p->RecomputeSeconds();
  item.notes = p->warnings;  // the backend's (dropped CUPTI records among them)
  item.profile = std::move(p);
  return item;
}

bool HasDeviceTimes(const Profile& p) { return p.backend == "cupti"; }

double MeasuredSeconds(const Profile& p, const NodeProfile& n) {
  return HasDeviceTimes(p) ? n.device_seconds : n.seconds;
}

MeasuredOverlay MeasuredOnSteps(const TimelineData& predicted, const Profile& p,
                                const std::string& label) {
  MeasuredOverlay out;
  out.steps = predicted.size();
  // The profile names its nodes from the graph; predicted timelines name them too.
  std::unordered_map<std::string, NodeId> node_of;
  for (const NodeProfile& n : p.nodes) {
    if (n.node != kNone && !n.name.empty()) node_of.emplace(n.name, n.node);
  }
  // Bytes alive at a time: after the last memory event at or before it (events in time order).
  std::vector<std::pair<double, int64_t>> alive;
  alive.reserve(p.memory_events.size());
  for (const MemoryEvent& e : p.memory_events) alive.emplace_back(e.time, e.bytes_after);
  std::stable_sort(alive.begin(), alive.end(),
                   [](const auto& a, const auto& b) { return a.first < b.first; });
  auto alive_at = [&](double t) {
    auto it = std::upper_bound(alive.begin(), alive.end(), t,
                               [](double x, const auto& e) { return x < e.first; });
    return it == alive.begin() ? p.start_bytes : std::prev(it)->second;
  };
  // Per scope (phase, node, micro-batch): the highest bytes alive during its slices.
  using Key = std::tuple<int, NodeId, int32_t>;
  auto key_of = [](const ProfileScope& s) {
    return Key{static_cast<int>(s.phase), s.node, s.micro_batch};
  };
  std::map<Key, int64_t> during;
  std::map<Key, std::vector<std::pair<double, double>>>
      windows;  // each key's slices, in start order
  auto note = [&](const Key& k, int64_t bytes) {
    auto [it, fresh] = during.emplace(k, bytes);
    if (!fresh) it->second = std::max(it->second, bytes);
  };
  for (const ProfileSlice& s : p.slices) {
    note(key_of(s.scope), alive_at(s.begin));
    windows[key_of(s.scope)].emplace_back(s.begin, s.end);
  }
  for (auto& [key, w] : windows) std::stable_sort(w.begin(), w.end());
  // The CPU backend records an event in the innermost open scope, at host time, and in the
  // default (setup) scope when none is open: such an event lies in no slice of its scope and
  // belongs to none. CUPTI attributes events by correlation id and stamps them with the
  // device's time, which need not fall inside the host slice: they count by scope alone.
  const bool by_scope_alone = HasDeviceTimes(p);
  auto inside = [](const std::vector<std::pair<double, double>>& w, double t) {
    auto it = std::upper_bound(w.begin(), w.end(), t,
                               [](double x, const auto& s) { return x < s.first; });
    // The last slice that began by `t`, or the one before it (a slice of the same scope nested
    // one level up).
    for (int back = 0; back < 2 && it != w.begin(); ++back) {
      --it;
      if (t <= it->second) return true;
    }
    return false;
  };
  for (const MemoryEvent& e : p.memory_events) {
    const Key k = key_of(e.scope);
    auto w = windows.find(k);
    if (w == windows.end() || !(by_scope_alone || inside(w->second, e.time))) continue;
    note(k, e.bytes_after);
  }

  auto t = std::make_shared<TimelineData>();
  t->label = label;
  std::map<std::pair<int, NodeId>, int32_t>
      seen;  // the k-th step of a (phase, node): micro-batch k
  int64_t previous = p.start_bytes;
  for (size_t i = 0; i < predicted.size(); ++i) {
    const Phase phase = predicted.phases[i];
    const std::string& name = i < predicted.nodes.size() ? predicted.nodes[i] : std::string();
    std::string event = i < predicted.events.size() ? predicted.events[i] : std::string();
    NodeId node = kNone;
    bool known = true;
    if (!name.empty()) {
      auto it = node_of.find(name);
      known = it != node_of.end();
      if (known) node = it->second;
    }
    auto found = during.end();
    if (known) {
      const int32_t k = seen[{static_cast<int>(phase), node}]++;
      found = during.find(Key{static_cast<int>(phase), node, k});
    }
    int64_t bytes = previous;
    if (found != during.end()) {
      bytes = found->second;
      ++out.matched_steps;
    } else {
      event += " (not in the profile: the value before)";
    }
    AddTimelinePoint(*t, bytes, PhaseName(phase), event, name);
    t->phases.back() = phase;
    previous = bytes;
  }
  if (out.matched_steps > 0) out.timeline = std::move(t);
  return out;
}

Item LoadItem(const std::string& path, const ModelOptions& options) {
  bool is_json_name = path.size() >= 5 && path.compare(path.size() - 5, 5, ".json") == 0;
  // A model protobuf cannot parse is refused before its gigabytes are read.
  struct stat st;
  if (!is_json_name && ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode))
    CheckOnnxFileSize(path, st.st_size);
  std::string bytes = ReadFile(path);
  size_t first = bytes.find_first_not_of(" \t\r\n");
  bool looks_json = first != std::string::npos && (bytes[first] == '{' || bytes[first] == '[');
  if (looks_json || is_json_name) {
    json j;
    try {
      j = json::parse(bytes);
    } catch (const nlohmann::json::exception& e) {
      throw MemplanError(path + ": not valid JSON (" + e.what() + ")");
    }
    return ItemFromJson(j, path);
  }
  if (bytes.empty()) throw MemplanError(path + ": the file is empty");
  LoadOptions lo;
  lo.batch = options.batch;
  lo.optimizer = options.optimizer;
  lo.loss = options.loss;
  lo.dims = options.dims;
  lo.grads = options.grads;
  TrainingGraph g = LoadTrainingGraph(path, lo);
  if (options.device.empty()) return ItemFromAnalysis(Analyze(std::move(g)), path);
  // As `memplan analyze --device cuda` predicts: the libraries' workspaces in the schedule,
  // and the caching allocator model replayed over it for the reserved bytes.
  CudaDevice cuda = DeviceFor(options);
  PrepareGraphForCuda(g, cuda);
  cuda.conv_margin_bytes = ConvWorkspaceMargins(g, cuda);
  Item item = ItemFromAnalysis(Analyze(std::move(g)), path);
  const Analysis& a = *item.analysis;
  const DeviceMemory m = PredictDeviceMemory(a.schedule, cuda);
  const ReservedTimeline r = SimulateReserved(a.schedule, cuda.allocator());
  auto t = std::make_shared<TimelineData>(*item.timeline);
  t->reserved = r.reserved_during;
  t->reserved_peak_bytes = r.reserved_peak_bytes;
  item.timeline = std::move(t);
  item.predicted_for = cuda.device;
  item.predicted_reserved_peak_bytes = m.reserved_peak_bytes;
  item.allocator_mode = m.allocator_mode;
  item.workspace_bytes = m.workspace_bytes;
  item.context_bytes = m.context_bytes;
  return item;
}

CudaDevice DeviceFor(const ModelOptions& options) {
  CudaDevice d = CudaDeviceFromEnvironment(options.device.empty() ? "cuda" : options.device);
  // The mode the run recorded wins: its reserved bytes are what the prediction is compared to.
  if (options.allocator_mode == "default") d.allocator_conf = "";
  if (options.allocator_mode == "expandable_segments")
    d.allocator_conf = "expandable_segments:True";
  return d;
}

std::optional<ModelOptions> SettingsOf(const Item& item, const ModelOptions& defaults) {
  if (item.batch < 1) return std::nullopt;
  ModelOptions o = defaults;
  o.batch = item.batch;
  try {
    if (!item.optimizer.empty()) o.optimizer = ParseOptimizer(item.optimizer);
    if (!item.loss.empty()) o.loss = ParseLossKind(item.loss);
    if (!item.grads.empty()) o.grads = ParseGradientLifetime(item.grads);
  } catch (const MemplanError&) {
    // A name this build does not know: the defaults; SettingsMismatch names the difference.
  }
  if (!item.dims.empty()) o.dims = item.dims;
  // A prediction or a measurement made on a GPU: the model is predicted for one too.
  const std::string& gpu = !item.predicted_for.empty() ? item.predicted_for : item.device;
  o.device = gpu.rfind("cuda", 0) == 0 ? "cuda" : "";
  if (!o.device.empty() && !item.allocator_mode.empty()) o.allocator_mode = item.allocator_mode;
  return o;
}

std::vector<std::string> SettingsMismatch(const Item& item, const ModelOptions& settings,
                                          const Item* model) {
  std::vector<std::string> why;
  if (item.batch >= 1 && item.batch != settings.batch)
    why.push_back("batch " + std::to_string(item.batch) + ", not " +
                  std::to_string(settings.batch));
  if (!item.optimizer.empty() && item.optimizer != OptimizerName(settings.optimizer))
    why.push_back("optimizer " + item.optimizer + ", not " + OptimizerName(settings.optimizer));
  if (!item.loss.empty() && item.loss != LossKindName(settings.loss))
    why.push_back("loss " + item.loss + ", not " + LossKindName(settings.loss));
  if (!item.grads.empty() && item.grads != GradientLifetimeName(settings.grads))
    why.push_back("grads " + item.grads + ", not " + GradientLifetimeName(settings.grads));
  for (const auto& [name, value] : item.dims) {
    auto it = settings.dims.find(name);
    if (it != settings.dims.end() && it->second != value)
      why.push_back("dim " + name + " = " + std::to_string(value) + ", not " +
                    std::to_string(it->second));
  }
  if (model && model != &item) {
    if (!item.structure_fingerprint.empty() && !model->structure_fingerprint.empty()) {
      if (item.structure_fingerprint != model->structure_fingerprint) {
        why.push_back("made for another model (structure " + item.structure_fingerprint + ", " +
                      BaseName(model->model) + "'s " + model->structure_fingerprint + ")");
      }
    } else if (item.kind != SourceKind::kProfile && !item.model.empty() && !model->model.empty() &&
               BaseName(item.model) != BaseName(model->model)) {
      // (A profile's steps are matched to the prediction by node names: MeasuredOnSteps.)
      why.push_back("of another model (" + BaseName(item.model) + ", not " +
                    BaseName(model->model) + ")");
    }
  }
  return why;
}

std::string SettingsText(const ModelOptions& s) {
  std::string text = "batch " + std::to_string(s.batch) + " · " + OptimizerName(s.optimizer) +
                     " · " + LossKindName(s.loss);
  for (const auto& [name, value] : s.dims) text += " · " + name + " = " + std::to_string(value);
  if (!s.device.empty()) text += " · " + s.device;
  if (!s.device.empty() && !s.allocator_mode.empty()) text += " (" + s.allocator_mode + ")";
  return text;
}

std::vector<size_t> DownsampleIndices(const std::vector<int64_t>& values, size_t max_points) {
  std::vector<size_t> out;
  const size_t n = values.size();
  if (n == 0) return out;
  if (max_points < 4 || n <= max_points) {
    out.resize(n);
    for (size_t i = 0; i < n; ++i) out[i] = i;
    return out;
  }
  const size_t buckets = max_points / 3;
  const size_t width = (n + buckets - 1) / buckets;
  for (size_t start = 0; start < n; start += width) {
    size_t end = std::min(n, start + width);
    size_t lo = start, hi = start;
    for (size_t i = start; i < end; ++i) {
      if (values[i] < values[lo]) lo = i;
      if (values[i] > values[hi]) hi = i;
    }
    out.push_back(start);
    if (std::min(lo, hi) != start) out.push_back(std::min(lo, hi));
    if (std::max(lo, hi) != start && lo != hi) out.push_back(std::max(lo, hi));
  }
  if (out.back() != n - 1) out.push_back(n - 1);
  return out;
}

std::string BytesText(int64_t bytes) { return bytes < 0 ? "\u2014" : FormatBytes(bytes); }

std::string PercentText(double fraction) {
  if (fraction < 0) return "\u2014";
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f%%", fraction * 100);
  return buf;
}

}  // namespace memplan::gui
