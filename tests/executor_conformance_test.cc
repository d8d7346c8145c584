// The executor's kernels against ONNX's backend node test cases, one test per case, for two
// versions of ONNX:
//  - Onnx1_12: Debian's libonnx-testdata (ONNX 1.12, opsets up to 17);
//  - Onnx1_23: the node cases of the onnx pinned in scripts/requirements.txt (1.23.2), which
//    samples/onnx_node_cases.py writes from the wheel's generators into the model cache (ctest's
//    onnx_node_cases fixture runs it).
// A case whose op types the executor implements runs forward and is compared with the expected
// outputs; it passes, or it is a known failure listed with its reason.
#include <dirent.h>
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <map>
#include <ostream>
#include <set>
#include <string>
#include <vector>

#include "memplan/executor.h"

#ifndef MEMPLAN_ONNX_NODE_CASES
#define MEMPLAN_ONNX_NODE_CASES ""
#endif

namespace memplan {
namespace {

using KnownList = std::map<std::string, std::string>;  // case -> why it fails

const char* const kBf16Truncates =
    "ONNX's expected data truncates to bfloat16; LibTorch rounds to nearest even";

// ONNX 1.12 (libonnx-testdata). A case here that starts passing fails the test too, so that the
// list stays true.
const KnownList& KnownFailures1_12() {
  static const KnownList known = {
      {"test_cast_FLOAT_to_BFLOAT16", kBf16Truncates},
      {"test_castlike_FLOAT_to_BFLOAT16", kBf16Truncates},
      {"test_castlike_FLOAT_to_BFLOAT16_expanded", kBf16Truncates},
  };
  return known;
}

// ONNX 1.23.2 (samples/onnx_node_cases.py), likewise.
const char* const kBf16Expanded =
    "the expanded Attention graph runs op by op in bfloat16, rounding after each op; ONNX's "
    "expected output is "
    "computed in float and rounded once: 1-ulp differences (0.0039) exceed rtol 1e-3";
const KnownList& KnownFailures1_23() {
  static const KnownList known = {
      {"test_attention_3d_causal_bf16_expanded", kBf16Expanded},
      {"test_attention_4d_attn_mask_causal_bf16_expanded", kBf16Expanded},
      {"test_attention_4d_causal_bf16_expanded", kBf16Expanded},
      {"test_attention_4d_causal_padded_kv_bf16_expanded", kBf16Expanded},
      {"test_attention_4d_padded_kv_bf16_expanded", kBf16Expanded},
      {"test_attention_4d_causal_fp16_expanded",
       "the expanded Attention graph runs op by op in float16, rounding after each op; ONNX's "
       "expected output is "
       "computed in float and rounded once: 2 of 192 values differ by 1 ulp (0.00049), over rtol "
       "1e-3"},
  };
  return known;
}

// One data set: where its cases are and which of them fail.
struct DataSet {
  const char* label;         // the gtest instantiation's prefix
  std::string node_dir;      // <dir>/<case>/model.onnx, test_data_set_*/
  std::string version_file;  // names the ONNX version the cases come from ("" if fixed)
  const char* version;       // the version the known-failure list is for
  const KnownList& known;
  const char* how_to_get;  // what to do when the cases are absent
  bool required;           // absent cases fail the test (else it skips)
};

const DataSet& Set1_12() {
  static const DataSet s{"Onnx1_12",          "/usr/share/libonnx-testdata/data/node", "",   "1.12",
                         KnownFailures1_12(), "install Debian's libonnx-testdata",     false};
  return s;
}
const DataSet& Set1_23() {
  static const DataSet s{"Onnx1_23",
                         std::string(MEMPLAN_ONNX_NODE_CASES) + "/node",
                         std::string(MEMPLAN_ONNX_NODE_CASES) + "/ONNX_VERSION",
                         "1.23.2",
                         KnownFailures1_23(),
                         "run samples/onnx_node_cases.py --out " MEMPLAN_ONNX_NODE_CASES
                         " with the project's Python (ctest's export_onnx_node_cases fixture does)",
                         true};
  return s;
}
const DataSet* const kSets[] = {&Set1_12(), &Set1_23()};

std::vector<std::string> CaseNames(const DataSet& s) {
  std::vector<std::string> out;
  if (DIR* d = ::opendir(s.node_dir.c_str())) {
    while (dirent* e = ::readdir(d)) {
      std::string n = e->d_name;
      if (n.rfind("test_", 0) == 0) out.push_back(n);
    }
    ::closedir(d);
  }
  std::sort(out.begin(), out.end());
  return out;
}

struct Case {
  const DataSet* set;
  std::string name;
};
void PrintTo(const Case& c, std::ostream* os) { *os << c.set->label << "/" << c.name; }
std::vector<Case> Cases(const DataSet& s) {
  std::vector<Case> out;
  for (std::string& n : CaseNames(s)) out.push_back({&s, std::move(n)});
  return out;
}

// What the cases of one data set exercised, for the summary once they have all run.
struct Tally {
  size_t seen = 0;
  int run = 0, passed = 0, known_failures = 0;
  std::set<std::string> ops_exercised;
  std::map<std::string, int> skipped_by_op;  // missing op -> cases
  std::map<std::string, int> skipped_other;  // reason -> cases
};
std::map<const DataSet*, Tally>& Tallies() {
  static std::map<const DataSet*, Tally> t;
  return t;
}

// One test per ONNX backend case.
class OnnxNodeCase : public ::testing::TestWithParam<Case> {};

TEST_P(OnnxNodeCase, MatchesTheExpectedOutputs) {
  const Case& c = GetParam();
  ConformanceResult r = RunConformanceCase(c.set->node_dir + "/" + c.name);
  Tally& tally = Tallies()[c.set];
  ++tally.seen;
  auto known = c.set->known.find(c.name);
  if (r.skipped) {
    if (!r.missing_ops.empty())
      ++tally.skipped_by_op[r.missing_ops[0]];
    else
      ++tally.skipped_other[r.message];
    // A listed case must run: the list names failures, not skips.
    EXPECT_TRUE(known == c.set->known.end())
        << c.name << " is skipped (" << r.message << "): remove it from the known failures";
    std::string why = r.missing_ops.empty() ? r.message : "the executor lacks " + r.missing_ops[0];
    GTEST_SKIP() << why;
  }
  ++tally.run;
  tally.passed += r.passed;
  tally.ops_exercised.insert(r.op_types.begin(), r.op_types.end());
  if (known != c.set->known.end()) {
    ++tally.known_failures;
    EXPECT_FALSE(r.passed) << c.name << " passes now: remove it from the known failures of ONNX "
                           << c.set->version;
    return;
  }
  EXPECT_TRUE(r.passed) << r.message;
}

std::string CaseName(const ::testing::TestParamInfo<Case>& i) { return i.param.name; }

INSTANTIATE_TEST_SUITE_P(Onnx1_12, OnnxNodeCase, ::testing::ValuesIn(Cases(Set1_12())), CaseName);
INSTANTIATE_TEST_SUITE_P(Onnx1_23, OnnxNodeCase, ::testing::ValuesIn(Cases(Set1_23())), CaseName);
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(OnnxNodeCase);

// Each data set as a whole, once every one of its cases has run (not under a filter): the
// executor's ops are exercised broadly and at least 99% of the cases that run pass.
class ConformanceSummary : public ::testing::Environment {
 public:
  void TearDown() override {
    for (const DataSet* s : kSets) {
      auto it = Tallies().find(s);
      if (it == Tallies().end()) continue;
      const Tally& t = it->second;
      if (t.seen == 0 || t.seen != CaseNames(*s).size()) continue;
      size_t skipped = t.seen - static_cast<size_t>(t.run);
      std::printf(
          "conformance ONNX %s: %zu op types implemented, %zu exercised; %zu cases, %d run, %d "
          "passed, "
          "%d known failures, %zu skipped (%.2f%% of the run cases pass)\n",
          s->version, ExecutorOpTypes().size(), t.ops_exercised.size(), t.seen, t.run, t.passed,
          t.known_failures, skipped, t.run ? 100.0 * t.passed / t.run : 0.0);
      std::printf("conformance ONNX %s: skipped for ops the executor lacks:", s->version);
      for (const auto& [op, n] : t.skipped_by_op) std::printf(" %s(%d)", op.c_str(), n);
      std::printf("\n");
      for (const auto& [why, n] : t.skipped_other)
        std::printf("conformance ONNX %s: skipped (%s): %d\n", s->version, why.c_str(), n);
      EXPECT_GT(t.run, 400) << "too few ONNX " << s->version << " backend cases ran";
      EXPECT_GE(t.passed, 0.99 * t.run)
          << "under 99% of the ONNX " << s->version << " cases that run pass";
    }
  }
};
const auto* const kSummary = ::testing::AddGlobalTestEnvironment(new ConformanceSummary);

void CheckKnownFailuresAreRealCases(const DataSet& s) {
  std::vector<std::string> cases = CaseNames(s);
  if (cases.empty()) {
    if (s.required) FAIL() << s.node_dir << " not found: " << s.how_to_get;
    GTEST_SKIP() << s.node_dir << " not found: " << s.how_to_get;
  }
  if (!s.version_file.empty()) {
    std::ifstream in(s.version_file);
    std::string v;
    in >> v;
    ASSERT_EQ(v, s.version) << s.node_dir << " holds the cases of ONNX " << v
                            << "; the known failures are for " << s.version
                            << " (regenerate: " << s.how_to_get << ", or update the list)";
  }
  for (const auto& [c, why] : s.known) {
    EXPECT_TRUE(std::binary_search(cases.begin(), cases.end(), c))
        << c << " is listed as failing but does not exist";
    EXPECT_FALSE(why.empty()) << c << " is listed without a reason";
  }
}

TEST(ExecutorConformance, KnownFailuresOfOnnx1_12AreRealCases) {
  CheckKnownFailuresAreRealCases(Set1_12());
}
TEST(ExecutorConformance, KnownFailuresOfOnnx1_23AreRealCases) {
  CheckKnownFailuresAreRealCases(Set1_23());
}

}  // namespace
}  // namespace memplan
