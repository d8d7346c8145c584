#include "memplan/parse.h"

#include <fcntl.h>
#include <pthread.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <climits>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>

#include "memplan/device_name.h"
#include "memplan/training_graph.h"

namespace memplan {
namespace {

// Digits, at most one '.', at least one digit; an exponent when `exponent`.
bool IsDecimal(const std::string& s, bool sign, bool exponent) {
  size_t i = 0;
  if (sign && i < s.size() && s[i] == '-') ++i;
  size_t digits = 0, dots = 0;
  for (; i < s.size(); ++i) {
    if (std::isdigit(static_cast<unsigned char>(s[i])))
      ++digits;
    else if (s[i] == '.' && dots == 0)
      ++dots;
    else
      break;
  }
  if (digits == 0) return false;
  if (i < s.size() && exponent && (s[i] == 'e' || s[i] == 'E')) {
    ++i;
    if (i < s.size() && (s[i] == '+' || s[i] == '-')) ++i;
    size_t exp_digits = 0;
    for (; i < s.size() && std::isdigit(static_cast<unsigned char>(s[i])); ++i) ++exp_digits;
    if (exp_digits == 0) return false;
  }
  return i == s.size();
}

std::string Shown(const std::string& text) { return "'" + PrintableText(text) + "'"; }

std::string Number(double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%g", v);
  return buf;
}

}  // namespace

int64_t ParseInteger(const std::string& what, const std::string& text, int64_t min, int64_t max) {
  const std::string range =
      "a whole number from " + std::to_string(min) + " to " + std::to_string(max);
  bool digits_only = !text.empty();
  for (size_t i = 0; i < text.size(); ++i) {
    if (!(std::isdigit(static_cast<unsigned char>(text[i])) ||
          (i == 0 && text[i] == '-' && text.size() > 1))) {
      digits_only = false;
    }
  }
  if (!digits_only) throw MemplanError(what + " expects " + range + ", got " + Shown(text));
  errno = 0;
  char* end = nullptr;
  long long v = std::strtoll(text.c_str(), &end, 10);
  if (errno == ERANGE || v < min || v > max) {
    throw MemplanError(what + " " + Shown(text) + " is out of range: give " + range);
  }
  return v;
}

double ParseReal(const std::string& what, const std::string& text, double min, double max) {
  const std::string range = "a number from " + Number(min) + " to " + Number(max);
  if (!IsDecimal(text, /*sign=*/true, /*exponent=*/true)) {
    throw MemplanError(what + " expects " + range + ", got " + Shown(text));
  }
  errno = 0;
  double v = std::strtod(text.c_str(), nullptr);
  if (errno == ERANGE || !std::isfinite(v) || v < min || v > max) {
    throw MemplanError(what + " " + Shown(text) + " is out of range: give " + range);
  }
  return v;
}

int64_t ParseBytes(const std::string& text) {
  const std::string units = "B, KiB, MiB, GiB, TiB, KB, MB, GB or TB";
  size_t i = 0;
  while (i < text.size() && std::isspace(static_cast<unsigned char>(text[i]))) ++i;
  size_t start = i;
  while (i < text.size() && (std::isdigit(static_cast<unsigned char>(text[i])) || text[i] == '.'))
    ++i;
  std::string number = text.substr(start, i - start);
  while (i < text.size() && std::isspace(static_cast<unsigned char>(text[i]))) ++i;
  std::string unit = text.substr(i);
  if (!IsDecimal(number, /*sign=*/false, /*exponent=*/false)) {
    throw MemplanError("cannot read size " + Shown(text) + ": use a number with " + units);
  }
  double scale = 0;
  std::string u;
  for (char c : unit) u += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (u.empty() || u == "b")
    scale = 1;
  else if (u == "kib" || u == "k")
    scale = 1024.0;
  else if (u == "mib" || u == "m")
    scale = 1024.0 * 1024;
  else if (u == "gib" || u == "g")
    scale = 1024.0 * 1024 * 1024;
  else if (u == "tib" || u == "t")
    scale = 1024.0 * 1024 * 1024 * 1024;
  else if (u == "kb")
    scale = 1e3;
  else if (u == "mb")
    scale = 1e6;
  else if (u == "gb")
    scale = 1e9;
  else if (u == "tb")
    scale = 1e12;
  else
    throw MemplanError("unknown size unit '" + PrintableText(unit) + "' in " + Shown(text) +
                       ": use " + units);
  errno = 0;
  double bytes = std::strtod(number.c_str(), nullptr) * scale;
  if (errno == ERANGE || !(bytes >= 1) || bytes > 9.0e18) {
    throw MemplanError("size " + Shown(text) +
                       " is out of range: give a positive size below 8 EiB");
  }
  return static_cast<int64_t>(std::llround(bytes));
}

int64_t Budget::Resolve(int64_t baseline_bytes) const {
  if (percent <= 0) return bytes;
  double b = static_cast<double>(baseline_bytes) * percent / 100;
  if (!(b < 9.0e18))
    throw MemplanError("the budget of " + Number(percent) + "% of the baseline is out of range");
  return std::max<int64_t>(1, static_cast<int64_t>(b));
}

Budget ParseBudget(const std::string& what, const std::string& text) {
  Budget b;
  if (!text.empty() && text.back() == '%') {
    const std::string number = text.substr(0, text.size() - 1);
    const std::string range = "a percentage above 0% and at most " + Number(kMaxBudgetPercent) +
                              "% of the baseline peak, like 50%";
    if (!IsDecimal(number, /*sign=*/true, /*exponent=*/true)) {
      throw MemplanError(what + " expects a size (512MiB) or " + range + ", got " + Shown(text));
    }
    errno = 0;
    b.percent = std::strtod(number.c_str(), nullptr);
    if (errno == ERANGE || !std::isfinite(b.percent) || !(b.percent > 0) ||
        b.percent > kMaxBudgetPercent) {
      throw MemplanError(what + " " + Shown(text) + " is out of range: give " + range);
    }
    return b;
  }
  // A bare number is a forgotten % far more often than a budget of a few hundred bytes.
  if (IsDecimal(text, /*sign=*/true, /*exponent=*/true)) {
    throw MemplanError(what + " " + Shown(text) + " has no unit: write " + text +
                       "% for a percentage of the " + "baseline peak, or a size such as " + text +
                       "MiB, " + text + "GiB or " + text + "B");
  }
  try {
    b.bytes = ParseBytes(text);
  } catch (const MemplanError& e) {
    throw MemplanError(what + ": " + e.what());
  }
  return b;
}

int64_t JsonInt64(const nlohmann::json& value, const std::string& field) {
  if (!value.is_number()) throw MemplanError("field '" + field + "' is not a number");
  if (value.is_number_float()) {
    const double d = value.get<double>();
    if (!(d > -9.2e18 && d < 9.2e18)) throw MemplanError("field '" + field + "' is out of range");
    return static_cast<int64_t>(std::llround(d));
  }
  if (value.is_number_unsigned() && value.get<uint64_t>() > static_cast<uint64_t>(INT64_MAX)) {
    throw MemplanError("field '" + field + "' is out of range");
  }
  return value.get<int64_t>();
}

std::pair<std::string, int64_t> ParseDimBinding(const std::string& what, const std::string& text) {
  size_t eq = text.find('=');
  if (eq == std::string::npos || eq == 0) {
    throw MemplanError(what + " expects NAME=VALUE, got " + Shown(text));
  }
  return {text.substr(0, eq), ParseInteger(what + " " + PrintableText(text.substr(0, eq)),
                                           text.substr(eq + 1), 1, INT64_MAX)};
}

// ---- the atomic writer ----

namespace {

// The temporary being written, for the signal handler (async-signal-safe: a fixed buffer).
char g_pending[PATH_MAX + 1];
volatile sig_atomic_t g_has_pending = 0;
std::mutex g_write_mutex;

extern "C" void RemovePendingAndReraise(int sig) {
  if (g_has_pending) ::unlink(g_pending);
  std::signal(sig, SIG_DFL);
  std::raise(sig);
}

void InstallSignalCleanup() {
  static bool installed = false;
  if (installed) return;
  installed = true;
  for (int sig : {SIGINT, SIGTERM, SIGHUP}) {
    struct sigaction old {};
    if (::sigaction(sig, nullptr, &old) != 0 || old.sa_handler != SIG_DFL)
      continue;  // someone else's
    struct sigaction sa {};
    sa.sa_handler = RemovePendingAndReraise;
    sigemptyset(&sa.sa_mask);
    ::sigaction(sig, &sa, nullptr);
  }
}

// Follows symbolic links from `path` to the file they finally name (which may not exist yet).
std::filesystem::path FinalTarget(const std::string& path) {
  namespace fs = std::filesystem;
  fs::path p = path;
  for (int hops = 0; hops < 40; ++hops) {
    std::error_code ec;
    if (!fs::is_symlink(fs::symlink_status(p, ec))) return p;
    fs::path target = fs::read_symlink(p, ec);
    if (ec) return p;
    p = target.is_absolute() ? target : p.parent_path() / target;
  }
  throw MemplanError("cannot write '" + PrintableText(path) +
                     "': too many levels of symbolic links");
}

class PendingFile {
 public:
  explicit PendingFile(const std::string& tmp) {
    std::snprintf(g_pending, sizeof g_pending, "%s", tmp.c_str());
    g_has_pending = 1;
  }
  ~PendingFile() {
    if (g_has_pending) ::unlink(g_pending);
    g_has_pending = 0;
  }
  void Committed() { g_has_pending = 0; }
};

}  // namespace

void WriteFileAtomically(const std::string& path, const std::string& contents) {
  const std::string shown = PrintableText(path);
  auto fail = [&](int err) {
    throw MemplanError("cannot write '" + shown + "': " + std::strerror(err));
  };
  if (path.empty()) throw MemplanError("cannot write a file with an empty name");
  std::lock_guard<std::mutex> lock(g_write_mutex);
  InstallSignalCleanup();
  const std::filesystem::path target = FinalTarget(path);
  struct stat st {};
  if (::stat(target.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) {
    throw MemplanError("cannot write '" + shown + "': it is a directory");
  }
  std::string dir = target.parent_path().string();
  if (dir.empty()) dir = ".";
  std::string tmp = dir + "/." + target.filename().string() + ".tmp.XXXXXX";
  if (tmp.size() > PATH_MAX) fail(ENAMETOOLONG);
  std::vector<char> name(tmp.begin(), tmp.end());
  name.push_back('\0');
  // Block the cleanup signals while the name is registered, so that none lands in between.
  sigset_t block, old;
  sigemptyset(&block);
  sigaddset(&block, SIGINT);
  sigaddset(&block, SIGTERM);
  sigaddset(&block, SIGHUP);
  ::pthread_sigmask(SIG_BLOCK, &block, &old);
  int fd = ::mkstemp(name.data());
  int err = errno;
  std::optional<PendingFile> pending;
  if (fd >= 0) pending.emplace(name.data());
  ::pthread_sigmask(SIG_SETMASK, &old, nullptr);
  if (fd < 0) fail(err);
  // As a newly created file would be: the existing file's mode, or 0666 less the umask.
  mode_t mode;
  if (::stat(target.c_str(), &st) == 0) {
    mode = st.st_mode & 07777;
  } else {
    mode_t mask = ::umask(0);
    ::umask(mask);
    mode = 0666 & ~mask;
  }
  ::fchmod(fd, mode);
  const char* p = contents.data();
  size_t left = contents.size();
  while (left > 0) {
    ssize_t n = ::write(fd, p, left);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      err = n < 0 ? errno : EIO;
      ::close(fd);
      fail(err);
    }
    p += n;
    left -= static_cast<size_t>(n);
  }
  if (::close(fd) != 0) fail(errno);
  if (std::rename(name.data(), target.c_str()) != 0) fail(errno);
  pending->Committed();
}

std::string PrintableText(const std::string& text) {
  std::string out;
  out.reserve(text.size());
  const auto* s = reinterpret_cast<const unsigned char*>(text.data());
  const size_t n = text.size();
  for (size_t i = 0; i < n;) {
    unsigned char c = s[i];
    if (c < 0x80) {
      if ((c < 0x20 && c != '\n' && c != '\t') || c == 0x7f) {
        char buf[8];
        std::snprintf(buf, sizeof buf, "\\x%02x", c);
        out += buf;
      } else {
        out += static_cast<char>(c);
      }
      ++i;
      continue;
    }
    // A well-formed UTF-8 sequence (no overlongs, no surrogates, at most U+10FFFF).
    size_t len = 0;
    unsigned char lo = 0x80, hi = 0xbf;
    if (c >= 0xc2 && c <= 0xdf)
      len = 2;
    else if (c >= 0xe0 && c <= 0xef) {
      len = 3;
      if (c == 0xe0) lo = 0xa0;
      if (c == 0xed) hi = 0x9f;
    } else if (c >= 0xf0 && c <= 0xf4) {
      len = 4;
      if (c == 0xf0) lo = 0x90;
      if (c == 0xf4) hi = 0x8f;
    }
    bool ok = len > 0 && i + len <= n && s[i + 1] >= lo && s[i + 1] <= hi;
    for (size_t k = 2; ok && k < len; ++k) ok = s[i + k] >= 0x80 && s[i + k] <= 0xbf;
    if (ok) {
      out.append(text, i, len);
      i += len;
    } else {
      out += "\xef\xbf\xbd";  // U+FFFD
      ++i;
    }
  }
  return out;
}

DeviceName ParseDeviceName(const std::string& text) {
  if (text == "cpu") return {};
  if (text == "cuda") return {/*cuda=*/true, /*index=*/-1};
  const bool digits =
      text.size() > 5 && text.rfind("cuda:", 0) == 0 &&
      std::all_of(text.begin() + 5, text.end(), [](char c) { return c >= '0' && c <= '9'; });
  if (digits) {
    try {
      return {/*cuda=*/true,
              static_cast<int>(ParseInteger("--device", text.substr(5), 0, INT_MAX))};
    } catch (const MemplanError&) {
      // a device index beyond int: the message below
    }
  }
  throw MemplanError("--device must be cpu, cuda or cuda:K (got '" + PrintableText(text) + "')");
}

}  // namespace memplan
