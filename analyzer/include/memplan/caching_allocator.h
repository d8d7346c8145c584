// A model of PyTorch's CUDA caching allocator (c10/cuda/CUDACachingAllocator.cpp, LibTorch 2.11
// to 2.14), written from its source: what `cudaMalloc` (or, with expandable segments, the
// pages mapped with cuMemMap) holds while a sequence of allocations and frees runs. That is
// the *reserved* memory, the memory that runs out on a GPU; the *allocated* memory is what
// the tensors' blocks hold.
//
// What it models, for one device:
// - sizes: a request is rounded up to a multiple of 512 B (or to a power-of-two division,
//   `roundup_power2_divisions`); requests of at most 1 MiB come from the small pool, larger
//   ones from the large pool;
// - default mode: a new segment is 2 MiB for the small pool, 20 MiB for a large request under
//   10 MiB, else the request rounded up to 2 MiB;
// - per (stream, pool) best fit: the smallest free block that fits, ties by address;
//   `max_split_size_mb` and `max_non_split_rounding_mb` limit which oversize blocks serve;
// - splitting: the block's remainder becomes a free block if it is at least 512 B (small
//   pool, or expandable segments), or more than 1 MiB (large pool, and the request is under
//   max_split_size); otherwise the allocation keeps the whole block;
// - coalescing: a freed block merges with free neighbours of its segment;
// - expandable segments: one virtual segment per (stream, pool), grown by mapping pages
//   (2 MiB small, 20 MiB large) at the lowest address that fits, merged with the free block
//   before them.
// What it leaves out: out-of-memory handling (device memory is unlimited, so cached blocks
// are never released and nothing is unmapped), cross-stream uses and their events, CUDA
// graph pools, garbage collection.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <string_view>
#include <vector>

#include "memplan/analyzer.h"

namespace memplan {

// PYTORCH_CUDA_ALLOC_CONF, the options that change where blocks go.
struct CachingAllocatorConfig {
  static constexpr int64_t kNoLimit = INT64_MAX;
  static constexpr int kPower2Intervals = 16;  // 1 MiB, 2 MiB, ..., 32 GiB and above

  bool expandable_segments = false;
  // Blocks at least this large are never split, and serve only requests at least this large.
  int64_t max_split_size_bytes = kNoLimit;
  // An oversize block serves a request only if it is less than this many bytes larger.
  int64_t max_non_split_rounding_bytes = 20 << 20;
  // Per size interval (index 0: below 2 MiB, i: [2^i, 2^(i+1)) MiB, the last: the rest), the
  // number of divisions of each power of two that requests round up to; 0 or 1: off.
  std::array<int64_t, kPower2Intervals> roundup_power2_divisions{};
  // Sizes the virtual range of an expandable segment (1 1/8 of the device's memory); only the
  // order of best-fit ties between expandable segments depends on it.
  int64_t device_memory_bytes = int64_t{141} << 30;
};

// Parses a PYTORCH_CUDA_ALLOC_CONF string ("expandable_segments:True,max_split_size_mb:128",
// "roundup_power2_divisions:[256:1,512:2,>:4]"). Options that do not change block placement
// (pinned_*, release_lock_on_cudamalloc, garbage_collection_threshold, ...) are accepted and
// ignored. Throws MemplanError on a malformed string or an unknown option.
CachingAllocatorConfig ParseCachingAllocatorConfig(std::string_view conf);

// The block size a request of `bytes` gets (before any unsplit remainder is added).
int64_t CachingAllocatorRoundSize(int64_t bytes, const CachingAllocatorConfig& config);
// The size of the segment `cudaMalloc`ed for a rounded request the pools cannot serve.
int64_t CachingAllocatorSegmentSize(int64_t rounded_bytes);

// A segment_alloc (a `cudaMalloc`) or a segment_map (pages mapped into an expandable segment).
struct SegmentEvent {
  enum class Kind { kAlloc, kMap };
  Kind kind = Kind::kAlloc;
  int64_t address = 0;
  int64_t bytes = 0;
  int stream = 0;
  int64_t malloc_index = 0;  // the Malloc call (0-based) that caused it
};

// Allocated and reserved bytes after one Malloc or Free.
struct AllocatorSample {
  int64_t allocated_bytes = 0;
  int64_t reserved_bytes = 0;
};

class CachingAllocatorModel {
 public:
  using Handle = int32_t;

  struct Options {
    CachingAllocatorConfig config;
    // The address a new segment gets (cudaMalloc's answer, or the base of an expandable
    // segment's virtual range). Addresses only break best-fit ties; by default segments are
    // laid out one after another from 1 TiB.
    std::function<int64_t(int64_t bytes)> segment_address;
  };

  explicit CachingAllocatorModel(Options options);
  explicit CachingAllocatorModel(const CachingAllocatorConfig& config = {});
  ~CachingAllocatorModel();
  CachingAllocatorModel(const CachingAllocatorModel&) = delete;
  CachingAllocatorModel& operator=(const CachingAllocatorModel&) = delete;

  // One request of `bytes` (> 0) on `stream`: the handle of its block.
  Handle Malloc(int64_t bytes, int stream = 0);
  void Free(Handle h);

  int64_t address(Handle h) const;      // where the block starts
  int64_t block_bytes(Handle h) const;  // the block's size: rounded request + unsplit rest

  int64_t allocated_bytes() const { return allocated_; }
  int64_t reserved_bytes() const { return reserved_; }
  int64_t peak_allocated_bytes() const { return peak_allocated_; }
  int64_t peak_reserved_bytes() const { return peak_reserved_; }
  const std::vector<SegmentEvent>& events() const { return events_; }
  const std::vector<AllocatorSample>& samples() const { return samples_; }  // one per call

  // Warm start: a segment that already exists, as a list of blocks from its start address
  // (allocated blocks stay allocated for good). In expandable mode `blocks` cover the mapped
  // part, and there is one such segment per (stream, pool). Call before the first Malloc.
  struct InitialBlock {
    int64_t bytes = 0;
    bool allocated = false;
  };
  void AddSegment(int64_t address, int stream, bool small_pool,
                  const std::vector<InitialBlock>& blocks);

 private:
  struct Impl;
  Impl* impl_;
  int64_t allocated_ = 0, reserved_ = 0, peak_allocated_ = 0, peak_reserved_ = 0;
  std::vector<SegmentEvent> events_;
  std::vector<AllocatorSample> samples_;
};

// A schedule replayed through the model on one stream: each step's allocs, then its frees.
struct ReservedTimeline {
  std::vector<int64_t> allocated_during;  // per step, after its allocs (block bytes)
  std::vector<int64_t> reserved_during;
  std::vector<int64_t> allocated_after;  // per step, after its frees
  std::vector<int64_t> reserved_after;
  int64_t allocated_peak_bytes = 0;
  int64_t reserved_peak_bytes = 0;
  int32_t reserved_peak_step = 0;
  std::vector<SegmentEvent> segment_events;  // malloc_index counts the schedule's allocs
};

// Throws MemplanError on a broken schedule (as Simulate does). A 0-byte buffer takes a 512 B
// block, as AccountedBytes counts it under AllocatorPolicy::kCudaCaching.
ReservedTimeline SimulateReserved(const Schedule& s, const CachingAllocatorConfig& config);

}  // namespace memplan
