#include "memplan/analyzer.h"

#include <cctype>
#include <cmath>
#include <cstdio>

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

int64_t ParseBytes(const std::string& text) {
  size_t i = 0;
  while (i < text.size() && std::isspace(static_cast<unsigned char>(text[i]))) ++i;
  size_t start = i;
  while (i < text.size() && (std::isdigit(static_cast<unsigned char>(text[i])) || text[i] == '.')) ++i;
  std::string number = text.substr(start, i - start);
  while (i < text.size() && std::isspace(static_cast<unsigned char>(text[i]))) ++i;
  std::string unit = text.substr(i);
  if (number.empty() || number == ".") {
    throw MemplanError("cannot read size '" + text + "': use a number with B, KiB, MiB, GiB, KB, MB or GB");
  }
  double value = std::stod(number);
  double scale = 0;
  std::string u;
  for (char c : unit) u += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (u.empty() || u == "b") scale = 1;
  else if (u == "kib" || u == "k") scale = 1024.0;
  else if (u == "mib" || u == "m") scale = 1024.0 * 1024;
  else if (u == "gib" || u == "g") scale = 1024.0 * 1024 * 1024;
  else if (u == "tib" || u == "t") scale = 1024.0 * 1024 * 1024 * 1024;
  else if (u == "kb") scale = 1e3;
  else if (u == "mb") scale = 1e6;
  else if (u == "gb") scale = 1e9;
  else if (u == "tb") scale = 1e12;
  else {
    throw MemplanError("unknown size unit '" + unit + "' in '" + text +
                       "': use B, KiB, MiB, GiB, KB, MB or GB");
  }
  double bytes = value * scale;
  if (!(bytes >= 1) || bytes > 9.0e18) {
    throw MemplanError("size '" + text + "' is out of range: give a positive size below 8 EiB");
  }
  return static_cast<int64_t>(std::llround(bytes));
}

}  // namespace memplan
