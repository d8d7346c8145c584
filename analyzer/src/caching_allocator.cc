// The caching allocator model: see caching_allocator.h. Names follow PyTorch's where that
// helps reading the two side by side (pools, blocks, split, merge, map).
#include "memplan/caching_allocator.h"

#include <algorithm>
#include <bit>
#include <cctype>
#include <set>
#include <string>

#include "memplan/training_graph.h"

namespace memplan {
namespace {

constexpr int64_t kMinBlockSize = 512;
constexpr int64_t kSmallSize = 1 << 20;       // largest small-pool request
constexpr int64_t kSmallBuffer = 2 << 20;     // small-pool segment, and its page when expandable
constexpr int64_t kLargeBuffer = 20 << 20;    // 1-10 MiB requests' segment; large page
constexpr int64_t kMinLargeAlloc = 10 << 20;  // from here segments are the request rounded up
constexpr int64_t kRoundLarge = 2 << 20;
constexpr int64_t kMiB = 1 << 20;

int64_t CeilTo(int64_t n, int64_t unit) { return (n + unit - 1) / unit * unit; }

std::string Trim(std::string_view s) {
  size_t b = 0, e = s.size();
  while (b < e && std::isspace(static_cast<unsigned char>(s[b]))) ++b;
  while (e > b && std::isspace(static_cast<unsigned char>(s[e - 1]))) --e;
  return std::string(s.substr(b, e - b));
}

[[noreturn]] void BadConf(std::string_view conf, const std::string& why) {
  throw MemplanError("PYTORCH_CUDA_ALLOC_CONF '" + std::string(conf) + "': " + why);
}

int64_t ParseCount(std::string_view conf, const std::string& text) {
  if (text.empty() ||
      !std::all_of(text.begin(), text.end(),
                   [](char c) { return std::isdigit(static_cast<unsigned char>(c)); }) ||
      text.size() > 15) {
    BadConf(conf, "'" + text + "' is not a whole number");
  }
  return std::stoll(text);
}

// The interval a rounded size falls in for roundup_power2_divisions.
int Power2Interval(int64_t bytes) {
  int log_size = static_cast<int>(std::bit_width(static_cast<uint64_t>(bytes))) - 1;
  int index = log_size > 20 ? log_size - 20 : 0;
  return std::min(index, CachingAllocatorConfig::kPower2Intervals - 1);
}

}  // namespace

CachingAllocatorConfig ParseCachingAllocatorConfig(std::string_view conf) {
  CachingAllocatorConfig c;
  // Split at commas outside brackets.
  std::vector<std::string> items;
  std::string cur;
  int depth = 0;
  for (char ch : conf) {
    if (ch == '[') ++depth;
    if (ch == ']') --depth;
    if (depth < 0) BadConf(conf, "unbalanced ']'");
    if (ch == ',' && depth == 0) {
      items.push_back(cur);
      cur.clear();
    } else {
      cur += ch;
    }
  }
  if (depth != 0) BadConf(conf, "unbalanced '['");
  items.push_back(cur);
  for (const std::string& raw : items) {
    std::string item = Trim(raw);
    if (item.empty()) continue;
    size_t colon = item.find(':');
    if (colon == std::string::npos) BadConf(conf, "'" + item + "' has no ':value'");
    std::string key = Trim(std::string_view(item).substr(0, colon));
    std::string value = Trim(std::string_view(item).substr(colon + 1));
    if (key == "expandable_segments") {
      if (value != "True" && value != "False") BadConf(conf, "expandable_segments is True|False");
      c.expandable_segments = value == "True";
    } else if (key == "max_split_size_mb" || key == "max_non_split_rounding_mb") {
      // PyTorch's floor: neither may be below the 20 MiB large segment.
      int64_t mb = std::max<int64_t>(ParseCount(conf, value), kLargeBuffer / kMiB);
      int64_t bytes = mb > INT64_MAX / kMiB ? CachingAllocatorConfig::kNoLimit : mb * kMiB;
      (key == "max_split_size_mb" ? c.max_split_size_bytes : c.max_non_split_rounding_bytes) =
          bytes;
    } else if (key == "roundup_power2_divisions") {
      auto divisions = [&](const std::string& v) {
        int64_t d = ParseCount(conf, v);
        if (d != 0 && !std::has_single_bit(static_cast<uint64_t>(d))) {
          BadConf(conf, "roundup_power2_divisions must be powers of two");
        }
        return d;
      };
      if (value.empty() || value.front() != '[') {
        c.roundup_power2_divisions.fill(divisions(value));
        continue;
      }
      if (value.back() != ']') BadConf(conf, "roundup_power2_divisions list lacks ']'");
      std::string list = value.substr(1, value.size() - 2);
      // "[256:4,512:2,>:1]": the interval of 256 MiB gets 4, and so do those below it (the
      // first entry's value reaches down); 512 MiB gets 2; ">" covers the intervals after the
      // last entry. Intervals between two entries keep 0 (off).
      constexpr int kIntervals = CachingAllocatorConfig::kPower2Intervals;
      bool first = true;
      int last = 0;
      size_t pos = 0;
      while (pos <= list.size()) {
        size_t comma = list.find(',', pos);
        std::string entry = Trim(std::string_view(list).substr(
            pos, comma == std::string::npos ? std::string::npos : comma - pos));
        pos = comma == std::string::npos ? list.size() + 1 : comma + 1;
        if (entry.empty()) continue;
        size_t sep = entry.find(':');
        if (sep == std::string::npos) BadConf(conf, "'" + entry + "' is not SIZE_MB:DIVISIONS");
        std::string at = Trim(std::string_view(entry).substr(0, sep));
        int64_t d = divisions(Trim(std::string_view(entry).substr(sep + 1)));
        if (at == ">") {
          std::fill(c.roundup_power2_divisions.begin() + std::min(last + 1, kIntervals),
                    c.roundup_power2_divisions.end(), d);
          continue;
        }
        int64_t mb = ParseCount(conf, at);
        if (!std::has_single_bit(static_cast<uint64_t>(mb))) {
          BadConf(conf, "roundup_power2_divisions sizes must be powers of two MiB");
        }
        int index = std::min(static_cast<int>(std::bit_width(static_cast<uint64_t>(mb))) - 1,
                             CachingAllocatorConfig::kPower2Intervals - 1);
        if (first) {
          std::fill(c.roundup_power2_divisions.begin(), c.roundup_power2_divisions.begin() + index,
                    d);
          first = false;
        }
        c.roundup_power2_divisions[index] = d;
        last = index;
      }
    } else if (key == "backend") {
      // cudaMallocAsync hands memory to the driver's pool, which this does not model.
      if (value != "native") BadConf(conf, "only the native backend is modelled");
    } else if (key == "garbage_collection_threshold" || key == "release_lock_on_cudamalloc" ||
               key == "pinned_use_cuda_host_register" || key == "pinned_num_register_threads" ||
               key == "pinned_use_background_threads" || key == "per_process_memory_fraction" ||
               key == "graph_capture_record_stream_reuse" ||
               key == "pinned_reserve_segment_size_mb" || key == "release_lock_on_device_malloc" ||
               key == "pinned_use_device_host_register") {
      // Accepted; they do not move blocks while memory is plentiful.
    } else {
      BadConf(conf, "unknown option '" + key + "'");
    }
  }
  return c;
}

int64_t CachingAllocatorRoundSize(int64_t bytes, const CachingAllocatorConfig& config) {
  if (bytes < kMinBlockSize) return kMinBlockSize;
  int64_t divisions = config.roundup_power2_divisions[Power2Interval(bytes)];
  if (divisions > 1 && bytes > kMinBlockSize * divisions) {
    // Round up to the next of `divisions` equal steps between two powers of two.
    uint64_t u = static_cast<uint64_t>(bytes);
    if (std::has_single_bit(u)) return bytes;
    int64_t floor2 = static_cast<int64_t>(std::bit_floor(u));
    int64_t step = floor2 >> (std::bit_width(static_cast<uint64_t>(divisions)) - 1);
    if (step == 0) return floor2 << 1;
    return CeilTo(bytes, step);
  }
  return CeilTo(bytes, kMinBlockSize);
}

int64_t CachingAllocatorSegmentSize(int64_t rounded_bytes) {
  if (rounded_bytes <= kSmallSize) return kSmallBuffer;
  if (rounded_bytes < kMinLargeAlloc) return kLargeBuffer;
  return CeilTo(rounded_bytes, kRoundLarge);
}

// ---------------------------------------------------------------------------------------------

struct CachingAllocatorModel::Impl {
  static constexpr int kNone = -1;

