#include "testing/cli_runner.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <sstream>

namespace memplan::testing {

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

bool FileExists(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0;
}

void CliTest::SetUp() {
  char tmpl[] = "/tmp/memplan-cli-XXXXXX";
  dir_ = ::mkdtemp(tmpl);
}

void CliTest::TearDown() { std::system(("rm -rf '" + dir_ + "'").c_str()); }

CliResult CliTest::Run(const std::string& args) {
  std::string out = dir_ + "/stdout", err = dir_ + "/stderr";
  int status =
      std::system((std::string(MEMPLAN_CLI) + " " + args + " > " + out + " 2> " + err).c_str());
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, ReadFile(out), ReadFile(err)};
}

void CliTest::ExpectUserError(const std::string& args, const std::string& expect) {
  std::string json = dir_ + "/out.json";
  CliResult r = Run(args + " --json " + json);
  EXPECT_EQ(r.code, 1) << r.err;
  EXPECT_NE(r.err.find(expect), std::string::npos) << "stderr: " << r.err;
  EXPECT_FALSE(FileExists(json));
}

LoopbackListener::LoopbackListener() {
  fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a = {};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (fd_ < 0 || ::bind(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 ||
      ::listen(fd_, 1) != 0)
    return;
  socklen_t len = sizeof a;
  if (::getsockname(fd_, reinterpret_cast<sockaddr*>(&a), &len) == 0) port_ = ntohs(a.sin_port);
}

LoopbackListener::~LoopbackListener() {
  if (fd_ >= 0) ::close(fd_);
}

}  // namespace memplan::testing
