#include "cli_util.h"

#include <algorithm>
#include <cstdint>

#include "memplan/parse.h"

namespace memplan::cli {

std::string Args::get(const std::string& f, const std::string& fallback) const {
  auto it = flags.find(f);
  return it == flags.end() || it->second.empty() ? fallback : it->second.back();
}

int64_t Args::get_int(const std::string& f, int64_t fallback, int64_t min, int64_t max) const {
  return has(f) ? ParseInteger("--" + f, get(f), min, max) : fallback;
}

double Args::get_real(const std::string& f, double fallback, double min, double max) const {
  return has(f) ? ParseReal("--" + f, get(f), min, max) : fallback;
}

int64_t Args::get_bytes(const std::string& f, int64_t fallback) const {
  if (!has(f)) return fallback;
  try {
    return ParseBytes(get(f));
  } catch (const MemplanError& e) {
    throw MemplanError("--" + f + ": " + e.what());
  }
}

Args ParseArgs(int argc, char** argv, int first, const std::vector<std::string>& value_flags,
               const std::vector<std::string>& boolean_flags) {
  Args a;
  for (int i = first; i < argc; ++i) {
    std::string s = argv[i];
    if (s.rfind("--", 0) != 0 || s == "--") {
      a.positional.push_back(s);
      continue;
    }
    std::string name = s.substr(2), value;
    bool inline_value = false;
    if (size_t eq = name.find('='); eq != std::string::npos) {
      value = name.substr(eq + 1);
      name = name.substr(0, eq);
      inline_value = true;
    }
    bool is_bool = std::find(boolean_flags.begin(), boolean_flags.end(), name) != boolean_flags.end();
    bool is_value = std::find(value_flags.begin(), value_flags.end(), name) != value_flags.end();
    if (!is_bool && !is_value) throw MemplanError("unknown option --" + name + " (see memplan --help)");
    if (is_value && !inline_value) {
      if (i + 1 >= argc) throw MemplanError("option --" + name + " needs a value");
      value = argv[++i];
    }
    a.flags[name].push_back(value);
  }
  return a;
}

LoadOptions LoadOptionsFromArgs(const Args& a) {
  LoadOptions o;
  o.batch = a.get_int("batch", 1, 1, INT64_MAX);
  if (a.has("dim")) {
    for (const std::string& kv : a.flags.at("dim")) {
      auto [name, value] = ParseDimBinding("--dim", kv);
      o.dims[name] = value;
    }
  }
  o.allow_external_data_outside_model_dir = a.has(kAllowOutsideFlag);
  if (a.has("loss")) o.loss = ParseLossKind(a.get("loss"));
  if (a.has("optimizer")) o.optimizer = ParseOptimizer(a.get("optimizer"));
  return o;
}

}  // namespace memplan::cli