  struct Block {
    int64_t address = 0;
    int64_t size = 0;
    int stream = 0;
    bool small = false;
    bool allocated = false;
    bool mapped = true;  // false: virtual range of an expandable segment with no pages
    int prev = kNone;    // neighbours within the segment
    int next = kNone;
    int segment = kNone;  // expandable segment index, or kNone
    bool live = false;    // slot in use
  };
  struct Expandable {
    int64_t base = 0;
    int64_t page = 0;
  };

  std::vector<Block> blocks;
  std::vector<int> free_slots;
  std::vector<Expandable> expandable;

  // Free blocks by (stream, size, address), and unmapped ranges by (stream, address), per pool.
  struct BySize {
    const std::vector<Block>* b;
    bool operator()(int x, int y) const {
      const Block &p = (*b)[x], &q = (*b)[y];
      if (p.stream != q.stream) return p.stream < q.stream;
      if (p.size != q.size) return p.size < q.size;
      return p.address < q.address;
    }
  };
  struct ByAddress {
    const std::vector<Block>* b;
    bool operator()(int x, int y) const {
      const Block &p = (*b)[x], &q = (*b)[y];
      if (p.stream != q.stream) return p.stream < q.stream;
      return p.address < q.address;
    }
  };
  struct Pool {
    std::set<int, BySize> free;
    std::set<int, ByAddress> unmapped;
  };
  Pool pools[2];  // [0] large, [1] small

