// The CUDA caching allocator model (memplan/caching_allocator.h): one behaviour per test with
// hand-computed numbers, then six real allocator traces (PyTorch 2.11 on an H200) replayed.
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <string>

#include "memplan/caching_allocator.h"
#include "memplan/training_graph.h"

namespace memplan {
namespace {

constexpr int64_t KiB = 1024;
constexpr int64_t MiB = 1024 * 1024;
using Kind = SegmentEvent::Kind;

std::vector<int64_t> EventBytes(const CachingAllocatorModel& m) {
  std::vector<int64_t> out;
  for (const SegmentEvent& e : m.events()) out.push_back(e.bytes);
  return out;
}

TEST(CachingAllocatorRounding, RequestsRoundTo512Bytes) {
  CachingAllocatorConfig c;
  EXPECT_EQ(CachingAllocatorRoundSize(1, c), 512);
  EXPECT_EQ(CachingAllocatorRoundSize(512, c), 512);
  EXPECT_EQ(CachingAllocatorRoundSize(513, c), 1024);
  EXPECT_EQ(CachingAllocatorRoundSize(25216, c), 25600);  // 49.25 x 512 -> 50 x 512
}

TEST(CachingAllocatorRounding, PowerOfTwoDivisions) {
  CachingAllocatorConfig c = ParseCachingAllocatorConfig("roundup_power2_divisions:4");
  // 5000 lies between 4096 and 8192, in steps of 1024: 5120.
  EXPECT_EQ(CachingAllocatorRoundSize(5000, c), 5120);
  // 2000 is not above 4 x 512: plain 512 rounding.
  EXPECT_EQ(CachingAllocatorRoundSize(2000, c), 2048);
  // 3 MiB + 1 lies between 2 and 4 MiB, steps of 512 KiB: 3.5 MiB.
  EXPECT_EQ(CachingAllocatorRoundSize(3 * MiB + 1, c), 3 * MiB + 512 * KiB);
}

TEST(CachingAllocatorRounding, SegmentSizes) {
  EXPECT_EQ(CachingAllocatorSegmentSize(512), 2 * MiB);              // small pool
  EXPECT_EQ(CachingAllocatorSegmentSize(1 * MiB), 2 * MiB);          // still small
  EXPECT_EQ(CachingAllocatorSegmentSize(1 * MiB + 512), 20 * MiB);   // large, under 10 MiB
  EXPECT_EQ(CachingAllocatorSegmentSize(10 * MiB), 10 * MiB);        // 2 MiB multiple
  EXPECT_EQ(CachingAllocatorSegmentSize(10 * MiB + 512), 12 * MiB);  // up to 2 MiB
}

TEST(CachingAllocatorConfigParse, ReadsTheOptionsThatPlaceBlocks) {
  CachingAllocatorConfig c = ParseCachingAllocatorConfig(
      "expandable_segments:True, max_split_size_mb:128,"
      "roundup_power2_divisions:[256:1,512:2,>:4],garbage_collection_threshold:0.6");
  EXPECT_TRUE(c.expandable_segments);
  EXPECT_EQ(c.max_split_size_bytes, 128 * MiB);
  EXPECT_EQ(c.max_non_split_rounding_bytes, 20 * MiB);  // the default
  // Index i covers [2^i, 2^(i+1)) MiB: 256 MiB is index 8, 512 MiB index 9.
  EXPECT_EQ(c.roundup_power2_divisions[0], 1);  // the first entry reaches down to 0
  EXPECT_EQ(c.roundup_power2_divisions[8], 1);
  EXPECT_EQ(c.roundup_power2_divisions[9], 2);
  EXPECT_EQ(c.roundup_power2_divisions[10], 4);
  EXPECT_EQ(c.roundup_power2_divisions[15], 4);
  // PyTorch's own example: entries between two listed sizes keep 0 (off).
  CachingAllocatorConfig d =
      ParseCachingAllocatorConfig("roundup_power2_divisions:[128:8,256:16,512:1,2048:8,>:2]");
  EXPECT_EQ(d.roundup_power2_divisions[6], 8);   // 64 MiB: below the first entry
  EXPECT_EQ(d.roundup_power2_divisions[8], 16);  // 256 MiB
  EXPECT_EQ(d.roundup_power2_divisions[10], 0);  // 1024 MiB: not listed
  EXPECT_EQ(d.roundup_power2_divisions[11], 8);  // 2048 MiB
  EXPECT_EQ(d.roundup_power2_divisions[12], 2);  // 4096 MiB: after the last entry
  EXPECT_FALSE(ParseCachingAllocatorConfig("").expandable_segments);
  EXPECT_EQ(ParseCachingAllocatorConfig("max_split_size_mb:4").max_split_size_bytes, 20 * MiB);
}

TEST(CachingAllocatorConfigParse, RejectsWhatPyTorchRejects) {
  EXPECT_THROW(ParseCachingAllocatorConfig("expandable_segments"), MemplanError);
  EXPECT_THROW(ParseCachingAllocatorConfig("expandable_segments:yes"), MemplanError);
  EXPECT_THROW(ParseCachingAllocatorConfig("max_split_size_mb:-1"), MemplanError);
  EXPECT_THROW(ParseCachingAllocatorConfig("roundup_power2_divisions:3"), MemplanError);
  EXPECT_THROW(ParseCachingAllocatorConfig("roundup_power2_divisions:[256:4"), MemplanError);
  EXPECT_THROW(ParseCachingAllocatorConfig("no_such_option:1"), MemplanError);
}

TEST(CachingAllocatorModel, SmallRequestTakesA2MiBSegmentAndSplitsIt) {
  CachingAllocatorModel m;
  auto a = m.Malloc(1000);
  // 1000 B -> a 1024 B block from a new 2 MiB segment; the rest stays cached.
  EXPECT_EQ(m.block_bytes(a), 1024);
  EXPECT_EQ(m.allocated_bytes(), 1024);
  EXPECT_EQ(m.reserved_bytes(), 2 * MiB);
  auto b = m.Malloc(1000);  // from the remainder, right after a
  EXPECT_EQ(m.address(b), m.address(a) + 1024);
  EXPECT_EQ(m.events().size(), 1u);
}

TEST(CachingAllocatorModel, LargeRemainderSplitsOnlyAbove1MiB) {
  CachingAllocatorModel m;
  auto a = m.Malloc(5 * MiB);  // a 20 MiB segment: 5 MiB block + 15 MiB free (> 1 MiB: split)
  EXPECT_EQ(m.block_bytes(a), 5 * MiB);
  EXPECT_EQ(m.reserved_bytes(), 20 * MiB);
  // 14.5 MiB fits the 15 MiB block; the 0.5 MiB rest is not worth a block: no split.
  auto b = m.Malloc(14 * MiB + 512 * KiB);
  EXPECT_EQ(m.block_bytes(b), 15 * MiB);
  EXPECT_EQ(m.allocated_bytes(), 20 * MiB);
  EXPECT_EQ(m.reserved_bytes(), 20 * MiB);
}

TEST(CachingAllocatorModel, FreedNeighboursCoalesce) {
  CachingAllocatorModel m;
  auto a = m.Malloc(512);
  auto b = m.Malloc(512);
  auto c = m.Malloc(512);
  m.Free(a);
  m.Free(c);  // merges with the free rest of the segment after it
  m.Free(b);  // merges with both: one 2 MiB free block again
  // 1 MiB fits only a block that starts at the segment (a's address) if all three merged.
  auto d = m.Malloc(1 * MiB);
  EXPECT_EQ(m.address(d), m.address(a));
  EXPECT_EQ(m.reserved_bytes(), 2 * MiB);
}

TEST(CachingAllocatorModel, BestFitPicksTheSmallestFittingBlock) {
  CachingAllocatorModel m;
  auto x = m.Malloc(30 * MiB);  // segments of 30, 24 and 40 MiB (>= 10 MiB: to 2 MiB)
  auto y = m.Malloc(24 * MiB);
  auto z = m.Malloc(40 * MiB);
  m.Free(x);
  m.Free(y);
  m.Free(z);
  auto w = m.Malloc(23 * MiB);  // fits all three; 24 MiB is the smallest
  EXPECT_EQ(m.address(w), m.address(y));
  EXPECT_EQ(m.block_bytes(w), 24 * MiB);  // the 1 MiB rest is not split off
  EXPECT_EQ(m.reserved_bytes(), 94 * MiB);
  EXPECT_EQ(m.events().size(), 3u);
}

TEST(CachingAllocatorModel, OversizeBlocksServeOnlyCloseRequests) {
  CachingAllocatorModel m(ParseCachingAllocatorConfig("max_split_size_mb:40"));
  auto x = m.Malloc(60 * MiB);
  m.Free(x);
  // 30 MiB < max_split_size may not take the 60 MiB (oversize) block: a new 30 MiB segment.
  m.Malloc(30 * MiB);
  // 45 MiB >= max_split_size may, as 60 < 45 + 20 (max_non_split_rounding), unsplit.
  auto z = m.Malloc(45 * MiB);
  EXPECT_EQ(m.address(z), m.address(x));
  EXPECT_EQ(m.block_bytes(z), 60 * MiB);
  EXPECT_EQ(EventBytes(m), (std::vector<int64_t>{60 * MiB, 30 * MiB}));
}

TEST(CachingAllocatorModel, StreamsDoNotShareBlocks) {
  CachingAllocatorModel m;
  m.Free(m.Malloc(1000, /*stream=*/0));
  m.Malloc(1000, /*stream=*/1);  // stream 0's cached 2 MiB cannot serve stream 1
  EXPECT_EQ(m.reserved_bytes(), 4 * MiB);
  ASSERT_EQ(m.events().size(), 2u);
  EXPECT_EQ(m.events()[1].stream, 1);
}

TEST(CachingAllocatorModel, ExpandableSegmentGrowsByPages) {
  CachingAllocatorModel m(ParseCachingAllocatorConfig("expandable_segments:True"));
  auto a = m.Malloc(5 * MiB);  // maps one 20 MiB page of the large segment
  EXPECT_EQ(m.block_bytes(a), 5 * MiB);
  EXPECT_EQ(m.reserved_bytes(), 20 * MiB);
  // 30 MiB: the 15 MiB free tail plus 15 MiB more, mapped as one more 20 MiB page; the
  // block starts where the free tail did and the segment stays one piece.
  auto b = m.Malloc(30 * MiB);
  EXPECT_EQ(m.address(b), m.address(a) + 5 * MiB);
  EXPECT_EQ(m.reserved_bytes(), 40 * MiB);
  m.Malloc(1000);  // the small pool has its own segment, in 2 MiB pages
  EXPECT_EQ(m.reserved_bytes(), 42 * MiB);
  ASSERT_EQ(m.events().size(), 3u);
  EXPECT_EQ(m.events()[0].kind, Kind::kMap);
  EXPECT_EQ(EventBytes(m), (std::vector<int64_t>{20 * MiB, 20 * MiB, 2 * MiB}));
  // Remainders of any size split when expandable: 5 MiB + 30 MiB + 1024 B allocated.
  EXPECT_EQ(m.allocated_bytes(), 35 * MiB + 1024);
}

TEST(CachingAllocatorModel, ExpandableFreeSpaceIsReusedBeforeMapping) {
  CachingAllocatorModel m(ParseCachingAllocatorConfig("expandable_segments:True"));
  auto a = m.Malloc(8 * MiB);
  m.Malloc(8 * MiB);
  m.Free(a);
  m.Malloc(6 * MiB);  // fits a's 8 MiB hole: nothing mapped
  EXPECT_EQ(m.reserved_bytes(), 20 * MiB);
  EXPECT_EQ(m.events().size(), 1u);
}

TEST(CachingAllocatorSimulateReserved, ReplaysASchedule) {
  Schedule s;
  BufferId p = s.AddBuffer({"param", 3 * MiB});
  BufferId t1 = s.AddBuffer({"t1", 4 * MiB});
  BufferId t2 = s.AddBuffer({"t2", 100});
  s.steps.push_back({});
  s.steps.back().allocs = {p, t1, t2};
  s.steps.back().frees = {t1};
  s.steps.push_back({});
  s.steps.back().allocs = {t1};
  s.steps.back().frees = {t1, t2};
  ReservedTimeline t = SimulateReserved(s, {});
  // Step 0: param takes 3 of a 20 MiB segment, t1 4 more of it, t2 512 B of a 2 MiB one.
  EXPECT_EQ(t.allocated_during[0], 7 * MiB + 512);
  EXPECT_EQ(t.reserved_during[0], 22 * MiB);
  EXPECT_EQ(t.allocated_after[0], 3 * MiB + 512);
  // Step 1: t1 comes back from the cache; nothing new is reserved.
  EXPECT_EQ(t.reserved_after[1], 22 * MiB);
  EXPECT_EQ(t.reserved_peak_bytes, 22 * MiB);
  EXPECT_EQ(t.allocated_peak_bytes, 7 * MiB + 512);
  EXPECT_EQ(t.segment_events.size(), 2u);
}

// ---------------------------------------------------------------------------------------------
// Real traces: torch.cuda.memory._snapshot() after one training step (a warm-up step before
// it), PyTorch 2.11.0+cu130 on an H200; shared/gpu/snapshot.py recorded them.
//
// The allocator was not empty when recording began. Every allocation of the step is freed in
// it, so the blocks alive at the start are those alive at the end: the ones never touched by
// the trace (parameters, gradients, the batch). A snapshot gives only each segment's
// allocated total, not its blocks, so the start state is rebuilt from addresses:
// - the segments at the start are those at the end less the ones the trace allocates; an
//   expandable segment had its pages less those the trace maps;
// - a segment with nothing allocated at the end starts as one free block;
// - in the others, the address ranges no allocation of the trace ever covers hold the live
//   blocks. Where those ranges add up to more than the segment's allocated bytes, the excess
//   is free space the step never used; where it lies cannot be known, so it is kept as
//   allocated ("dead") bytes: never used by the trace, it cannot change what the trace does,
//   and the allocated peak is compared less those bytes.

struct Trace {
  nlohmann::json snapshot;
  nlohmann::json summary;
};

Trace LoadTrace(const std::string& name) {
  const std::string dir = std::string(MEMPLAN_SOURCE_DIR) + "/tests/data/allocator-snapshots/";
  Trace t;
  std::ifstream in(dir + name + ".json");
  EXPECT_TRUE(in) << dir + name + ".json";
  t.snapshot = nlohmann::json::parse(in);
  std::ifstream sum(dir + "summary.jsonl");
  std::string line;
  const bool expandable = name.find("expandable") != std::string::npos;
  while (std::getline(sum, line)) {
    nlohmann::json j = nlohmann::json::parse(line);
    std::string stem = j["model"].get<std::string>() + "-b" + std::to_string(j["batch"].get<int>());
    if (name.rfind(stem + "-", 0) == 0 && (j["alloc_conf"] != "") == expandable) t.summary = j;
  }
  EXPECT_FALSE(t.summary.is_null()) << name;
  return t;
}

struct ReplayResult {
  int64_t dead_bytes = 0;
  int mallocs = 0;
  int same_address = 0;
  int event_mismatches = 0;
  int reserved_mismatches = 0;
  int64_t peak_reserved = 0;
  int64_t peak_allocated = 0;
  std::string first_problem;
};

ReplayResult Replay(const Trace& t) {
  const nlohmann::json& trace = t.snapshot["trace"];
  const nlohmann::json& segments = t.snapshot["segments_at_end"];
  CachingAllocatorConfig config =
      ParseCachingAllocatorConfig(t.summary["alloc_conf"].get<std::string>());
  ReplayResult r;

  // The segment_alloc that precedes an alloc names the address cudaMalloc gave.
  int64_t next_segment_address = 0;
  CachingAllocatorModel::Options options;
  options.config = config;
  options.segment_address = [&](int64_t) {
    int64_t a = next_segment_address ? next_segment_address : (int64_t{1} << 50);
    next_segment_address = 0;
    return a;
  };
  CachingAllocatorModel model(options);

  std::vector<std::pair<int64_t, int64_t>> touched;  // [begin, end) of every allocation
  std::vector<int64_t> created;
  std::vector<std::pair<int64_t, int64_t>> maps;
  for (const auto& e : trace) {
    const std::string action = e["action"];
    int64_t addr = e["addr"], size = e["size"];
    if (action == "alloc") touched.push_back({addr, addr + CachingAllocatorRoundSize(size, {})});
    if (action == "segment_alloc") created.push_back(addr);
    if (action == "segment_map") maps.push_back({addr, size});
  }
  std::sort(touched.begin(), touched.end());
  for (const auto& s : segments) {
    int64_t lo = s["address"], total = s["total_size"], allocated = s["allocated_size"];
    if (std::find(created.begin(), created.end(), lo) != created.end()) continue;
    int64_t mapped_in_trace = 0;
    for (auto [a, size] : maps) {
      if (a >= lo && a < lo + total) mapped_in_trace += size;
    }
    const int64_t hi = lo + total - mapped_in_trace;
    if (hi == lo) continue;
    std::vector<CachingAllocatorModel::InitialBlock> blocks;
    auto add = [&](int64_t bytes, bool alive) {
      if (bytes <= 0) return;
      if (!blocks.empty() && blocks.back().allocated == alive) {
        blocks.back().bytes += bytes;  // neighbouring free space is one block
      } else {
        blocks.push_back({bytes, alive});
      }
    };
    if (allocated == 0) {
      add(hi - lo, false);
    } else {
      int64_t cur = lo, untouched = 0;
      for (auto [a, b] : touched) {
        if (a < lo || a >= hi) continue;
        if (a > cur) {
          add(a - cur, true);
          untouched += a - cur;
        }
        add(std::min(b, hi) - std::max(a, cur), false);
        cur = std::max(cur, std::min(b, hi));
      }
      if (cur < hi) {
        add(hi - cur, true);
        untouched += hi - cur;
      }
      EXPECT_GE(untouched, allocated) << "segment " << lo;
      r.dead_bytes += untouched - allocated;
    }
    model.AddSegment(lo, s["stream"].get<int>(), s["segment_type"] == "small", blocks);
  }

  int64_t expected_reserved = model.reserved_bytes();
  std::vector<SegmentEvent> pending;  // the trace's segment events before the next alloc
  std::map<int64_t, CachingAllocatorModel::Handle> handles;
  size_t seen_events = 0;
  auto problem = [&](size_t i, const std::string& what) {
    if (r.first_problem.empty()) r.first_problem = "event " + std::to_string(i) + ": " + what;
  };
  for (size_t i = 0; i < trace.size(); ++i) {
    const auto& e = trace[i];
    const std::string action = e["action"];
    int64_t addr = e["addr"], size = e["size"];
    if (action == "segment_alloc" || action == "segment_map") {
      pending.push_back({action == "segment_alloc" ? Kind::kAlloc : Kind::kMap, addr, size});
      if (action == "segment_alloc") next_segment_address = addr;
      expected_reserved += size;
    } else if (action == "alloc") {
      CachingAllocatorModel::Handle h = model.Malloc(size, e["stream"].get<int>());
      handles[addr] = h;
      ++r.mallocs;
      if (model.address(h) == addr) ++r.same_address;
      std::vector<SegmentEvent> got(model.events().begin() + seen_events, model.events().end());
      seen_events = model.events().size();
      bool same = got.size() == pending.size();
      for (size_t k = 0; same && k < got.size(); ++k) {
        same = got[k].kind == pending[k].kind && got[k].bytes == pending[k].bytes &&
               got[k].address == pending[k].address;
      }
      if (!same) {
        ++r.event_mismatches;
        problem(i, "segment events differ at an alloc of " + std::to_string(size) + " B");
      }
      pending.clear();
    } else if (action == "free_requested") {
      model.Free(handles.at(addr));
      handles.erase(addr);
    } else {
      continue;  // free_completed: no stream uses here, it follows its free_requested
    }
    if (action == "alloc" || action == "free_requested") {
      if (model.reserved_bytes() != expected_reserved) {
        ++r.reserved_mismatches;
        problem(i, "reserved " + std::to_string(model.reserved_bytes()) +
                       " != " + std::to_string(expected_reserved));
      }
    }
  }
  r.peak_reserved = model.peak_reserved_bytes();
  r.peak_allocated = model.peak_allocated_bytes();
  return r;
}

class CachingAllocatorTrace : public ::testing::TestWithParam<std::string> {};

TEST_P(CachingAllocatorTrace, SameSegmentEventsAndReservedBytesAsPyTorch) {
  Trace t = LoadTrace(GetParam());
  ASSERT_FALSE(t.summary.is_null());
  ReplayResult r = Replay(t);
  EXPECT_EQ(r.event_mismatches, 0) << r.first_problem;
  EXPECT_EQ(r.reserved_mismatches, 0) << r.first_problem;
  // reset_peak_memory_stats() came right before the recorded step: its peak is the trace's.
  EXPECT_EQ(r.peak_reserved, t.summary["max_reserved"].get<int64_t>());
  RecordProperty("mallocs", r.mallocs);
  RecordProperty("same_address", r.same_address);
  RecordProperty("dead_bytes", std::to_string(r.dead_bytes));
  RecordProperty("peak_allocated_less_dead", std::to_string(r.peak_allocated - r.dead_bytes));
  std::cout << GetParam() << ": " << r.same_address << " of " << r.mallocs
            << " blocks at PyTorch's address; peak allocated " << r.peak_allocated - r.dead_bytes
            << " (PyTorch " << t.summary["max_allocated"] << "), dead " << r.dead_bytes << "\n";
}

INSTANTIATE_TEST_SUITE_P(Snapshots, CachingAllocatorTrace,
                         ::testing::Values("resnet18-b64-default", "resnet18-b64-expandable",
                                           "gpt-b32-default", "gpt-b32-expandable",
                                           "vit_b_16-b32-default", "vit_b_16-b32-expandable"),
                         [](const auto& info) {
                           // "vit_b_16-b32-default" -> "VitB16B32Default"
                           std::string n;
                           bool up = true;
                           for (char c : info.param) {
                             if (!std::isalnum(static_cast<unsigned char>(c))) {
                               up = true;
                             } else {
                               n += up ? static_cast<char>(std::toupper(c)) : c;
                               up = false;
                             }
                           }
                           return n;
                         });

}  // namespace
}  // namespace memplan
