#include "cli_util.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>

namespace memplan::cli {

std::string Args::get(const std::string& f, const std::string& fallback) const {
  auto it = flags.find(f);
  return it == flags.end() || it->second.empty() ? fallback : it->second.back();
}

int64_t Args::get_int(const std::string& f, int64_t fallback) const {
  if (!has(f)) return fallback;
  std::string v = get(f);
  char* end = nullptr;
  errno = 0;
  long long x = std::strtoll(v.c_str(), &end, 10);
  if (v.empty() || *end != '\0' || errno == ERANGE) {
    throw MemplanError("--" + f + " expects an integer, got '" + v + "'");
  }
  return x;
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
  o.batch = a.get_int("batch", 1);
  if (o.batch <= 0) throw MemplanError("--batch must be a positive integer (got " + a.get("batch") + ")");
  if (a.has("dim")) {
    for (const std::string& kv : a.flags.at("dim")) {
      size_t eq = kv.find('=');
      if (eq == std::string::npos || eq == 0) throw MemplanError("--dim expects NAME=VALUE, got '" + kv + "'");
      char* end = nullptr;
      errno = 0;
      long long v = std::strtoll(kv.c_str() + eq + 1, &end, 10);
      if (*end != '\0' || errno == ERANGE || v <= 0) {
        throw MemplanError("--dim " + kv + ": the value must be a positive integer");
      }
      o.dims[kv.substr(0, eq)] = v;
    }
  }
  if (a.has("loss")) o.loss = ParseLossKind(a.get("loss"));
  if (a.has("optimizer")) o.optimizer = ParseOptimizer(a.get("optimizer"));
  return o;
}

void WriteJsonAtomically(const nlohmann::json& j, const std::string& path) {
  std::string tmp = path + ".tmp." + std::to_string(::getpid());
  {
    std::ofstream out(tmp);
    if (!out) throw MemplanError("cannot write '" + path + "': " + std::strerror(errno));
    out << j.dump(1) << "\n";
    out.flush();
    if (!out) {
      std::remove(tmp.c_str());
      throw MemplanError("cannot write '" + path + "': " + std::strerror(errno));
    }
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    int err = errno;
    std::remove(tmp.c_str());
    throw MemplanError("cannot write '" + path + "': " + std::strerror(err));
  }
}

}  // namespace memplan::cli
