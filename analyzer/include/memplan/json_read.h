// Strict readers of JSON fields for the result files memplan reads back (run, profile): each
// names the field it rejects ("nodes[3].seconds is not a number"), so a hand-edited or
// truncated file gets a message instead of a JSON type_error. Header-only; no I/O.
#pragma once

#include <cmath>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "memplan/parse.h"
#include "memplan/training_graph.h"

namespace memplan::json_read {

using nlohmann::json;

[[noreturn]] inline void Bad(const std::string& field, const std::string& why) {
  throw MemplanError("field '" + field + "' " + why);
}

inline std::string Join(const std::string& prefix, const char* key) {
  return prefix.empty() ? key : prefix + "." + key;
}

inline const json& Required(const json& j, const std::string& prefix, const char* key) {
  auto it = j.find(key);
  if (it == j.end()) Bad(Join(prefix, key), "is missing");
  return *it;
}

inline std::string String(const json& v, const std::string& field) {
  if (!v.is_string()) Bad(field, "is not a string");
  return v.get<std::string>();
}

// Byte counts, step counts and batches.
inline int64_t Count(const json& v, const std::string& field) {
  const int64_t n = JsonInt64(v, field);
  if (n < 0) Bad(field, "is negative");
  return n;
}

// Signed integers (byte deltas, node ids where -1 means none).
inline int64_t Integer(const json& v, const std::string& field) { return JsonInt64(v, field); }

inline double Real(const json& v, const std::string& field) {
  if (!v.is_number()) Bad(field, "is not a number");
  return v.get<double>();
}

inline double Seconds(const json& v, const std::string& field) {
  const double s = Real(v, field);
  if (!(s >= 0) || !std::isfinite(s)) Bad(field, "is not a finite, non-negative number of seconds");
  return s;
}

inline bool Bool(const json& v, const std::string& field) {
  if (!v.is_boolean()) Bad(field, "is not true or false");
  return v.get<bool>();
}

inline const json& Object(const json& v, const std::string& field) {
  if (!v.is_object()) Bad(field, "is not an object");
  return v;
}

template <class Read>
auto Array(const json& v, const std::string& field, Read read) {
  if (!v.is_array()) Bad(field, "is not an array");
  std::vector<decltype(read(v, field))> out;
  out.reserve(v.size());
  for (size_t i = 0; i < v.size(); ++i)
    out.push_back(read(v[i], field + "[" + std::to_string(i) + "]"));
  return out;
}

// A reader of arrays whose elements `read` reads.
template <class Read>
auto ArrayOf(Read read) {
  return [read](const json& v, const std::string& field) { return Array(v, field, read); };
}

// The required field `key` of the object `j` (itself the field `prefix`), read by `read`.
template <class Read>
auto Get(const json& j, const std::string& prefix, const char* key, Read read) {
  return read(Required(j, prefix, key), Join(prefix, key));
}

template <class T, class Read>
void ReadOptional(const json& j, const char* key, std::optional<T>& out, Read read) {
  auto it = j.find(key);
  if (it != j.end()) out = read(*it, key);
}

}  // namespace memplan::json_read
