// The profiler's torch-free core on small hand-made profiles: exclusive times of nested
// scopes, the peak and per-node memory from memory events, the CPU backend, the profile JSON
// round trip, and the Chrome trace-event export's required fields and nesting.
#include "memplan/profiler.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

namespace memplan {
namespace {

using nlohmann::json;

ProfileScope Scope(Phase phase, NodeId node = kNone, int32_t segment = 0, int32_t micro_batch = 0) {
  return {phase, node, segment, micro_batch};
}

const NodeProfile* Find(const Profile& p, Phase phase, NodeId node, int32_t segment = 0) {
  for (const NodeProfile& n : p.nodes) {
    if (n.phase == phase && n.node == node && n.segment == segment) return &n;
  }
  return nullptr;
}

// forward [0, 10) > node 1 [1, 4), node 2 [5, 9)
// backward [10, 20) > node 1 [12, 15)
// recompute segment 1, micro-batches 0 and 1: [20, 22), [22, 25) > node 2 (micro-batch 1) [23, 24)
// Memory from 100 B: +50 (forward node 1) 150, +70 (forward node 2) 220, -50 (backward node 1)
// 170, +100 (backward node 1) 270 = peak, -170 (optimizer) 100.
Profile HandMade() {
  Profile p;
  p.model = "toy.onnx";
  p.device = "cpu";
  p.backend = "cpu";
  p.step = 1;
  p.batch = 4;
  p.micro_batches = 2;
  p.step_seconds = 26;
  p.start_bytes = 100;
  p.slices = {
      {0, 10, Scope(Phase::kForward), 0},
      {1, 4, Scope(Phase::kForward, 1), 1},
      {5, 9, Scope(Phase::kForward, 2), 1},
      {10, 20, Scope(Phase::kBackward), 0},
      {12, 15, Scope(Phase::kBackward, 1), 1},
      {20, 22, Scope(Phase::kRecompute, kNone, 1, 0), 0},
      {22, 25, Scope(Phase::kRecompute, kNone, 1, 1), 0},
      {23, 24, Scope(Phase::kRecompute, 2, 1, 1), 1},
  };
  p.memory_events = {
      {2, 50, 150, Scope(Phase::kForward, 1)},     {6, 70, 220, Scope(Phase::kForward, 2)},
      {13, -50, 170, Scope(Phase::kBackward, 1)},  {14, 100, 270, Scope(Phase::kBackward, 1)},
      {25.5, -170, 100, Scope(Phase::kOptimizer)},
  };
  p.warnings = {"a warning"};
  AggregateProfile(p);
  return p;
}

TEST(ProfileAggregate, NestedScopesGetExclusiveTimes) {
  const Profile p = HandMade();
  // forward: 10 - 3 - 4 = 3; its nodes 3 and 4; backward: 10 - 3 = 7; node 1's backward 3.
  ASSERT_NE(Find(p, Phase::kForward, kNone), nullptr);
  EXPECT_DOUBLE_EQ(Find(p, Phase::kForward, kNone)->seconds, 3);
  EXPECT_DOUBLE_EQ(Find(p, Phase::kForward, 1)->seconds, 3);
  EXPECT_DOUBLE_EQ(Find(p, Phase::kForward, 2)->seconds, 4);
  EXPECT_DOUBLE_EQ(Find(p, Phase::kBackward, kNone)->seconds, 7);
  EXPECT_DOUBLE_EQ(Find(p, Phase::kBackward, 1)->seconds, 3);
  // Micro-batches merge: recompute segment 1 ran twice, 2 + (3 - 1) = 4 s exclusive.
  const NodeProfile* rec = Find(p, Phase::kRecompute, kNone, 1);
  ASSERT_NE(rec, nullptr);
  EXPECT_EQ(rec->calls, 2);
  EXPECT_DOUBLE_EQ(rec->seconds, 4);
  EXPECT_DOUBLE_EQ(p.RecomputeSeconds(), 4 + 1);  // the phase scope and node 2 inside it
  EXPECT_DOUBLE_EQ(p.RecomputeSeconds(/*segment=*/0), 0);
  EXPECT_DOUBLE_EQ(p.PhaseSeconds(Phase::kForward), 3 + 3 + 4);
}

TEST(ProfileAggregate, MemoryEventsGivePeakAndPerNodeBytes) {
  const Profile p = HandMade();
  EXPECT_EQ(p.peak_bytes, 270);
  EXPECT_DOUBLE_EQ(p.peak_time, 14);
  EXPECT_TRUE(p.peak_scope == Scope(Phase::kBackward, 1));
  EXPECT_EQ(Find(p, Phase::kForward, 1)->allocated_bytes, 50);
  EXPECT_EQ(Find(p, Phase::kForward, 2)->allocated_bytes, 70);
  EXPECT_EQ(Find(p, Phase::kBackward, 1)->allocated_bytes, 100);
  EXPECT_EQ(Find(p, Phase::kBackward, 1)->freed_bytes, 50);
  const NodeProfile* opt = Find(p, Phase::kOptimizer, kNone);
  ASSERT_NE(opt, nullptr);
  EXPECT_EQ(opt->freed_bytes, 170);
  EXPECT_EQ(opt->calls, 0);  // memory only, no slice
}

TEST(ProfileAggregate, NoEventsMeansThePeakIsTheStart) {
  Profile p;
  p.start_bytes = 42;
  AggregateProfile(p);
  EXPECT_EQ(p.peak_bytes, 42);
  EXPECT_TRUE(p.peak_scope == ProfileScope{});
}

TEST(CpuProfiler, RecordsNestedSlicesAndMemory) {
  auto cpu = MakeCpuProfiler();
  EXPECT_EQ(cpu->name(), "cpu");
  cpu->Enter(Scope(Phase::kForward));  // before BeginStep: ignored
  cpu->Exit();
  cpu->BeginStep(/*start_bytes=*/100);
  cpu->OnMemory(10, 110);  // outside every scope: the default scope
  cpu->Enter(Scope(Phase::kForward));
  cpu->Enter(Scope(Phase::kForward, 1));
  std::this_thread::sleep_for(std::chrono::milliseconds(2));
  cpu->OnMemory(50, 160);
  cpu->Exit();
  cpu->OnMemory(-50, 110);
  cpu->Exit();
  cpu->Enter(Scope(Phase::kBackward));  // left open: EndStep closes it
  const Profile p = cpu->EndStep();

  EXPECT_EQ(p.backend, "cpu");
  EXPECT_EQ(p.start_bytes, 100);
  ASSERT_EQ(p.slices.size(), 3u);
  EXPECT_EQ(p.slices[0].depth, 0);
  EXPECT_EQ(p.slices[1].depth, 1);
  EXPECT_EQ(p.slices[2].depth, 0);
  EXPECT_TRUE(p.slices[1].scope == Scope(Phase::kForward, 1));
  for (const ProfileSlice& s : p.slices) {
    EXPECT_LE(s.begin, s.end);
    EXPECT_LE(s.end, p.step_seconds);
  }
  EXPECT_LE(p.slices[0].begin, p.slices[1].begin);
  EXPECT_LE(p.slices[1].end, p.slices[0].end);
  EXPECT_GE(p.slices[1].end - p.slices[1].begin, 0.002);

  ASSERT_EQ(p.memory_events.size(), 3u);
  EXPECT_TRUE(p.memory_events[0].scope == ProfileScope{});
  EXPECT_TRUE(p.memory_events[1].scope == Scope(Phase::kForward, 1));
  EXPECT_TRUE(p.memory_events[2].scope == Scope(Phase::kForward));
  EXPECT_EQ(p.peak_bytes, 160);
  EXPECT_TRUE(p.peak_scope == Scope(Phase::kForward, 1));
  // Exclusive: the forward phase's time excludes its node's.
  const NodeProfile* fwd = Find(p, Phase::kForward, kNone);
  const NodeProfile* node = Find(p, Phase::kForward, 1);
  ASSERT_TRUE(fwd && node);
  EXPECT_NEAR(fwd->seconds + node->seconds, p.slices[0].end - p.slices[0].begin, 1e-9);
  EXPECT_EQ(node->allocated_bytes, 50);
  EXPECT_EQ(Find(p, Phase::kForward, kNone)->freed_bytes, 50);
}

TEST(ProfileJson, RoundTrips) {
  Profile p = HandMade();
  p.nodes[0].name = "n";
  p.nodes[0].op = "Relu";
  p.nodes[0].device_seconds = 0.5;
  p.nodes[0].predicted_seconds = 0.25;
  p.cuda_allocated_peak_bytes = 300;
  p.cuda_reserved_peak_bytes = 2 << 20;
  p.dropped_records = 3;
  const json j = ProfileToJson(p);
  EXPECT_EQ(j.at("kind"), "profile");
  EXPECT_EQ(j.at("peak_bytes"), 270);
  EXPECT_DOUBLE_EQ(j.at("recompute_seconds").get<double>(), 5);
  const Profile q = ProfileFromJson(j);
  EXPECT_EQ(ProfileToJson(q), j);
  EXPECT_EQ(q.model, p.model);
  EXPECT_EQ(q.micro_batches, 2);
  EXPECT_EQ(q.peak_bytes, 270);
  EXPECT_TRUE(q.peak_scope == p.peak_scope);
  ASSERT_EQ(q.slices.size(), p.slices.size());
  for (size_t i = 0; i < q.slices.size(); ++i) {
    EXPECT_TRUE(q.slices[i].scope == p.slices[i].scope);
    EXPECT_EQ(q.slices[i].depth, p.slices[i].depth);
    EXPECT_DOUBLE_EQ(q.slices[i].end, p.slices[i].end);
  }
  ASSERT_EQ(q.memory_events.size(), p.memory_events.size());
  EXPECT_EQ(q.memory_events[3].bytes_after, 270);
  EXPECT_TRUE(q.memory_events[3].scope == Scope(Phase::kBackward, 1));
  EXPECT_EQ(q.nodes[0].op, "Relu");
  EXPECT_DOUBLE_EQ(q.nodes[0].device_seconds, 0.5);
  EXPECT_EQ(q.dropped_records, 3);
  EXPECT_EQ(q.warnings, p.warnings);
}

TEST(ProfileJson, RejectionsNameTheField) {
  const json good = ProfileToJson(HandMade());
  auto error_of = [](const json& j) -> std::string {
    try {
      ProfileFromJson(j);
      return "";
    } catch (const MemplanError& e) {
      return e.what();
    }
  };
  json bad = good;
  bad["kind"] = "plan";
  EXPECT_NE(error_of(bad).find("kind"), std::string::npos) << error_of(bad);
  bad = good;
  bad["memory_events"][0] = json::array({1, 2});
  EXPECT_NE(error_of(bad).find("memory_events"), std::string::npos) << error_of(bad);
  bad = good;
  bad["slices"][0]["phase"] = "sideways";
  EXPECT_NE(error_of(bad).find("phase"), std::string::npos) << error_of(bad);
  EXPECT_NE(error_of(json::array()), "");
}

TEST(TraceEvents, HaveTheRequiredFieldsAndNest) {
  const Profile p = HandMade();
  const std::vector<PredictedMemory> predicted = {{Scope(Phase::kForward, 1), 140},
                                                  {Scope(Phase::kBackward, 1), 260}};
  const json t = TraceEventsJson(p, predicted);
  ASSERT_TRUE(t.at("traceEvents").is_array());
  struct Span {
    double ts, end;
  };
  std::map<std::pair<int, int>, std::vector<Span>> tracks;  // (pid, tid) -> X events
  int slices = 0, measured = 0, predicted_points = 0;
  for (const json& e : t.at("traceEvents")) {
    ASSERT_TRUE(e.contains("name") && e.contains("ph") && e.contains("pid")) << e.dump();
    const std::string ph = e.at("ph");
    if (ph == "X") {
      ASSERT_TRUE(e.contains("ts") && e.contains("dur") && e.contains("tid")) << e.dump();
      EXPECT_GE(e.at("dur").get<double>(), 0) << e.dump();
      const double ts = e.at("ts");
      tracks[{e.at("pid"), e.at("tid")}].push_back({ts, ts + e.at("dur").get<double>()});
      ++slices;
    } else if (ph == "C") {
      ASSERT_TRUE(e.contains("ts") && e.contains("args") && e.at("args").is_object()) << e.dump();
      for (const auto& [k, v] : e.at("args").items()) EXPECT_TRUE(v.is_number()) << e.dump();
      if (e.at("args").contains("measured_bytes")) ++measured;
      if (e.at("args").contains("predicted_bytes")) ++predicted_points;
    } else {
      EXPECT_EQ(ph, "M") << e.dump();
      EXPECT_TRUE(e.contains("args")) << e.dump();
    }
  }
  // Every slice once on the scope track, the two recompute phase spans again on theirs.
  EXPECT_EQ(slices, static_cast<int>(p.slices.size()) + 2);
  EXPECT_EQ(measured, 1 + static_cast<int>(p.memory_events.size()));  // the start, then each event
  EXPECT_EQ(predicted_points, 2);
  // On one track, two complete events are disjoint or one contains the other.
  const double eps = 1e-6;
  for (auto& [track, spans] : tracks) {
    std::sort(spans.begin(), spans.end(), [](const Span& a, const Span& b) {
      return a.ts < b.ts || (a.ts == b.ts && a.end > b.end);
    });
    std::vector<double> open_ends;
    for (const Span& s : spans) {
      while (!open_ends.empty() && open_ends.back() <= s.ts + eps) open_ends.pop_back();
      if (!open_ends.empty()) {
        EXPECT_LE(s.end, open_ends.back() + eps)
            << "track " << track.second << " span [" << s.ts << ", " << s.end << ")";
      }
      open_ends.push_back(s.end);
    }
  }
}

}  // namespace
}  // namespace memplan
