// Data parallelism on c10d (plan.h's "Data parallelism", issue 12), with Gloo on loopback:
//   - exactness: N ranks (2 and 4) on the batch split N ways train like one process on the
//     whole batch (the same losses and parameters after 3 steps, relative error <= 1e-5) for
//     shard none, optimizer and gradients, with SGD and Adam;
//   - each rank's measured peak equals its prediction (ApplyDataParallel) within 1%;
//   - faults: a rank killed mid-run makes the other fail within the collective timeout, naming
//     the collective; an unreachable MASTER_ADDR and a port in use are clear errors;
//   - `memplan run` under torchrun's environment: rank 0 writes the run JSON with every rank.
// The ranks are separate processes (fork + exec of executor_distributed_rank or memplan), as a
// launcher starts them: LibTorch's thread pools do not survive fork.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "memplan/analyzer.h"
#include "memplan/executor.h"
#include "memplan/planner.h"
#include "memplan/run_report.h"
#include "testing/cli_runner.h"
#include "testing/corpus.h"
#include "testing/graph_builder.h"

namespace memplan {
namespace {

using Clock = std::chrono::steady_clock;
using testing::GraphBuilder;
using testing::ReadFile;

// x[N,32] -> Gemm -> Relu -> Gemm -> [N,10] (cross-entropy): no dropout or batch norm, whose
// statistics are per rank. 2762 trained elements: w1 2048, b1 64, w2 640, b2 10.
GraphBuilder Mlp() { return testing::TwoLayerMlp(); }

// A TCP port of 127.0.0.1 nothing listens on now (the listener closes it again).
int FreePort() { return testing::LoopbackListener().port(); }

struct Proc {
  pid_t pid = -1;
  std::string out, err;  // files
};

// Starts `argv` with the rank's environment; stdout and stderr go to files in `dir`.
Proc Start(const std::vector<std::string>& argv, int rank, int world, int port,
           const std::string& dir, const std::string& addr = "127.0.0.1") {
  Proc p;
  p.out = dir + "/rank" + std::to_string(rank) + ".out";
  p.err = dir + "/rank" + std::to_string(rank) + ".err";
  p.pid = ::fork();
  if (p.pid == 0) {
    std::freopen(p.out.c_str(), "w", stdout);
    std::freopen(p.err.c_str(), "w", stderr);
    ::setenv("RANK", std::to_string(rank).c_str(), 1);
    ::setenv("LOCAL_RANK", std::to_string(rank).c_str(), 1);
    ::setenv("WORLD_SIZE", std::to_string(world).c_str(), 1);
    ::setenv("MASTER_ADDR", addr.c_str(), 1);
    ::setenv("MASTER_PORT", std::to_string(port).c_str(), 1);
    ::setenv("OMP_NUM_THREADS", "1", 1);  // 4 ranks on 2 cores
    std::vector<char*> args;
    for (const std::string& s : argv) args.push_back(const_cast<char*>(s.c_str()));
    args.push_back(nullptr);
    ::execv(args[0], args.data());
    std::_Exit(127);
  }
  return p;
}

// Waits for `p` at most `seconds`; returns its exit code (-1: killed by a signal, -2: still
// running after `seconds`, then killed).
int Wait(const Proc& p, double seconds) {
  const auto until = Clock::now() + std::chrono::duration<double>(seconds);
  int status = 0;
  while (true) {
    pid_t r = ::waitpid(p.pid, &status, WNOHANG);
    if (r == p.pid) return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    if (Clock::now() > until) {
      ::kill(p.pid, SIGKILL);
      ::waitpid(p.pid, &status, 0);
      return -2;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

// A test's scratch folder, removed with what is in it when the test ends: each rank's OUT.json
// holds the trained parameters (240 MB on resnet18), and CI runs the suite again and again on
// one machine.
struct ScratchDir {
  explicit ScratchDir(const std::string& name)
      : path(::testing::TempDir() + "memplan_dp_" + name + "_" + std::to_string(::getpid())) {
    ::mkdir(path.c_str(), 0755);
  }
  ~ScratchDir() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
  ScratchDir(const ScratchDir&) = delete;
  ScratchDir& operator=(const ScratchDir&) = delete;
  const std::string path;
};

double RelativeError(const std::vector<float>& a, const std::vector<float>& b) {
  double diff = 0, norm = 0;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) {
    diff += (double(a[i]) - b[i]) * (double(a[i]) - b[i]);
    norm += double(b[i]) * b[i];
  }
  return norm > 0 ? std::sqrt(diff / norm) : std::sqrt(diff);
}

// The reference the ranks are compared with: 3 steps of one process on the whole batch of 8.
RunResult OneProcessOnTheBatchOf8(const std::string& model, const std::string& optimizer) {
  RunOptions o;
  o.random_weights = true;
  o.steps = 3;
  o.learning_rate = 0.05;
  o.keep_gradients = true;
  LoadOptions lo;
  lo.batch = 8;
  lo.optimizer = ParseOptimizer(optimizer);
  return RunTraining(LoadTrainingGraph(model, lo), o);
}

// A rank's OUT.json against one process on the whole batch: every step's loss and every trained
// parameter within 1e-5 (relative).
void ExpectTrainsLikeOneProcess(const nlohmann::json& rank, const RunResult& one) {
  const int r = rank["rank"].get<int>();
  ASSERT_EQ(rank["loss"].size(), one.steps.size());
  for (size_t s = 0; s < one.steps.size(); ++s) {
    const double l = rank["loss"][s].get<double>();
    EXPECT_LE(std::abs(l - one.steps[s].loss), 1e-5 * std::abs(one.steps[s].loss))
        << "rank " << r << " step " << s + 1 << ": " << l << " vs one process "
        << one.steps[s].loss;
  }
  ASSERT_EQ(rank["parameters"].size(), one.parameters.size());
  for (const auto& [name, want] : one.parameters) {
    const std::vector<float> got = rank["parameters"][name].get<std::vector<float>>();
    ASSERT_EQ(got.size(), want.size()) << name;
    EXPECT_LE(RelativeError(got, want), 1e-5) << "rank " << r << " parameter " << name;
  }
}

struct RankRun {
  std::vector<nlohmann::json> ranks;  // each rank's OUT.json
  std::string errors;
  bool ok = false;
};

// Runs `world` ranks of executor_distributed_rank on `model` at the whole batch `batch`.
// `strategy`: the segments the ranks run (executor_distributed_rank's STRATEGY); `flat_gradient`
// (FLAT_GRADIENT): when a shard-gradients bucket's flat gradient is born, "" the default.
RankRun RunRanks(const std::string& model, int world, int64_t batch, const std::string& optimizer,
                 const std::string& shard, int64_t bucket_bytes, int steps, const std::string& dir,
                 const std::string& strategy = "none", const std::string& flat_gradient = "",
                 int64_t micro_batches = 1) {
  const int port = FreePort();
  std::vector<Proc> procs;
  for (int r = 0; r < world; ++r) {
    std::vector<std::string> args = {MEMPLAN_DP_RANK,
                                     model,
                                     std::to_string(batch / world),
                                     optimizer,
                                     shard,
                                     std::to_string(bucket_bytes),
                                     std::to_string(steps),
                                     dir + "/out" + std::to_string(r) + ".json"};
    if (strategy != "none" || !flat_gradient.empty() || micro_batches != 1)
      args.insert(args.end(), {std::to_string(micro_batches), "60", "0", strategy});
    if (!flat_gradient.empty()) args.push_back(flat_gradient);
    procs.push_back(Start(args, r, world, port, dir));
  }
  RankRun run;
  run.ok = true;
  for (int r = 0; r < world; ++r) {
    int code = Wait(procs[r], 300);
    if (code != 0) {
      run.ok = false;
      run.errors += "rank " + std::to_string(r) + " exit " + std::to_string(code) + ": " +
                    ReadFile(procs[r].err) + "\n";
      continue;
    }
    run.ranks.push_back(
        nlohmann::json::parse(ReadFile(dir + "/out" + std::to_string(r) + ".json")));
  }
  return run;
}

class DistributedExactness
    : public ::testing::TestWithParam<std::tuple<int, std::string, std::string>> {};

// One process on the whole batch of 8 against N ranks on 8 / N rows each. Small buckets
// (8 KiB: w1 alone, then b1 + w2 + b2 = 714 elements, padded to 716 for 4 ranks) make the
// padding and several buckets part of the test.
TEST_P(DistributedExactness, RanksTrainLikeOneProcessOnTheWholeBatch) {
  const auto& [world, optimizer, shard] = GetParam();
  const ScratchDir scratch("exact_" + std::to_string(world) + optimizer + shard);
  const std::string& dir = scratch.path;
  const std::string model = dir + "/mlp.onnx";
  Mlp().Save(model);

  const RunResult one = OneProcessOnTheBatchOf8(model, optimizer);

  RankRun run = RunRanks(model, world, 8, optimizer, shard, 8192, 3, dir);
  ASSERT_TRUE(run.ok) << run.errors;
  ASSERT_EQ(run.ranks.size(), static_cast<size_t>(world));
  for (const nlohmann::json& rank : run.ranks) ExpectTrainsLikeOneProcess(rank, one);
  double worst_loss = 0, worst_parameter = 0;
  for (const nlohmann::json& rank : run.ranks) {
    for (size_t s = 0; s < 3; ++s) {
      worst_loss =
          std::max(worst_loss, std::abs(rank["loss"][s].get<double>() - one.steps[s].loss) /
                                   std::abs(one.steps[s].loss));
    }
    for (const auto& [name, want] : one.parameters) {
      worst_parameter = std::max(
          worst_parameter, RelativeError(rank["parameters"][name].get<std::vector<float>>(), want));
    }
  }
  std::printf("%d ranks %s shard %s: worst relative error of a loss %.3g, of a parameter %.3g\n",
              world, optimizer.c_str(), shard.c_str(), worst_loss, worst_parameter);
  // Each rank's peak is its replay's. The buckets split the first Gemm's weight (bucket 0) from
  // its bias (bucket 1, with the second Gemm's): the bias completes bucket 1 before the weight,
  // read through w.t(), opens bucket 0 (planner/src/data_parallel.cc). With shard parameters
  // the schedule releases gathered bucket 1 (716 floats on 4 ranks) right after the bias's
  // accumulation, before bucket 0's flat gradient is allocated: a rank that held it until the
  // Gemm's backward ends would measure one gathered bucket over its prediction.
  for (const nlohmann::json& rank : run.ranks) {
    const double measured = rank["measured_peak_bytes"].get<double>();
    const double predicted = rank["predicted_peak_bytes"].get<double>();
    EXPECT_LE(std::abs(predicted - measured), 0.01 * measured)
        << "rank " << rank["rank"] << ": predicted " << predicted << " measured " << measured;
    std::printf("  rank %d: predicted %.0f B, measured %.0f B\n", rank["rank"].get<int>(),
                predicted, measured);
  }
  // The training moved the parameters (a test of nothing otherwise).
  EXPECT_NE(one.steps[0].loss, one.steps[2].loss);
}

INSTANTIATE_TEST_SUITE_P(
    Loopback, DistributedExactness,
    ::testing::Combine(::testing::Values(2, 4), ::testing::Values("sgd", "adam"),
                       ::testing::Values("none", "optimizer", "gradients", "parameters")),
    [](const auto& info) {
      return std::to_string(std::get<0>(info.param)) + "ranks_" + std::get<1>(info.param) + "_" +
             std::get<2>(info.param);
    });

// Micro-batches on sharded ranks: 2 ranks on 4 rows each, run as 2 micro-batches of 2 with
// gradient accumulation, train as one process on the whole batch of 8 does, and each rank
// measures the per-rank peak that the plan (micro-batched, then rewritten for the ranks)
// predicts, within 1%. Shard gradients reduce-scatter each bucket once, after the last
// micro-batch; shard parameters gather each bucket for every micro-batch's forward and backward.
class DistributedMicroBatches : public ::testing::TestWithParam<std::string> {};

TEST_P(DistributedMicroBatches, ShardedRanksAccumulateLikeOneProcess) {
  const std::string shard = GetParam();
  const ScratchDir scratch("micro_" + shard);
  const std::string model = scratch.path + "/mlp.onnx";
  Mlp().Save(model);
  const RunResult one = OneProcessOnTheBatchOf8(model, "adam");

  RankRun run = RunRanks(model, 2, 8, "adam", shard, 8192, 3, scratch.path, "none", "", 2);
  ASSERT_TRUE(run.ok) << run.errors;
  ASSERT_EQ(run.ranks.size(), 2u);
  for (const nlohmann::json& rank : run.ranks) {
    const int r = rank["rank"].get<int>();
    ExpectTrainsLikeOneProcess(rank, one);
    const double measured = rank["measured_peak_bytes"].get<double>();
    const double predicted = rank["predicted_peak_bytes"].get<double>();
    ASSERT_GT(predicted, 0);
    EXPECT_LE(std::abs(predicted - measured), 0.01 * measured)
        << "shard " << shard << " rank " << r << ": predicted " << predicted << " measured "
        << measured;
    std::printf("2 ranks x 2 micro-batches, shard %s, rank %d: predicted %.0f B, measured %.0f B\n",
                shard.c_str(), r, predicted, measured);
  }
  EXPECT_NE(one.steps[0].loss, one.steps[2].loss);
}

INSTANTIATE_TEST_SUITE_P(Loopback, DistributedMicroBatches,
                         ::testing::Values("none", "gradients", "parameters"));

// Each rank's measured peak against ApplyDataParallel's per-rank prediction, on corpus models.
class DistributedPeaks : public ::testing::TestWithParam<std::tuple<std::string, std::string>> {};

TEST_P(DistributedPeaks, EveryRankMeasuresItsPredictedPeak) {
  const auto& [name, shard] = GetParam();
  const ScratchDir scratch("peak_" + name + shard);
  const std::string& dir = scratch.path;
  // Adam: every shard mode changes the rank's bytes (parameters, gradients, two states).
  RankRun run = RunRanks(testing::CorpusModel(name), 2, 4, "adam", shard, 4 << 20, 2, dir);
  ASSERT_TRUE(run.ok) << run.errors;
  for (const nlohmann::json& rank : run.ranks) {
    const double measured = rank["measured_peak_bytes"].get<double>();
    const double predicted = rank["predicted_peak_bytes"].get<double>();
    ASSERT_GT(measured, 0);
    EXPECT_LE(std::abs(predicted - measured), 0.01 * measured)
        << name << " shard " << shard << " rank " << rank["rank"] << ": predicted " << predicted
        << " measured " << measured;
    std::printf("%s shard %s rank %d: predicted %.0f measured %.0f (%+.4f%%)\n", name.c_str(),
                shard.c_str(), rank["rank"].get<int>(), predicted, measured,
                100 * (predicted - measured) / measured);
  }
}

INSTANTIATE_TEST_SUITE_P(
    Corpus, DistributedPeaks,
    ::testing::Combine(::testing::Values("resnet18", "gpt"),
                       ::testing::Values("none", "optimizer", "gradients", "parameters")),
    [](const auto& info) { return std::get<0>(info.param) + "_" + std::get<1>(info.param); });

// Shard parameters by module units as FSDP2 runs them (1 B buckets: one bucket per module that
// owns parameters, the root's own parameters one more), with one unit prefetched in the
// backward: every rank measures the replayed per-rank peak within 1%.
TEST(DistributedShardParameters, ModuleUnitsWithBackwardPrefetchMeasureTheirPrediction) {
  const ScratchDir scratch("zero3_units");
  RankRun run =
      RunRanks(testing::CorpusModel("resnet18"), 2, 4, "sgd", "parameters", 1, 2, scratch.path);
  ASSERT_TRUE(run.ok) << run.errors;
  for (const nlohmann::json& rank : run.ranks) {
    const double measured = rank["measured_peak_bytes"].get<double>();
    const double predicted = rank["predicted_peak_bytes"].get<double>();
    ASSERT_GT(measured, 0);
    EXPECT_LE(std::abs(predicted - measured), 0.01 * measured) << "rank " << rank["rank"];
    std::printf("resnet18 units rank %d: predicted %.0f measured %.0f (%+.4f%%)\n",
                rank["rank"].get<int>(), predicted, measured,
                100 * (predicted - measured) / measured);
  }
}

// Shard parameters with segments: every forward, recompute and backward pass gathers its
// buckets again (plan.h). On the MLP (no batch-norm) the ranks train like one process running
// the same segments; on resnet18 every rank measures the replayed peak.
TEST(DistributedShardParameters, SegmentedRanksGatherInEveryPassAndMatchTheReplay) {
  const ScratchDir scratch("zero3_sqrt");
  const std::string& dir = scratch.path;
  const std::string mlp = dir + "/mlp.onnx";
  Mlp().Save(mlp);
  LoadOptions lo;
  lo.batch = 8;
  lo.optimizer = Optimizer::kAdam;
  TrainingGraph whole = LoadTrainingGraph(mlp, lo);
  PlanOptions po;
  po.strategy = "sqrt";
  RunOptions o;
  o.random_weights = true;
  o.steps = 3;
  o.learning_rate = 0.05;
  o.keep_gradients = true;
  o.segments = MakePlan(whole, {}, po).segments;
  ASSERT_GT(o.segments.size(), 1u);
  const RunResult one = RunTraining(whole, o);
  RankRun run = RunRanks(mlp, 2, 8, "adam", "parameters", 8192, 3, dir, "sqrt");
  ASSERT_TRUE(run.ok) << run.errors;
  for (const nlohmann::json& rank : run.ranks) {
    for (size_t s = 0; s < 3; ++s) {
      EXPECT_LE(std::abs(rank["loss"][s].get<double>() - one.steps[s].loss),
                1e-5 * std::abs(one.steps[s].loss));
    }
    for (const auto& [name, want] : one.parameters) {
      EXPECT_LE(RelativeError(rank["parameters"][name].get<std::vector<float>>(), want), 1e-5)
          << name;
    }
  }
  EXPECT_NE(one.steps[0].loss, one.steps[2].loss);

  run = RunRanks(testing::CorpusModel("resnet18"), 2, 4, "adam", "parameters", 4 << 20, 2, dir,
                 "sqrt");
  ASSERT_TRUE(run.ok) << run.errors;
  for (const nlohmann::json& rank : run.ranks) {
    const double measured = rank["measured_peak_bytes"].get<double>();
    const double predicted = rank["predicted_peak_bytes"].get<double>();
    EXPECT_LE(std::abs(predicted - measured), 0.01 * measured) << "rank " << rank["rank"];
    std::printf("resnet18 sqrt shard parameters rank %d: predicted %.0f measured %.0f (%+.4f%%)\n",
                rank["rank"].get<int>(), predicted, measured,
                100 * (predicted - measured) / measured);
  }
}

// FSDP2's gradient order (ParallelLayout::flat_gradient_at_reduce, shard parameters' default)
// against the flat gradient born at a bucket's first accumulation, on the MLP: 2 ranks of 4
// rows, SGD, 1 B buckets (its parameters have no module scope: each tensor is a unit of its
// own). Both orders peak in the first Gemm's backward (the last), which allocates w1's gradient
// (64 x 32 floats, 8,192 B) and b1's (256 B) with both gathered (8,192 + 256 B) and frees the
// incoming gradient h' (4 x 64 floats, 1,024 B) at its end; A: the bytes after it.
//   first accumulation: b1's bucket is accumulated, released and reduced first (A - 512), then
//     w1's accumulation allocates its 8,192 B flat gradient beside w1 gathered and its
//     gradient: A - 512 + 8,192 = A + 7,680;
//   FSDP2's order: the op itself, A + 1,024, is the most; then w1 and b1 are released (A -
//     8,448) before w1's flat gradient (8,192 B) is born beside its gradient.
// Each rank measures 7,680 - 1,024 = 6,656 B less with FSDP2's order, each order its
// prediction, and both train alike.
TEST(DistributedShardParameters, FlatGradientAtReduceLowersEveryRanksPeakByTheGatheredWeight) {
  const ScratchDir scratch("flat_at_reduce");
  const std::string& dir = scratch.path;
  const std::string mlp = dir + "/mlp.onnx";
  Mlp().Save(mlp);
  std::map<std::string, RankRun> runs;
  for (const std::string order : {"at-first-accumulation", "at-reduce"}) {
    runs[order] = RunRanks(mlp, 2, 8, "sgd", "parameters", 1, 2, dir, "none", order);
    ASSERT_TRUE(runs[order].ok) << runs[order].errors;
    ASSERT_EQ(runs[order].ranks.size(), 2u);
    for (const nlohmann::json& rank : runs[order].ranks) {
      const double measured = rank["measured_peak_bytes"].get<double>();
      const double predicted = rank["predicted_peak_bytes"].get<double>();
      EXPECT_LE(std::abs(predicted - measured), 0.01 * measured)
          << order << " rank " << rank["rank"] << ": predicted " << predicted << " measured "
          << measured;
      std::printf("%s rank %d: predicted %.0f B, measured %.0f B\n", order.c_str(),
                  rank["rank"].get<int>(), predicted, measured);
      std::fflush(stdout);
    }
  }
  for (size_t r = 0; r < 2; ++r) {
    const nlohmann::json& first = runs["at-first-accumulation"].ranks[r];
    const nlohmann::json& fsdp2 = runs["at-reduce"].ranks[r];
    EXPECT_EQ(
        first["measured_peak_bytes"].get<int64_t>() - fsdp2["measured_peak_bytes"].get<int64_t>(),
        6656)
        << "rank " << r;
    EXPECT_EQ(
        first["predicted_peak_bytes"].get<int64_t>() - fsdp2["predicted_peak_bytes"].get<int64_t>(),
        6656)
        << "rank " << r;
    EXPECT_EQ(first["loss"], fsdp2["loss"]) << "rank " << r;
    EXPECT_EQ(first["parameters"], fsdp2["parameters"]) << "rank " << r;
  }
}

// Rank 1 is killed after its first step while rank 0 waits in the second step's all-reduce:
// rank 0 fails at once (the connection closes) or at the latest after the collective timeout,
// naming the collective, instead of hanging.
TEST(DistributedFaults, AKilledRankMakesTheOtherFailWithinTheTimeout) {
  const ScratchDir scratch("kill");
  const std::string& dir = scratch.path;
  const std::string model = dir + "/mlp.onnx";
  Mlp().Save(model);
  const int port = FreePort();
  const double timeout = 10;
  auto argv = [&](int r, const std::string& sleep) {
    return std::vector<std::string>{MEMPLAN_DP_RANK,
                                    model,
                                    "4",
                                    "sgd",
                                    "none",
                                    "8192",
                                    "3",
                                    dir + "/out" + std::to_string(r) + ".json",
                                    "1",
                                    std::to_string(timeout),
                                    sleep};
  };
  Proc r0 = Start(argv(0, "0"), 0, 2, port, dir);
  Proc r1 = Start(argv(1, "60"), 1, 2, port, dir);
  // Wait until rank 1 has finished its first step (it then sleeps).
  const auto until = Clock::now() + std::chrono::seconds(120);
  while (ReadFile(r1.out).find("step 1 done") == std::string::npos && Clock::now() < until) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  ASSERT_NE(ReadFile(r1.out).find("step 1 done"), std::string::npos) << ReadFile(r1.err);
  std::this_thread::sleep_for(std::chrono::milliseconds(300));  // rank 0 reaches the all-reduce
  const auto killed = Clock::now();
  ::kill(r1.pid, SIGKILL);
  EXPECT_EQ(Wait(r1, 10), -1);
  const int code = Wait(r0, timeout + 20);
  const double seconds = std::chrono::duration<double>(Clock::now() - killed).count();
  EXPECT_EQ(code, 1) << "rank 0 did not fail on its own (-2: still running)";
  EXPECT_LE(seconds, timeout + 5);
  const std::string err = ReadFile(r0.err);
  EXPECT_NE(err.find("rank 0: the all-reduce of bucket "), std::string::npos) << err;
  EXPECT_NE(err.find("another rank has probably exited"), std::string::npos) << err;
  EXPECT_FALSE(testing::FileExists(dir + "/out0.json"));
}

class DistributedCli : public testing::CliTest {};

// `memplan run` as one rank: what torchrun, an srun script or a user by hand starts.
TEST_F(DistributedCli, TwoRanksStartedByHandWriteOneRunJsonWithEveryRank) {
  const std::string model = dir_ + "/mlp.onnx";
  Mlp().Save(model);
  const int port = FreePort();
  auto argv = [&](int r) {
    return std::vector<std::string>{MEMPLAN_CLI, "run",
                                    model,       "--batch",
                                    "8",         "--random-weights",
                                    "--steps",   "2",
                                    "--json",    dir_ + "/run" + std::to_string(r) + ".json"};
  };
  Proc r0 = Start(argv(0), 0, 2, port, dir_);
  Proc r1 = Start(argv(1), 1, 2, port, dir_);
  ASSERT_EQ(Wait(r0, 120), 0) << ReadFile(r0.err);
  ASSERT_EQ(Wait(r1, 120), 0) << ReadFile(r1.err);
  // Rank 1 prints nothing and writes nothing; rank 0 reports both.
  EXPECT_EQ(ReadFile(r1.out), "");
  EXPECT_FALSE(testing::FileExists(dir_ + "/run1.json"));
  const std::string out = ReadFile(r0.out);
  EXPECT_NE(out.find("rank 1 "), std::string::npos) << out;
  RunReport rep = RunReportFromJson(nlohmann::json::parse(ReadFile(dir_ + "/run0.json")));
  EXPECT_EQ(rep.batch, 8);
  EXPECT_EQ(rep.devices, 2);
  EXPECT_EQ(rep.shard, "none");
  ASSERT_TRUE(rep.ranks.has_value());
  ASSERT_EQ(rep.ranks->size(), 2u);
  for (const RunRank& k : *rep.ranks) {
    EXPECT_EQ(k.step_seconds.size(), 2u);
    EXPECT_GT(k.measured_peak_bytes, 0);
    EXPECT_LE(std::abs(k.predicted_peak_bytes - k.measured_peak_bytes),
              k.measured_peak_bytes / 100);
  }
  // The loss is the whole batch's: one process at batch 8 reports the same.
  testing::CliResult one =
      Run("run " + model + " --batch 8 --random-weights --steps 2 --json " + dir_ + "/one.json");
  ASSERT_EQ(one.code, 0) << one.err;
  RunReport single = RunReportFromJson(nlohmann::json::parse(ReadFile(dir_ + "/one.json")));
  for (size_t s = 0; s < 2; ++s)
    EXPECT_NEAR(rep.loss[s], single.loss[s], 1e-5 * std::abs(single.loss[s]));
}

TEST_F(DistributedCli, APortInUseIsAClearError) {
  const std::string model = dir_ + "/mlp.onnx";
  Mlp().Save(model);
  testing::LoopbackListener listener;
  const int port = listener.port();
  ASSERT_GT(port, 0);
  Proc r0 = Start({MEMPLAN_CLI, "run", model, "--batch", "8", "--random-weights", "--timeout", "5",
                   "--json", dir_ + "/o.json"},
                  0, 2, port, dir_);
  EXPECT_EQ(Wait(r0, 30), 1);
  const std::string err = ReadFile(r0.err);
  EXPECT_NE(err.find("rank 0: cannot host the rendezvous on 127.0.0.1:" + std::to_string(port)),
            std::string::npos)
      << err;
  EXPECT_NE(err.find("MASTER_PORT"), std::string::npos) << err;
  EXPECT_FALSE(testing::FileExists(dir_ + "/o.json"));
}

TEST_F(DistributedCli, AnUnreachableMasterIsAClearErrorWithinTheTimeout) {
  const std::string model = dir_ + "/mlp.onnx";
  Mlp().Save(model);
  // Nobody hosts the rendezvous: rank 1 alone tries to reach it.
  const int port = FreePort();
  const auto t0 = Clock::now();
  Proc r1 = Start({MEMPLAN_CLI, "run", model, "--batch", "8", "--random-weights", "--timeout", "3"},
                  1, 2, port, dir_);
  EXPECT_EQ(Wait(r1, 60), 1);
  EXPECT_LE(std::chrono::duration<double>(Clock::now() - t0).count(), 3 + 15);
  const std::string err = ReadFile(r1.err);
  EXPECT_NE(err.find("rank 1: the rendezvous at 127.0.0.1:" + std::to_string(port) +
                     " failed within 3 s"),
            std::string::npos)
      << err;
  EXPECT_NE(err.find("MASTER_ADDR"), std::string::npos) << err;
}

// A rank on "cuda" takes cuda:LOCAL_RANK (NCCL); where that device is missing, as on every
// machine without a GPU, each rank says so and exits 1 without a file.
TEST_F(DistributedCli, ACudaRankWithoutItsDeviceIsAClearError) {
  const std::string backend =
      ExecutorBackendDescription();  // "..., CUDA 13.0 (K device(s) visible)"
  if (backend.find("device(s) visible") != std::string::npos &&
      backend.find("(0 device(s)") == std::string::npos &&
      backend.find("(1 device(s)") == std::string::npos) {
    GTEST_SKIP() << "two CUDA devices are visible: scripts/gpu-check.sh runs NCCL there";
  }
  const std::string model = dir_ + "/mlp.onnx";
  Mlp().Save(model);
  const int port = FreePort();
  auto argv = [&](int r) {
    return std::vector<std::string>{
        MEMPLAN_CLI, "run",    model,
        "--batch",   "8",      "--random-weights",
        "--device",  "cuda",   "--timeout",
        "5",         "--json", dir_ + "/cuda" + std::to_string(r) + ".json"};
  };
  Proc r0 = Start(argv(0), 0, 2, port, dir_);
  Proc r1 = Start(argv(1), 1, 2, port, dir_);
  EXPECT_EQ(Wait(r0, 60), 1);
  EXPECT_EQ(Wait(r1, 60), 1);
  const std::string err = ReadFile(r1.err);
  EXPECT_NE(err.find("cuda:1"), std::string::npos) << err;
  EXPECT_FALSE(testing::FileExists(dir_ + "/cuda0.json"));
}

TEST_F(DistributedCli, ARankOutsideTheWorldIsAClearError) {
  const std::string model = dir_ + "/mlp.onnx";
  Mlp().Save(model);
  Proc p = Start({MEMPLAN_CLI, "run", model, "--batch", "8", "--random-weights"}, 5, 2, FreePort(),
                 dir_);
  EXPECT_EQ(Wait(p, 60), 1);
  const std::string err = ReadFile(p.err);
  EXPECT_NE(err.find("RANK='5' is not a whole number from 0 to 1"), std::string::npos) << err;
}

// The run JSON's data-parallel fields: written and read back unchanged; ranks out of order or
// with a step count unlike the run's are named.
TEST(DistributedRunReport, RanksRoundTripAndAreChecked) {
  RunReport r;
  r.memplan_version = "0.1.0";
  r.device = "cpu";
  r.steps = 2;
  r.step_seconds = {0.5, 0.4};
  r.recompute_seconds = {0, 0};
  r.loss = {2.0, 1.5};
  r.plan = {{"strategy", "none"},
            {"sections", nlohmann::json::array()},
            {"checkpoints", nlohmann::json::array()}};
  r.devices = 2;
  r.shard = "gradients";
  r.ranks = std::vector<RunRank>{{0, 1000, 1004, {0.5, 0.4}, {0.1, 0.05}},
                                 {1, 1000, 1004, {0.5, 0.39}, {0.1, 0.06}}};
  const nlohmann::json j = RunReportToJson(r);
  EXPECT_EQ(j["ranks"][1]["comm_seconds"][1], 0.06);
  EXPECT_EQ(RunReportFromJson(j), r);

  nlohmann::json swapped = j;
  std::swap(swapped["ranks"][0], swapped["ranks"][1]);
  EXPECT_THROW(
      {
        try {
          RunReportFromJson(swapped);
        } catch (const MemplanError& e) {
          EXPECT_NE(std::string(e.what()).find("ranks[0].rank"), std::string::npos) << e.what();
          throw;
        }
      },
      MemplanError);
  nlohmann::json short_rank = j;
  short_rank["ranks"][1]["step_seconds"] = {0.5};
  short_rank["ranks"][1]["comm_seconds"] = {0.1};
  EXPECT_THROW(RunReportFromJson(short_rank), MemplanError);
  nlohmann::json three = j;
  three["devices"] = 3;
  EXPECT_THROW(RunReportFromJson(three), MemplanError);
}

}  // namespace
}  // namespace memplan
