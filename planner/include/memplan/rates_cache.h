// The machine-rates cache: rates measured once per machine and device (MachineRates,
// planner.h), kept in one JSON file ("kind": "machine_rates", "format": kRatesCacheFormat,
// "rates": one entry per measurement key) so that later plans reuse them. The measurement
// itself needs LibTorch (the executor's MeasureMachineRates) and is passed in: the planner
// stays torch-free.
#pragma once

#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "memplan/planner.h"

namespace memplan {

// Format 2: the executor keeps freed host memory, and fresh memory is measured after that.
constexpr int kRatesCacheFormat = 2;

// The entry `key` of `cache`, when the cache is of the current format and the entry has every
// figure measured now (class and fresh-memory rates; an older entry is measured again).
// Throws MemplanError when the entry is malformed.
std::optional<MachineRates> RatesFromCache(const nlohmann::json& cache, const std::string& key);

// `cache` with `rates` as its entry `key`; a cache of another kind or format starts anew.
nlohmann::json CacheWithRates(nlohmann::json cache, const std::string& key,
                              const MachineRates& rates);

// The rates for `key`: from the cache file `path` when it has them, else `measure()`, written
// back into the file (its folder created). `path` empty: no cache. A damaged or unreadable
// cache is measured again and rewritten; a cache that cannot be written is said in `source`,
// which tells where the rates come from ("measured, cached in PATH", "measured now, cached in
// PATH", "measured now (not cached: WHY)").
MachineRates CachedMachineRates(const std::string& path, const std::string& key,
                                const std::function<MachineRates()>& measure, std::string* source);

}  // namespace memplan
