// Runs the memplan program as a user does, in a fresh temporary directory per test.
#pragma once

#include <gtest/gtest.h>

#include <string>

namespace memplan::testing {

struct CliResult {
  int code = -1;  // exit status; -1 if the program did not exit normally (a crash)
  std::string out, err;
};

std::string ReadFile(const std::string& path);
bool FileExists(const std::string& path);

class CliTest : public ::testing::Test {
 protected:
  void SetUp() override;
  void TearDown() override;
  // `memplan ARGS`, stdout and stderr captured.
  CliResult Run(const std::string& args);
  // A bad input: exit 1, stderr naming `expect`, and no JSON file (`--json` is appended).
  void ExpectUserError(const std::string& args, const std::string& expect);

  std::string dir_;
};

// A socket listening on 127.0.0.1 at a port the kernel picked (a port in use, for tests of
// rendezvous errors). Closes on destruction.
class LoopbackListener {
 public:
  LoopbackListener();
  ~LoopbackListener();
  LoopbackListener(const LoopbackListener&) = delete;
  LoopbackListener& operator=(const LoopbackListener&) = delete;
  int port() const { return port_; }

 private:
  int fd_ = -1;
  int port_ = 0;
};

}  // namespace memplan::testing
