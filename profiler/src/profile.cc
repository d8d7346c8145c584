// Per-node totals from slices and memory events; per-phase sums; the printed summary.
#include <algorithm>
#include <cstdio>
#include <map>
#include <tuple>

#include "memplan/profiler.h"

namespace memplan {
namespace {

// Per-node totals merge micro-batches: the key is (phase, segment, node).
using NodeKey = std::tuple<int, int32_t, NodeId>;
NodeKey KeyOf(const ProfileScope& s) { return {static_cast<int>(s.phase), s.segment, s.node}; }

std::string Seconds(double s) {
  char buf[32];
  if (s >= 1)
    std::snprintf(buf, sizeof buf, "%.3f s", s);
  else
    std::snprintf(buf, sizeof buf, "%.2f ms", s * 1e3);
  return buf;
}

}  // namespace

double Profile::RecomputeSeconds(int32_t segment) const {
  double total = 0;
  for (const NodeProfile& n : nodes) {
    if (n.phase == Phase::kRecompute && (segment < 0 || n.segment == segment)) total += n.seconds;
  }
  return total;
}

double Profile::PredictedRecomputeSeconds(int32_t segment) const {
  double total = 0;
  for (const NodeProfile& n : nodes) {
    if (n.phase == Phase::kRecompute && (segment < 0 || n.segment == segment))
      total += n.predicted_seconds;
  }
  return total;
}

double Profile::PhaseSeconds(Phase phase) const {
  double total = 0;
  for (const NodeProfile& n : nodes) {
    if (n.phase == phase) total += n.seconds;
  }
  return total;
}

void AggregateProfile(Profile& p) {
  std::map<NodeKey, NodeProfile> totals;
  auto entry = [&](const ProfileScope& s) -> NodeProfile& {
    NodeProfile& n = totals[KeyOf(s)];
    n.node = s.node;
    n.phase = s.phase;
    n.segment = s.segment;
    return n;
  };
  // Exclusive time: a slice's duration less that of the slices directly inside it. Slices
  // are in start order, so each one's parent is the open slice one level up.
  std::vector<double> child_time(p.slices.size(), 0);
  std::vector<size_t> open;  // indices by depth
  for (size_t i = 0; i < p.slices.size(); ++i) {
    const ProfileSlice& s = p.slices[i];
    const size_t depth = static_cast<size_t>(std::max(0, s.depth));
    open.resize(std::min(open.size(), depth));
    if (depth > 0 && open.size() == depth) child_time[open.back()] += s.end - s.begin;
    open.push_back(i);
  }
  for (size_t i = 0; i < p.slices.size(); ++i) {
    const ProfileSlice& s = p.slices[i];
    NodeProfile& n = entry(s.scope);
    n.calls += 1;
    n.seconds += std::max(0.0, (s.end - s.begin) - child_time[i]);
  }
  p.peak_bytes = p.start_bytes;
  p.peak_time = 0;
  p.peak_scope = {};
  for (const MemoryEvent& e : p.memory_events) {
    NodeProfile& n = entry(e.scope);
    if (e.bytes > 0)
      n.allocated_bytes += e.bytes;
    else
      n.freed_bytes -= e.bytes;
    if (e.bytes_after > p.peak_bytes) {
      p.peak_bytes = e.bytes_after;
      p.peak_time = e.time;
      p.peak_scope = e.scope;
    }
  }
  // Keep the device time a backend attributed before aggregation.
  for (const NodeProfile& old : p.nodes) {
    NodeProfile& n = totals[{static_cast<int>(old.phase), old.segment, old.node}];
    n.node = old.node;
    n.phase = old.phase;
    n.segment = old.segment;
    n.device_seconds += old.device_seconds;
    n.predicted_seconds += old.predicted_seconds;
  }
  p.nodes.clear();
  for (auto& [key, n] : totals) p.nodes.push_back(std::move(n));
}

void NameProfileNodes(const TrainingGraph& g, Profile& p) {
  for (NodeProfile& n : p.nodes) {
    if (n.node >= 0 && static_cast<size_t>(n.node) < g.nodes.size()) {
      n.name = g.nodes[n.node].name;
      n.op = g.nodes[n.node].op_type;
    }
  }
}

std::string FormatProfileSummary(const Profile& p, int slowest) {
  std::string out;
  out += "profile (" + p.backend + ", step " + std::to_string(p.step + 1) + "): step " +
         Seconds(p.step_seconds);
  for (Phase ph :
       {Phase::kForward, Phase::kLoss, Phase::kRecompute, Phase::kBackward, Phase::kOptimizer}) {
    const double s = p.PhaseSeconds(ph);
    if (s > 0) out += std::string(", ") + PhaseName(ph) + " " + Seconds(s);
  }
  out += "\n  peak " + FormatBytes(p.peak_bytes) + " in the " + PhaseName(p.peak_scope.phase);
  for (const NodeProfile& n : p.nodes) {
    if (n.node == p.peak_scope.node && n.phase == p.peak_scope.phase && n.node != kNone) {
      out += " of " + n.op + " '" + n.name + "'";
      break;
    }
  }
  out += "\n";
  std::map<int32_t, double> per_segment;
  for (const NodeProfile& n : p.nodes) {
    if (n.phase == Phase::kRecompute) per_segment[n.segment] += n.seconds;
  }
  if (!per_segment.empty()) {
    out += "  recompute per segment:";
    for (const auto& [seg, s] : per_segment) {
      out += " [" + std::to_string(seg) + "] " + Seconds(s);
      const double predicted = p.PredictedRecomputeSeconds(seg);
      if (predicted > 0) out += " (predicted " + Seconds(predicted) + ")";
    }
    out += "\n";
  }
  std::vector<const NodeProfile*> ops;
  for (const NodeProfile& n : p.nodes) {
    if (n.node != kNone) ops.push_back(&n);
  }
  std::sort(ops.begin(), ops.end(), [](const NodeProfile* a, const NodeProfile* b) {
    return std::max(a->seconds, a->device_seconds) > std::max(b->seconds, b->device_seconds);
  });
  if (!ops.empty() && slowest > 0) {
    out += "  slowest ops:\n";
    for (size_t i = 0; i < ops.size() && i < static_cast<size_t>(slowest); ++i) {
      const NodeProfile& n = *ops[i];
      out += "    " + Seconds(std::max(n.seconds, n.device_seconds)) + "  " + PhaseName(n.phase) +
             " " + n.op + " '" + n.name + "'\n";
    }
  }
  for (const std::string& w : p.warnings) out += "  warning: " + w + "\n";
  return out;
}

}  // namespace memplan
