// The executor's kernels against ONNX's backend test cases (Debian libonnx-testdata):
// every case whose op types the executor implements runs forward and is compared with the
// expected outputs. Counts and failures are printed; skipped cases are listed by reason.
#include <dirent.h>
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <algorithm>
#include <cstdio>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "memplan/executor.h"

namespace memplan {
namespace {

const char* kNodeDir = "/usr/share/libonnx-testdata/data/node";

std::vector<std::string> Cases() {
  std::vector<std::string> out;
  if (DIR* d = ::opendir(kNodeDir)) {
    while (dirent* e = ::readdir(d)) {
      std::string n = e->d_name;
      if (n.rfind("test_", 0) == 0) out.push_back(n);
    }
    ::closedir(d);
  }
  std::sort(out.begin(), out.end());
  return out;
}

TEST(ExecutorConformance, OnnxBackendNodeTests) {
  std::vector<std::string> cases = Cases();
  if (cases.empty()) GTEST_SKIP() << kNodeDir << " not found: install libonnx-testdata";
  std::set<std::string> executor_ops;
  for (const std::string& op : ExecutorOpTypes()) if (op.rfind("memplan.", 0) != 0) executor_ops.insert(op);
  std::set<std::string> ops_exercised;
  std::map<std::string, std::vector<std::string>> skipped_by_op;  // missing op -> cases
  std::vector<std::string> other_skips, failures, randomized;
  int run = 0, passed = 0;
  for (const std::string& c : cases) {
    ConformanceResult r = RunConformanceCase(std::string(kNodeDir) + "/" + c);
    if (r.skipped) {
      if (!r.missing_ops.empty()) skipped_by_op[r.missing_ops[0]].push_back(c);
      else other_skips.push_back(c + ": " + r.message);
      continue;
    }
    ++run;
    for (const std::string& op : r.op_types) ops_exercised.insert(op);
    if (r.passed) {
      ++passed;
      if (r.randomized) randomized.push_back(c);
    } else {
      failures.push_back(c + ": " + r.message);
    }
  }
  std::printf("conformance: %zu op types implemented, %zu exercised by the test data\n", executor_ops.size(),
              ops_exercised.size());
  std::printf("conformance: %d cases run, %d passed, %zu failed (%.1f%%); %zu cases skipped\n", run, passed,
              failures.size(), run ? 100.0 * passed / run : 0.0,
              cases.size() - static_cast<size_t>(run));
  for (const std::string& f : failures) std::printf("  FAILED %s\n", f.c_str());
  if (!randomized.empty()) {
    std::printf("conformance: %zu random-output cases checked by type and shape only:", randomized.size());
    for (const std::string& c : randomized) std::printf(" %s", c.c_str());
    std::printf("\n");
  }
  for (const std::string& s : other_skips) std::printf("  skipped %s\n", s.c_str());
  std::printf("conformance: skipped for ops the executor lacks:");
  for (const auto& [op, cs] : skipped_by_op) std::printf(" %s(%zu)", op.c_str(), cs.size());
  std::printf("\n");
  EXPECT_GT(run, 400);
  EXPECT_GE(passed, 0.95 * run) << "fewer than 95% of the supported cases pass";
}

}  // namespace
}  // namespace memplan