  Options options;
  int64_t next_address = int64_t{1} << 40;
  int64_t malloc_count = 0;

  explicit Impl(Options o)
      : pools{{std::set<int, BySize>(BySize{&blocks}),
               std::set<int, ByAddress>(ByAddress{&blocks})},
              {std::set<int, BySize>(BySize{&blocks}),
               std::set<int, ByAddress>(ByAddress{&blocks})}},
        options(std::move(o)) {}

  Pool& PoolOf(const Block& b) { return pools[b.small ? 1 : 0]; }

  int NewBlock(const Block& proto) {
    int id;
    if (!free_slots.empty()) {
      id = free_slots.back();
      free_slots.pop_back();
      blocks[id] = proto;
    } else {
      id = static_cast<int>(blocks.size());
      blocks.push_back(proto);
    }
    blocks[id].live = true;
    return id;
  }
  void DeleteBlock(int id) {
    blocks[id].live = false;
    free_slots.push_back(id);
  }

  int64_t SegmentAddress(int64_t bytes) {
    if (options.segment_address) return options.segment_address(bytes);
    int64_t a = next_address;
    next_address += CeilTo(bytes, kSmallBuffer) + kSmallBuffer;  // a guard gap between segments
    return a;
  }

  // The virtual size of an expandable segment: 1 1/8 of the device, in whole pages.
  int64_t ExpandableSize(int64_t page) const {
    int64_t total = options.config.device_memory_bytes;
    return CeilTo(total + total / 8, page);
  }

  // Best fit in the pool for a rounded request; kNone if none (get_free_block).
  int FindFree(Pool& pool, int64_t size, int stream) {
    const CachingAllocatorConfig& cfg = options.config;
    Block key;
    key.stream = stream;
    key.size = size;
    key.address = INT64_MIN;
    // The search key lives in a scratch slot at the end of the table.
    blocks.push_back(key);
    int key_id = static_cast<int>(blocks.size()) - 1;
    auto it = pool.free.lower_bound(key_id);
    blocks.pop_back();
    if (it == pool.free.end() || blocks[*it].stream != stream) return kNone;
    if (blocks[*it].segment != kNone) {
      // A free block at the end of an expandable segment can grow: for best fit its size is
      // what it could grow to, so a later block that fits is preferred to it.
      auto growable = [&](int id) {
        const Block& b = blocks[id];
        int64_t extra = b.next != kNone && !blocks[b.next].mapped ? blocks[b.next].size : 0;
        return b.size + extra;
      };
      auto next = std::next(it);
      while (blocks[*it].segment != kNone && next != pool.free.end() &&
             blocks[*next].stream == stream && growable(*next) < growable(*it)) {
        it = next++;
      }
    }
    int64_t found = blocks[*it].size;
    if (size < cfg.max_split_size_bytes && found >= cfg.max_split_size_bytes) return kNone;
    if (size >= cfg.max_split_size_bytes && found >= size + cfg.max_non_split_rounding_bytes) {
      return kNone;
    }
    int id = *it;
    pool.free.erase(it);
    return id;
  }

