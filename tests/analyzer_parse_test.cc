// The strict number parsers every front end uses, and the one atomic file writer.
#include <dirent.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <climits>
#include <csignal>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>

#include "memplan/parse.h"
#include "memplan/training_graph.h"

namespace memplan {
namespace {

// The parser's error message, or "parsed" when it succeeds.
template <typename F>
std::string ErrorOf(F f) {
  try {
    f();
  } catch (const MemplanError& e) {
    return e.what();
  }
  return "parsed";
}

bool Contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

TEST(ParseInteger, AcceptsAWholeNumberInRange) {
  EXPECT_EQ(ParseInteger("--threads", "16", 1, 1024), 16);
}

TEST(ParseInteger, RejectsValuesOutsideTheRange) {
  for (const char* text : {"-1", "0", "100000", "2147483648"}) {
    EXPECT_TRUE(Contains(ErrorOf([&] { ParseInteger("--threads", text, 1, 1024); }),
                         std::string("--threads '") + text +
                             "' is out of range: give a whole number from 1 to 1024"))
        << text;
  }
}

TEST(ParseInteger, RejectsTextThatIsNotAWholeNumber) {
  for (const char* text : {"", "1.5", "12abc", " 3", "+3", "-", "0x10"}) {
    EXPECT_TRUE(Contains(ErrorOf([&] { ParseInteger("--batch", text, 1, INT64_MAX); }),
                         "--batch expects a whole number"))
        << text;
  }
}

TEST(ParseInteger, RejectsNumbersBeyondInt64) {
  EXPECT_TRUE(
      Contains(ErrorOf([] { ParseInteger("--batch", "9223372036854775808", 1, INT64_MAX); }),
               "out of range"));
}

TEST(ParseReal, AcceptsDecimalAndExponentForms) {
  EXPECT_EQ(ParseReal("--lr", "0.5", 0, 10), 0.5);
  EXPECT_EQ(ParseReal("--lr", "1e-3", 0, 10), 1e-3);
}

TEST(ParseReal, RejectsInfNanAndMalformedNumbers) {
  for (const char* text : {"inf", "nan", "..5", "1.2.3", "1e", "", "0x1p3"}) {
    EXPECT_TRUE(Contains(ErrorOf([&] { ParseReal("--time-limit", text, 0.001, 604800); }),
                         "--time-limit expects a number"))
        << text;
  }
}

TEST(ParseReal, RejectsValuesOutsideTheRange) {
  EXPECT_TRUE(
      Contains(ErrorOf([] { ParseReal("--lr", "1e308", 0, 10); }), "--lr '1e308' is out of range"));
  EXPECT_TRUE(
      Contains(ErrorOf([] { ParseReal("--lr", "1e400", 0, 10); }), "--lr '1e400' is out of range"));
}

TEST(ParseBytes, ReadsUnits) {
  EXPECT_EQ(ParseBytes("512"), 512);
  EXPECT_EQ(ParseBytes("1.5KiB"), 1536);
  EXPECT_EQ(ParseBytes("300 MB"), 300000000);
}

TEST(ParseBytes, RejectsMalformedNumbers) {
  for (const char* text : {"..5", "1.2.3MiB", ".", "MiB", "-5MiB"}) {
    EXPECT_TRUE(Contains(ErrorOf([&] { ParseBytes(text); }), "cannot read size")) << text;
  }
}

TEST(ParseBytes, RejectsSizesOf8EiBAndMore) {
  EXPECT_TRUE(Contains(ErrorOf([] { ParseBytes(std::string(400, '9')); }), "out of range"));
  EXPECT_TRUE(Contains(ErrorOf([] { ParseBytes("9000000TiB"); }), "out of range"));
}

TEST(ParseBudget, ReadsASizeOrAPercentage) {
  EXPECT_EQ(ParseBudget("--budget", "2KiB").bytes, 2048);
  Budget half = ParseBudget("--budget", "50%");
  EXPECT_EQ(half.percent, 50);
  EXPECT_EQ(half.Resolve(/*baseline_bytes=*/1000), 500);
}

TEST(ParseBudget, RejectsPercentagesOutsideZeroToAThousand) {
  for (const char* text : {"1e30%", "1e308%", "1001%", "0%", "-5%"}) {
    EXPECT_TRUE(Contains(ErrorOf([&] { ParseBudget("--budget", text); }), "is out of range"))
        << text;
  }
  for (const char* text : {"inf%", "nan%", "%", "..5%"}) {
    EXPECT_TRUE(
        Contains(ErrorOf([&] { ParseBudget("--budget", text); }), "--budget expects a size"))
        << text;
  }
}

TEST(ParseBudget, ReadsSizesInEveryUnit) {
  EXPECT_EQ(ParseBudget("--budget", "512B").bytes, 512);
  EXPECT_EQ(ParseBudget("--budget", "8GiB").bytes, int64_t{8} << 30);
  EXPECT_EQ(ParseBudget("--budget", "1.5MiB").bytes, 1572864);  // 1.5 x 1048576
  EXPECT_EQ(ParseBudget("--budget", "300 MB").bytes, 300000000);
  EXPECT_EQ(ParseBudget("--budget", "8GiB").percent, 0);
}

// "--budget 50" is a forgotten %, not 50 bytes: refused with both spellings suggested.
TEST(ParseBudget, ABareNumberIsRefusedWithTheUnitsToChooseFrom) {
  for (const char* text : {"50", "0.5", "1e9"}) {
    const std::string m = ErrorOf([&] { ParseBudget("--budget", text); });
    EXPECT_TRUE(Contains(m, "has no unit")) << m;
    EXPECT_TRUE(Contains(m, std::string(text) + "%")) << m;
    EXPECT_TRUE(Contains(m, std::string(text) + "MiB")) << m;
  }
}

TEST(ParseBudget, PercentagesResolveAgainstTheBaseline) {
  Budget sixty = ParseBudget("--budget", "60%");
  EXPECT_EQ(sixty.bytes, 0);
  EXPECT_EQ(sixty.Resolve(/*baseline_bytes=*/1001), 600);  // 600.6 rounds down
  EXPECT_EQ(ParseBudget("--budget", "12.5%").Resolve(1000), 125);
  EXPECT_EQ(ParseBudget("--budget", "1000%").Resolve(1000), 10000);
  EXPECT_EQ(ParseBudget("--budget", "0.001%").Resolve(10), 1);     // never below one byte
  EXPECT_EQ(ParseBudget("--budget", "2KiB").Resolve(1000), 2048);  // a size ignores the baseline
}

TEST(ParseBudget, BadTextNamesTheOption) {
  for (const char* text : {"", "lots", "8XB", "-1GiB", "1.2.3MiB", "50 %", "%%", "50%%"}) {
    EXPECT_TRUE(Contains(ErrorOf([&] { ParseBudget("--budget", text); }), "--budget")) << text;
  }
}

TEST(ParseDimBinding, ReadsNameAndPositiveValue) {
  EXPECT_EQ(ParseDimBinding("--dim", "seq=128"), (std::pair<std::string, int64_t>{"seq", 128}));
  EXPECT_TRUE(Contains(ErrorOf([] { ParseDimBinding("--dim", "seq=0"); }),
                       "--dim seq '0' is out of range"));
  EXPECT_TRUE(
      Contains(ErrorOf([] { ParseDimBinding("--dim", "=4"); }), "--dim expects NAME=VALUE"));
}

TEST(PrintableText, EscapesControlBytesAndReplacesInvalidUtf8) {
  EXPECT_EQ(PrintableText(std::string("a\0b", 3)), "a\\x00b");
  EXPECT_EQ(PrintableText("caf\xc3\xa9"), "caf\xc3\xa9");
  EXPECT_EQ(PrintableText("x\xff\xc0y"), "x\xef\xbf\xbd\xef\xbf\xbdy");
}

TEST(MemplanError, MessageKeepsEverythingAfterANul) {
  MemplanError e(std::string("node 'a\0b' fails", 16));
  EXPECT_STREQ(e.what(), "node 'a\\x00b' fails");
}

class AtomicWrite : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/memplan-write-XXXXXX";
    dir_ = ::mkdtemp(tmpl);
  }
  void TearDown() override { std::system(("rm -rf '" + dir_ + "'").c_str()); }
  std::string Read(const std::string& p) {
    std::ifstream in(p);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
  }
  // Entries in the folder, temporaries (which start with a dot) included.
  int Entries() {
    int n = 0;
    DIR* d = ::opendir(dir_.c_str());
    while (dirent* e = ::readdir(d))
      n += std::string(e->d_name) != "." && std::string(e->d_name) != "..";
    ::closedir(d);
    return n;
  }
  std::string dir_;
};

