// FNV-1a, 64 bit: stable across runs and platforms (std::hash is not), for fingerprints of a
// model (plan JSON) and seeds derived from tensor names (random weights).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace memplan {

class Fnv1a {
 public:
  void Add(const void* data, size_t n) {
    const unsigned char* p = static_cast<const unsigned char*>(data);
    for (size_t i = 0; i < n; ++i) {
      h_ ^= p[i];
      h_ *= 1099511628211ull;
    }
  }
  // Strings end with a separator, so that ("ab", "c") != ("a", "bc").
  void Add(const std::string& s) {
    Add(s.data(), s.size());
    Add(int64_t{-7});
  }
  void Add(int64_t v) { Add(&v, sizeof v); }
  uint64_t value() const { return h_; }

 private:
  uint64_t h_ = 1469598103934665603ull;
};

// The hash of the bytes of `s` alone (no separator).
inline uint64_t Fnv1aOf(const std::string& s) {
  Fnv1a h;
  h.Add(s.data(), s.size());
  return h.value();
}

}  // namespace memplan