  // Merges free neighbour `src` into `dst` (try_merge_blocks); both out of the free sets.
  void Merge(int dst, int src) {
    if (src == kNone) return;
    Block& s = blocks[src];
    Block& d = blocks[dst];
    if (s.allocated || s.mapped != d.mapped) return;
    Pool& pool = PoolOf(s);
    if (s.mapped) {
      pool.free.erase(src);
    } else {
      pool.unmapped.erase(src);
    }
    if (d.prev == src) {
      d.address = s.address;
      d.prev = s.prev;
      if (d.prev != kNone) blocks[d.prev].next = dst;
    } else {
      d.next = s.next;
      if (d.next != kNone) blocks[d.next].prev = dst;
    }
    d.size += s.size;
    DeleteBlock(src);
  }

  // Maps the pages covering [start of `id`, + size) (map_block); returns the mapped bytes.
  void Map(int id, int64_t size, std::vector<SegmentEvent>& events, int64_t& reserved) {
    Block& b = blocks[id];
    const Expandable& es = expandable[b.segment];
    int64_t begin = (b.address - es.base) / es.page;
    int64_t end = (b.address - es.base + size + es.page - 1) / es.page;
    int64_t mapped = (end - begin) * es.page;
    Pool& pool = PoolOf(b);
    pool.unmapped.erase(id);
    blocks[id].mapped = true;
    if (mapped < blocks[id].size) {
      Block rest = blocks[id];
      rest.address += mapped;
      rest.size -= mapped;
      rest.mapped = false;
      rest.prev = id;
      int r = NewBlock(rest);  // may move `blocks`
      if (blocks[r].next != kNone) blocks[blocks[r].next].prev = r;
      blocks[id].next = r;
      blocks[id].size = mapped;
      pool.unmapped.insert(r);
    }
    int64_t at = blocks[id].address;
    Merge(id, blocks[id].prev);
    Merge(id, blocks[id].next);
    pool.free.insert(id);
    reserved += mapped;
    events.push_back({SegmentEvent::Kind::kMap, at, mapped, blocks[id].stream, malloc_count});
  }

  // The lowest-addressed free-or-unmapped run of `size` bytes in the stream's expandable
  // segment, creating the segment if there is none (find_expandable_block).
  int FindExpandable(Pool& pool, bool small, int64_t size, int stream) {
    auto usable = [&](int id) { return id != kNone && !blocks[id].allocated; };
    for (int u : pool.unmapped) {
      if (blocks[u].stream != stream) continue;
      int c = usable(blocks[u].prev) ? blocks[u].prev : u;
      int64_t room = 0;
      for (int x = c; room < size && usable(x); x = blocks[x].next) room += blocks[x].size;
      if (room >= size) return c;
    }
    Expandable es;
    es.page = small ? kSmallBuffer : kLargeBuffer;
    int64_t virtual_size = ExpandableSize(es.page);
    if (virtual_size < size) throw MemplanError("allocation larger than the device");
    es.base = SegmentAddress(virtual_size);
    expandable.push_back(es);
    Block b;
    b.address = es.base;
    b.size = virtual_size;
    b.stream = stream;
    b.small = small;
    b.mapped = false;
    b.segment = static_cast<int>(expandable.size()) - 1;
    int id = NewBlock(b);
    pool.unmapped.insert(id);
    return id;
  }

