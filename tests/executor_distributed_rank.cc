// One rank of a data-parallel training run for executor_distributed_test: the rank comes from
// the environment (RANK, WORLD_SIZE, ... as memplan run reads it), the layout and the model
// from the arguments. Writes what the test compares into OUT.json: the losses (the mean over
// the ranks), the trained parameters after the last step, and the rank's measured and predicted
// (ApplyDataParallel) peaks.
//
//   executor_distributed_rank MODEL.onnx RANK_BATCH OPTIMIZER SHARD BUCKET_BYTES STEPS OUT.json
//       [MICRO_BATCHES [TIMEOUT_SECONDS [SLEEP_AFTER_STEP_SECONDS [STRATEGY [FLAT_GRADIENT]]]]]
//
// STRATEGY (default none): the segment strategy planned without a budget (sqrt: about sqrt(n)
// segments), which the rank runs and the prediction replays. FLAT_GRADIENT (default: the
// layout's default): "at-reduce" or "at-first-accumulation", ParallelLayout::
// flat_gradient_at_reduce, which the rank runs and the prediction replays.
// RANK_BATCH is the batch the rank's graph is loaded at (the whole batch / (ranks x
// micro-batches)). SLEEP_AFTER_STEP_SECONDS > 0: the process sleeps after its first step (a test
// kills it then).
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <string>

#include "memplan/analyzer.h"
#include "memplan/executor.h"
#include "memplan/plan.h"
#include "memplan/planner.h"

int main(int argc, char** argv) {
  using namespace memplan;
  if (argc < 8) {
    std::cerr << "usage: executor_distributed_rank MODEL RANK_BATCH OPTIMIZER SHARD BUCKET_BYTES "
                 "STEPS OUT.json "
                 "[MICRO_BATCHES [TIMEOUT [SLEEP [STRATEGY [FLAT_GRADIENT]]]]]\n";
    return 2;
  }
  try {
    LoadOptions lo;
    const int64_t rank_batch = std::atoll(argv[2]);
    lo.optimizer = ParseOptimizer(argv[3]);
    lo.grads =
        GradientLifetime::kKept;  // data-parallel ranks keep their buckets (SteppedGradients)
    const int64_t micro = argc > 8 ? std::atoll(argv[8]) : 1;
    lo.batch = rank_batch / micro;  // the executor runs the graph of one micro-batch
    TrainingGraph g = LoadTrainingGraph(argv[1], lo);

    RunOptions o;
    o.random_weights = true;
    o.steps = std::atoll(argv[6]);
    o.learning_rate = 0.05;
    o.keep_gradients = true;
    o.micro_batches = micro;
    o.distributed = DistributedFromEnvironment();
    o.distributed.layout.devices = o.distributed.world_size;
    o.distributed.layout.shard = ParseShardMode(argv[4]);
    o.distributed.layout.bucket_bytes = std::atoll(argv[5]);
    if (argc > 9) o.distributed.timeout_seconds = std::atof(argv[9]);
    if (argc > 12) {
      const std::string order = argv[12];
      if (order != "at-reduce" && order != "at-first-accumulation") {
        std::cerr << "FLAT_GRADIENT must be at-reduce or at-first-accumulation\n";
        return 2;
      }
      o.distributed.layout.flat_gradient_at_reduce = order == "at-reduce";
    }
    const double sleep_after = argc > 10 ? std::atof(argv[10]) : 0;
    if (sleep_after > 0) {
      o.on_step = [&](const StepStats& s) {
        if (s.step == 0) {
          std::printf("step 1 done\n");
          std::fflush(stdout);
          ::usleep(static_cast<useconds_t>(sleep_after * 1e6));
        }
      };
    }

    // The per-rank prediction: the plan, rewritten for the layout. With micro-batches, as
    // `memplan plan --devices N --micro-batches K` makes it: planned on the micro-batch graph
    // with the rest of the rank's batch resident, then rewritten for the ranks.
    int64_t predicted = 0;
    PlanOptions po;
    po.strategy = argc > 11 ? argv[11] : "none";
    if (micro == 1) {
      Plan p = MakePlan(g, {}, po);
      o.segments = p.segments;
      ApplyDataParallel(p, g, o.distributed.layout);
      predicted = Simulate(p.schedule).peak_bytes;
    } else {
      const GraphAtBatch at_batch = [&](int64_t batch) {
        LoadOptions at = lo;
        at.batch = batch;
        return LoadTrainingGraph(argv[1], at);
      };
      Plan p = PlanMicroBatched(at_batch, rank_batch, {}, po, micro);
      o.segments = p.segments;
      ApplyDataParallel(p, at_batch(p.batch), o.distributed.layout);
      predicted = Simulate(p.schedule).peak_bytes;
    }

    RunResult r = RunTraining(g, o);
    nlohmann::json j;
    j["rank"] = o.distributed.rank;
    j["measured_peak_bytes"] = r.measured_peak_bytes;
    j["predicted_peak_bytes"] = predicted;
    for (const StepStats& s : r.steps) j["loss"].push_back(s.loss);
    for (const auto& [name, v] : r.parameters) j["parameters"][name] = v;
    for (const RankStats& k : r.ranks) j["rank_peaks"].push_back(k.measured_peak_bytes);
    std::ofstream(argv[7]) << j.dump();
    return 0;
  } catch (const std::exception& e) {
    std::cerr << "error: " << e.what() << "\n";
    return 1;
  }
}
