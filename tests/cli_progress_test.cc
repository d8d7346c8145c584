// ProgressTicker (cli/cli_util.h): a long solve prints a line every period on a terminal, and
// nothing when stderr is a pipe or a file (logs, tests, scripts).
#include <fcntl.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <string>
#include <thread>

#include "cli_util.h"

namespace memplan::cli {
namespace {

// Puts `fd` in place of stderr while it lives.
class StderrTo {
 public:
  explicit StderrTo(int fd) : saved_(::dup(STDERR_FILENO)) { ::dup2(fd, STDERR_FILENO); }
  ~StderrTo() {
    std::fflush(stderr);
    ::dup2(saved_, STDERR_FILENO);
    ::close(saved_);
  }

 private:
  int saved_;
};

// What is readable on `fd` within `wait_ms` (stops at the first line).
std::string ReadLine(int fd, int wait_ms) {
  std::string out;
  pollfd p{fd, POLLIN, 0};
  while (out.find('\n') == std::string::npos && ::poll(&p, 1, wait_ms) > 0) {
    char buf[256];
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n <= 0) break;
    out.append(buf, static_cast<size_t>(n));
  }
  return out;
}

TEST(ProgressTicker, OnATerminalItPrintsALinePerPeriod) {
  const int master = ::posix_openpt(O_RDWR | O_NOCTTY);
  ASSERT_GE(master, 0);
  ASSERT_EQ(::grantpt(master), 0);
  ASSERT_EQ(::unlockpt(master), 0);
  const int terminal = ::open(::ptsname(master), O_RDWR | O_NOCTTY);
  ASSERT_GE(terminal, 0);
  std::string line;
  {
    StderrTo redirect(terminal);
    ProgressTicker ticker("memplan plan: still planning", /*period_seconds=*/0.01);
    // No time is asserted: the first line is awaited (up to 10 s on a loaded machine).
    line = ReadLine(master, /*wait_ms=*/10000);
  }
  EXPECT_EQ(line.rfind("memplan plan: still planning, ", 0), 0u) << line;
  EXPECT_NE(line.find(" s"), std::string::npos) << line;
  ::close(terminal);
  ::close(master);
}

TEST(ProgressTicker, IntoAPipeItPrintsNothing) {
  int fds[2];
  ASSERT_EQ(::pipe(fds), 0);
  {
    StderrTo redirect(fds[1]);
    ProgressTicker ticker("memplan plan: still planning", /*period_seconds=*/0.01);
    std::this_thread::sleep_for(std::chrono::milliseconds(100));  // ten periods
  }
  ::close(fds[1]);
  EXPECT_EQ(ReadLine(fds[0], /*wait_ms=*/0), "");
  ::close(fds[0]);
}

}  // namespace
}  // namespace memplan::cli