  // A new block of at least `size` bytes from the device (alloc_block).
  int NewSegmentBlock(bool small, int64_t size, int stream, std::vector<SegmentEvent>& events,
                      int64_t& reserved) {
    Pool& pool = pools[small ? 1 : 0];
    if (options.config.expandable_segments) {
      int c = FindExpandable(pool, small, size, stream);
      if (!blocks[c].mapped) Map(c, std::min(blocks[c].size, size), events, reserved);
      while (blocks[c].size < size) {
        // c is free and followed by unmapped pages: map what is missing, merge into them.
        int n = blocks[c].next;
        Map(n, std::min(size - blocks[c].size, blocks[n].size), events, reserved);
        c = n;
      }
      pool.free.erase(c);
      return c;
    }
    int64_t bytes = CachingAllocatorSegmentSize(size);
    Block b;
    b.address = SegmentAddress(bytes);
    b.size = bytes;
    b.stream = stream;
    b.small = small;
    reserved += bytes;
    events.push_back({SegmentEvent::Kind::kAlloc, b.address, bytes, stream, malloc_count});
    return NewBlock(b);
  }

  bool ShouldSplit(const Block& b, int64_t size) const {
    int64_t remaining = b.size - size;
    if (b.small || options.config.expandable_segments) return remaining >= kMinBlockSize;
    return size < options.config.max_split_size_bytes && remaining > kSmallSize;
  }
};

CachingAllocatorModel::CachingAllocatorModel(Options options)
    : impl_(new Impl(std::move(options))) {}
CachingAllocatorModel::CachingAllocatorModel(const CachingAllocatorConfig& config)
    : CachingAllocatorModel(Options{config, nullptr}) {}
CachingAllocatorModel::~CachingAllocatorModel() { delete impl_; }

CachingAllocatorModel::Handle CachingAllocatorModel::Malloc(int64_t bytes, int stream) {
  if (bytes <= 0)
    throw MemplanError("caching allocator model: Malloc of " + std::to_string(bytes) + " bytes");
  Impl& m = *impl_;
  int64_t size = CachingAllocatorRoundSize(bytes, m.options.config);
  bool small = size <= kSmallSize;
  Impl::Pool& pool = m.pools[small ? 1 : 0];
  int id = m.FindFree(pool, size, stream);
  if (id == Impl::kNone) id = m.NewSegmentBlock(small, size, stream, events_, reserved_);
  if (m.ShouldSplit(m.blocks[id], size)) {
    // The request takes the block's start; the rest stays free (alloc_found_block).
    Impl::Block head = m.blocks[id];
    head.size = size;
    head.next = id;
    int h = m.NewBlock(head);
    Impl::Block& rest = m.blocks[id];
    if (rest.prev != Impl::kNone) m.blocks[rest.prev].next = h;
    rest.prev = h;
    rest.address += size;
    rest.size -= size;
    pool.free.insert(id);
    id = h;
  }
  m.blocks[id].allocated = true;
  ++m.malloc_count;
  allocated_ += m.blocks[id].size;
  peak_allocated_ = std::max(peak_allocated_, allocated_);
  peak_reserved_ = std::max(peak_reserved_, reserved_);
  samples_.push_back({allocated_, reserved_});
  return id;
}

void CachingAllocatorModel::Free(Handle h) {
  Impl& m = *impl_;
  if (h < 0 || h >= static_cast<Handle>(m.blocks.size()) || !m.blocks[h].live ||
      !m.blocks[h].allocated) {
    throw MemplanError("caching allocator model: Free of a block that is not allocated");
  }
  m.blocks[h].allocated = false;
  allocated_ -= m.blocks[h].size;
  // free_block: merge with free neighbours, back into the pool.
  m.Merge(h, m.blocks[h].prev);
  m.Merge(h, m.blocks[h].next);
  m.PoolOf(m.blocks[h]).free.insert(h);
  samples_.push_back({allocated_, reserved_});
}

int64_t CachingAllocatorModel::address(Handle h) const { return impl_->blocks.at(h).address; }
int64_t CachingAllocatorModel::block_bytes(Handle h) const { return impl_->blocks.at(h).size; }

void CachingAllocatorModel::AddSegment(int64_t address, int stream, bool small_pool,
                                       const std::vector<InitialBlock>& blocks) {
  Impl& m = *impl_;
  Impl::Pool& pool = m.pools[small_pool ? 1 : 0];
  int segment = Impl::kNone;
  if (m.options.config.expandable_segments) {
    Impl::Expandable es;
    es.base = address;
    es.page = small_pool ? kSmallBuffer : kLargeBuffer;
    m.expandable.push_back(es);
    segment = static_cast<int>(m.expandable.size()) - 1;
  }
  int prev = Impl::kNone;
  int64_t at = address;
  auto append = [&](const Impl::Block& proto) {
    int id = m.NewBlock(proto);
    m.blocks[id].prev = prev;
    if (prev != Impl::kNone) m.blocks[prev].next = id;
    prev = id;
    return id;
  };
  for (const InitialBlock& ib : blocks) {
    if (ib.bytes <= 0) throw MemplanError("caching allocator model: empty initial block");
    Impl::Block b;
    b.address = at;
    b.size = ib.bytes;
    b.stream = stream;
    b.small = small_pool;
    b.allocated = ib.allocated;
    b.segment = segment;
    int id = append(b);
    if (ib.allocated) {
      allocated_ += ib.bytes;
    } else {
      pool.free.insert(id);
    }
    reserved_ += ib.bytes;
    at += ib.bytes;
  }
  if (segment != Impl::kNone) {
    Impl::Block tail;
    tail.address = at;
    tail.size = m.ExpandableSize(m.expandable[segment].page) - (at - address);
    tail.stream = stream;
    tail.small = small_pool;
    tail.mapped = false;
    tail.segment = segment;
    pool.unmapped.insert(append(tail));
  }
  peak_allocated_ = std::max(peak_allocated_, allocated_);
  peak_reserved_ = std::max(peak_reserved_, reserved_);
}

ReservedTimeline SimulateReserved(const Schedule& s, const CachingAllocatorConfig& config) {
  constexpr CachingAllocatorModel::Handle kHostHandle = INT32_MAX;
  ReservedTimeline t;
  CachingAllocatorModel model(config);
  std::vector<CachingAllocatorModel::Handle> handle(s.buffers.size(), -1);
  auto check = [&](BufferId b, size_t step) {
    if (b < 0 || b >= static_cast<BufferId>(s.buffers.size())) {
      throw MemplanError("schedule step " + std::to_string(step) + " names buffer " +
                         std::to_string(b) + " that does not exist");
    }
  };
  for (size_t i = 0; i < s.steps.size(); ++i) {
    const Step& step = s.steps[i];
    for (BufferId b : step.allocs) {
      check(b, i);
      if (handle[b] >= 0) {
        throw MemplanError("schedule step " + std::to_string(i) + " allocates buffer '" +
                           s.buffers[b].name + "' that is already alive");
      }
      if (s.buffers[b].bytes < 0) {
        throw MemplanError("schedule buffer '" + s.buffers[b].name + "' has a negative size");
      }
      if (s.buffers[b].host) {  // pinned host memory (offload): not the device allocator's
        handle[b] = kHostHandle;
        continue;
      }
      // A 0-byte buffer counts as one 512 B block, as AccountedBytes has it.
      handle[b] = model.Malloc(std::max<int64_t>(s.buffers[b].bytes, 1));
    }
    t.allocated_during.push_back(model.allocated_bytes());
    t.reserved_during.push_back(model.reserved_bytes());
    if (model.reserved_bytes() > t.reserved_peak_bytes) {
      t.reserved_peak_bytes = model.reserved_bytes();
      t.reserved_peak_step = static_cast<int32_t>(i);
    }
    for (BufferId b : step.frees) {
      check(b, i);
      if (handle[b] < 0) {
        throw MemplanError("schedule step " + std::to_string(i) + " frees buffer '" +
                           s.buffers[b].name + "' that is not alive");
      }
      if (handle[b] != kHostHandle) model.Free(handle[b]);
      handle[b] = -1;
    }
    t.allocated_after.push_back(model.allocated_bytes());
    t.reserved_after.push_back(model.reserved_bytes());
  }
  t.allocated_peak_bytes = model.peak_allocated_bytes();
  t.segment_events = model.events();
  return t;
}

}  // namespace memplan
