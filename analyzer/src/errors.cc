#include <cctype>
#include <cmath>
#include <cstdio>

#include "memplan/analyzer.h"
#include "memplan/parse.h"

namespace memplan {

std::string FormatBytes(int64_t bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(bytes);
  int u = 0;
  while (std::fabs(v) >= 1024.0 && u < 4) {
    v /= 1024.0;
    ++u;
  }
  char buf[64];
  if (u == 0) {
    std::snprintf(buf, sizeof buf, "%lld B", static_cast<long long>(bytes));
  } else {
    std::snprintf(buf, sizeof buf, "%.2f %s", v, units[u]);
  }
  return buf;
}

MemplanError::MemplanError(const std::string& what) : std::runtime_error(PrintableText(what)) {}

}  // namespace memplan
