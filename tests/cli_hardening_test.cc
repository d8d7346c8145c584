// The memplan program on hostile input: malformed numbers, names that are not UTF-8, and
// output paths that are links. Exit 1 with a message naming what is wrong, or exit 0 with a
// valid file; never a crash, an internal error or a stray temporary.
#include <dirent.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <nlohmann/json.hpp>
#include <string>

#include "testing/cli_runner.h"
#include "testing/graph_builder.h"

namespace memplan {
namespace {

using testing::CliResult;
using testing::FileExists;
using testing::ReadFile;

class Hardening : public testing::CliTest {
 protected:
  void SetUp() override {
    CliTest::SetUp();
    model_ = dir_ + "/tiny.onnx";
    Tiny().Save(model_);
  }
  static testing::GraphBuilder Tiny() {
    testing::GraphBuilder b;
    b.Input("x", {-1, 8}).Param("w", {8, 4});
    b.Node("MatMul", {"x", "w"}, {"y"}).Output("y");
    return b;
  }
  // Names in dir_ (temporaries start with a dot).
  std::vector<std::string> Entries() {
    std::vector<std::string> out;
    DIR* d = ::opendir(dir_.c_str());
    while (dirent* e = ::readdir(d)) {
      std::string n = e->d_name;
      if (n != "." && n != ".." && n != "stdout" && n != "stderr") out.push_back(n);
    }
    ::closedir(d);
    std::sort(out.begin(), out.end());
    return out;
  }
  std::string model_;
};

// ---- numeric options ----

TEST_F(Hardening, BudgetWithTwoLeadingDotsIsRejected) {
  ExpectUserError("plan " + model_ + " --budget ..5", "--budget: cannot read size '..5'");
}

TEST_F(Hardening, BudgetOf400DigitsIsOutOfRange) {
  ExpectUserError("plan " + model_ + " --budget " + std::string(400, '9') + "B", "is out of range");
  // Without a unit it is refused before its size is read.
  ExpectUserError("plan " + model_ + " --budget " + std::string(400, '9'), "has no unit");
}

TEST_F(Hardening, BudgetWithTwoDecimalPointsIsRejected) {
  ExpectUserError("plan " + model_ + " --budget 1.2.3MiB", "cannot read size '1.2.3MiB'");
}

TEST_F(Hardening, BudgetPercentBeyondAThousandIsOutOfRange) {
  ExpectUserError("plan " + model_ + " --budget 1e30%", "--budget '1e30%' is out of range");
}

TEST_F(Hardening, BudgetPercentOfInfinityIsRejected) {
  ExpectUserError("plan " + model_ + " --budget inf%",
                  "--budget expects a size (512MiB) or a percentage");
}

TEST_F(Hardening, TimeLimitOfInfinityIsRejected) {
  ExpectUserError("plan " + model_ + " --budget 50% --time-limit inf",
                  "--time-limit expects a number");
}

TEST_F(Hardening, FractionalBatchIsRejected) {
  ExpectUserError("analyze " + model_ + " --batch 1.5", "--batch expects a whole number");
}

TEST_F(Hardening, MicroBatchCountOutOfRangeIsRejected) {
  ExpectUserError("plan " + model_ + " --budget 50% --micro-batches 0",
                  "--micro-batches '0' is out of range");
}

TEST_F(Hardening, UnknownDimNameNamesTheModelsDims) {
  ExpectUserError(
      "analyze " + model_ + " --dim nosuch=4",
      "has no symbolic dimension named 'nosuch'; its inputs' symbolic dimensions are: N");
}

// ---- byte arithmetic ----

TEST_F(Hardening, BatchOf2To40IsAnErrorNamingTheTensor) {
  testing::GraphBuilder b;
  b.Input("x", {-1, 1024, 1024}).Param("w", {1024, 4});
  b.Node("MatMul", {"x", "w"}, {"y"}).Output("y");
  b.Save(dir_ + "/big.onnx");
  ExpectUserError("analyze " + dir_ + "/big.onnx --batch 1099511627776",
                  "'x' of shape [1099511627776, 1024, 1024]");
}

TEST_F(Hardening, LargestBatchIsNotANegativeReshape) {
  CliResult r = Run("analyze " + model_ + " --batch 9223372036854775807");
  EXPECT_EQ(r.code, 1) << r.err;
  EXPECT_NE(r.err.find("more than 2^63"), std::string::npos) << r.err;
  EXPECT_EQ(r.err.find("negative"), std::string::npos) << r.err;
}

TEST_F(Hardening, PrimeBatchPlanSearchEndsWithTheSmallestPeak) {
  // No budget this small fits; the search over the divisors of a prime batch is two plans.
  CliResult r = Run("plan " + model_ + " --batch 1000000007 --budget 1KiB");
  EXPECT_EQ(r.code, 2) << r.err;
  EXPECT_NE(r.err.find("1000000007 micro-batches"), std::string::npos) << r.err;
}

// ---- names and outputs ----

TEST_F(Hardening, InvalidUtf8NamesAreReplacedInTheJson) {
  testing::GraphBuilder b;
  b.Input("x\xff", {-1, 8}).Param("w", {8, 4});
  b.Node("MatMul", {"x\xff", "w"}, {std::string("y\0z", 3)}).Output(std::string("y\0z", 3));
  b.Save(dir_ + "/bad.onnx");
  CliResult r = Run("analyze " + dir_ + "/bad.onnx --json " + dir_ + "/out.json");
  ASSERT_EQ(r.code, 0) << r.err;
  std::string text = ReadFile(dir_ + "/out.json");
  nlohmann::json j = nlohmann::json::parse(text);  // valid UTF-8 JSON
  EXPECT_NE(text.find("x\xef\xbf\xbd"), std::string::npos);
  EXPECT_EQ(Entries(), (std::vector<std::string>{"bad.onnx", "out.json", "tiny.onnx"}));
}

TEST_F(Hardening, InvalidUtf8FileNameIsReplacedInTheJson) {
  std::string odd = dir_ + "/m\xfe.onnx";
  Tiny().Save(odd);
  CliResult r = Run("analyze '" + odd + "' --json " + dir_ + "/out.json");
  ASSERT_EQ(r.code, 0) << r.err;
  nlohmann::json j = nlohmann::json::parse(ReadFile(dir_ + "/out.json"));
  EXPECT_EQ(j["model"], dir_ + "/m\xef\xbf\xbd.onnx");
}

TEST_F(Hardening, SymlinkJsonTargetIsFollowed) {
  ASSERT_EQ(::mkdir((dir_ + "/results").c_str(), 0755), 0);
  ASSERT_EQ(::symlink("results/real.json", (dir_ + "/link.json").c_str()), 0);
  CliResult r = Run("analyze " + model_ + " --json " + dir_ + "/link.json");
  ASSERT_EQ(r.code, 0) << r.err;
  struct stat st;
  ASSERT_EQ(::lstat((dir_ + "/link.json").c_str(), &st), 0);
  EXPECT_TRUE(S_ISLNK(st.st_mode));
  EXPECT_EQ(nlohmann::json::parse(ReadFile(dir_ + "/results/real.json"))["kind"], "analysis");
}

TEST_F(Hardening, UnwritableJsonTargetLeavesNoTemporary) {
  CliResult r = Run("analyze " + model_ + " --json " + dir_ + "/missing/out.json");
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.err.find("cannot write '" + dir_ + "/missing/out.json'"), std::string::npos) << r.err;
  EXPECT_EQ(Entries(), (std::vector<std::string>{"tiny.onnx"}));
}

TEST_F(Hardening, JsonTargetThatIsADirectoryIsRefused) {
  ASSERT_EQ(::mkdir((dir_ + "/out.json").c_str(), 0755), 0);
  CliResult r = Run("analyze " + model_ + " --json " + dir_ + "/out.json");
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.err.find("it is a directory"), std::string::npos) << r.err;
  EXPECT_EQ(Entries(), (std::vector<std::string>{"out.json", "tiny.onnx"}));
}

}  // namespace
}  // namespace memplan