TEST_F(AtomicWrite, ReplacesTheFileAndLeavesNoTemporary) {
  std::ofstream(dir_ + "/out.json") << "old";
  WriteFileAtomically(dir_ + "/out.json", "new");
  EXPECT_EQ(Read(dir_ + "/out.json"), "new");
  EXPECT_EQ(Entries(), 1);
}

TEST_F(AtomicWrite, FollowsASymbolicLinkAndKeepsIt) {
  std::ofstream(dir_ + "/real.json") << "old";
  ASSERT_EQ(::symlink("real.json", (dir_ + "/link.json").c_str()), 0);
  WriteFileAtomically(dir_ + "/link.json", "new");
  struct stat st;
  ASSERT_EQ(::lstat((dir_ + "/link.json").c_str(), &st), 0);
  EXPECT_TRUE(S_ISLNK(st.st_mode));
  EXPECT_EQ(Read(dir_ + "/real.json"), "new");
  EXPECT_EQ(Entries(), 2);
}

TEST_F(AtomicWrite, FailureNamesThePathAndLeavesNothing) {
  std::string e = ErrorOf([&] { WriteFileAtomically(dir_ + "/missing/out.json", "x"); });
  EXPECT_TRUE(Contains(e, "cannot write '" + dir_ + "/missing/out.json'")) << e;
  EXPECT_EQ(Entries(), 0);
}

TEST_F(AtomicWrite, ADirectoryIsNotReplaced) {
  ::mkdir((dir_ + "/d").c_str(), 0755);
  std::string e = ErrorOf([&] { WriteFileAtomically(dir_ + "/d", "x"); });
  EXPECT_TRUE(Contains(e, "it is a directory")) << e;
  EXPECT_EQ(Entries(), 1);
}

// A writer killed while the temporary exists (Ctrl-C, a batch scheduler's SIGTERM) leaves
// neither the temporary nor a partial file: the handler removes it and re-raises the signal.
TEST_F(AtomicWrite, ASignalWhileWritingRemovesTheTemporary) {
  const std::string out = dir_ + "/out.json";
  pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    // Large enough that the write is still going when the parent sees the temporary.
    WriteFileAtomically(out, std::string(size_t{768} << 20, 'x'));
    ::_exit(0);
  }
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (Entries() == 0 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
  ::kill(child, SIGTERM);
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFSIGNALED(status)) << "the writer finished before the signal: " << status;
  EXPECT_EQ(WTERMSIG(status), SIGTERM);
  EXPECT_EQ(Entries(), 0) << "a temporary or a partial out.json is left";
}

}  // namespace
}  // namespace memplan
