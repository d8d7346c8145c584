// Micro-batching: split the batch when checkpointing alone cannot fit the budget.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <map>
#include <numeric>

#include "memplan/planner.h"
#include "planner_internal.h"

namespace memplan {
namespace {

using u64 = uint64_t;
using u128 = unsigned __int128;

u64 MulMod(u64 a, u64 b, u64 m) { return static_cast<u64>(static_cast<u128>(a) * b % m); }

u64 PowMod(u64 a, u64 e, u64 m) {
  u64 r = 1;
  for (a %= m; e > 0; e >>= 1, a = MulMod(a, a, m)) {
    if (e & 1) r = MulMod(r, a, m);
  }
  return r;
}

// Miller-Rabin with the bases that decide every 64-bit number exactly.
bool IsPrime(u64 n) {
  if (n < 2) return false;
  for (u64 p : {2, 3, 5, 7, 11, 13, 17, 19, 23, 29, 31, 37}) {
    if (n % p == 0) return n == p;
  }
  u64 d = n - 1;
  int r = 0;
  for (; d % 2 == 0; d /= 2) ++r;
  for (u64 a : {2, 3, 5, 7, 11, 13, 17, 19, 23, 29, 31, 37}) {
    u64 x = PowMod(a, d, n);
    if (x == 1 || x == n - 1) continue;
    bool composite = true;
    for (int i = 1; i < r && composite; ++i) {
      x = MulMod(x, x, n);
      composite = x != n - 1;
    }
    if (composite) return false;
  }
  return true;
}

// A non-trivial factor of the odd composite n (Pollard's rho, Brent's variant).
u64 Rho(u64 n) {
  for (u64 c = 1;; ++c) {
    u64 x = 2, y = 2, d = 1;
    auto f = [&](u64 v) { return (MulMod(v, v, n) + c) % n; };
    while (d == 1) {
      x = f(x);
      y = f(f(y));
      d = std::gcd(x > y ? x - y : y - x, n);
    }
    if (d != n) return d;
  }
}

void Factor(u64 n, std::map<u64, int>& primes) {
  if (n == 1) return;
  for (u64 p : {2, 3, 5, 7, 11, 13, 17, 19, 23, 29, 31, 37}) {
    while (n % p == 0) {
      ++primes[p];
      n /= p;
    }
  }
  if (n == 1) return;
  if (IsPrime(n)) {
    ++primes[n];
    return;
  }
  u64 d = Rho(n);
  Factor(d, primes);
  Factor(n / d, primes);
}

}  // namespace

std::vector<int64_t> Divisors(int64_t n) {
  if (n < 1) throw MemplanError("the batch must be positive to be split into micro-batches");
  std::map<u64, int> primes;
  Factor(static_cast<u64>(n), primes);
  std::vector<int64_t> out = {1};
  for (const auto& [p, e] : primes) {
    const size_t before = out.size();
    int64_t power = 1;
    for (int k = 1; k <= e; ++k) {
      power *= static_cast<int64_t>(p);
      for (size_t i = 0; i < before; ++i) out.push_back(out[i] * power);
    }
  }
  std::sort(out.begin(), out.end());
  return out;
}

void ApplyMicroBatches(Plan& p, const TrainingGraph& micro, int64_t micro_batches,
                       const SimulatorOptions& simulator) {
  p.micro_batches = micro_batches;
  if (micro_batches <= 1) return;
  // The other micro-batches' inputs and targets wait in memory for the whole step.
  int64_t rest = 0;
  if (__builtin_mul_overflow(micro_batches - 1, micro.input_bytes(), &rest)) {
    throw MemplanError("the inputs of " + std::to_string(micro_batches) + " micro-batches of " +
                       std::to_string(micro.batch) +
                       " need more than 2^63 bytes; use a smaller batch");
  }
  if (rest > 0 && !p.schedule.steps.empty()) {
    BufferId b = p.schedule.AddBuffer(
        {"inputs of the other " + std::to_string(micro_batches - 1) + " micro-batches", rest,
         MemoryCategory::kInput, kNone});
    p.schedule.steps.front().allocs.push_back(b);
  }
  p.timeline = Simulate(p.schedule, simulator);
  p.predicted_peak_bytes = p.timeline.peak_bytes;
  p.feasible = p.budget_bytes <= 0 || p.predicted_peak_bytes + p.margin_bytes <= p.budget_bytes;
  p.recompute_flops *= static_cast<double>(micro_batches);
  p.forward_flops *= static_cast<double>(micro_batches);
  p.predicted_recompute_seconds *= static_cast<double>(micro_batches);
  // `auto`'s candidates were planned on the micro-batch graph against the budget the resident
  // inputs leave: with those inputs (resident from the first step: + rest on every step's bytes)
  // and per step, they compare with the plan and its budget as printed.
  for (PlanCandidate& c : p.candidates) {
    c.predicted_peak_bytes += rest;
    c.recompute_flops *= static_cast<double>(micro_batches);
    c.predicted_recompute_seconds *= static_cast<double>(micro_batches);
  }
  std::string note = "the batch of " + std::to_string(micro.batch * micro_batches) + " runs as " +
                     std::to_string(micro_batches) + " micro-batches of " +
                     std::to_string(micro.batch) + " with gradient accumulation";
  if (UsesBatchStatistics(micro)) {
    note += " (batch-norm statistics are per micro-batch";
    if (micro.batch < kFewestSamplesForBatchStatistics) {
      note += "; WARNING: " + std::to_string(micro.batch) + " sample" +
              (micro.batch == 1 ? "" : "s") + " per micro-batch is below " +
              std::to_string(kFewestSamplesForBatchStatistics) +
              ", where batch-norm statistics become noisy and training may diverge";
    }
    note += ")";
  }
  p.notes.push_back(note);
}

GradientLifetime SteppedGradients(GradientLifetime asked, int64_t devices, int64_t micro_batches) {
  return devices > 1 || micro_batches > 1 ? GradientLifetime::kKept : asked;
}

bool UsesBatchStatistics(const TrainingGraph& g) {
  // Training-mode batch normalisation is the op whose result depends on the other samples of the
  // batch (inference-mode exports, such as the dynamo exporter's, fold it into the convolution).
  return std::any_of(g.nodes.begin(), g.nodes.end(), [](const Node& n) {
    return n.op_type == "BatchNormalization" && BatchNormIsTraining(n);
  });
}

namespace {

// Forward + backward seconds of one step of `g` under the cost model, the backward priced at
// twice the forward (its two products per contraction, as the FLOP rules count them).
double ForwardBackwardSeconds(const TrainingGraph& g, const CostModel& cost) {
  double sum = 0;
  for (double s : PredictNodeSeconds(g, cost)) sum += s;
  return 3 * sum;
}

// PlanMicroBatched, or with `smallest` the plan that fits the smallest budget at each k tried.
// `whole` (not with `smallest`): MakePlan's plan of the whole batch under `options`, already
// made by the caller, taken as the plan at k = 1 instead of planning it again.
// With `whole_cannot_fit` (not with `smallest`), the caller knows that no plan of the whole
// batch fits: k = 1 is never planned, and when no k fits the answer is the largest k's.
Plan MicroBatched(const GraphAtBatch& graph_at_batch, int64_t batch, const CostModel& cost,
                  const PlanOptions& options, int64_t micro_batches, bool smallest,
                  const Plan* whole = nullptr, bool whole_cannot_fit = false) {
  auto start = std::chrono::steady_clock::now();
  if (batch <= 0) throw MemplanError("batch must be positive");
  if (micro_batches > 0 && batch % micro_batches != 0) {
    throw MemplanError("--micro-batches " + std::to_string(micro_batches) +
                       " does not divide the batch of " + std::to_string(batch) +
                       ": use a divisor of the batch");
  }
  const bool is_auto = planner::IsAutoStrategy(options.strategy);
  int64_t baseline = 0;
  int64_t whole_lower_bound = 0;
  double whole_step_seconds = -1;
  auto plan_at = [&](int64_t k) {
    TrainingGraph micro = graph_at_batch(batch / k);
    micro.grads = SteppedGradients(micro.grads, 1, k);
    // The whole batch's peak, lower bound and step seconds, from one load of its graph (none
    // at k = 1).
    if (baseline == 0 || (k > 1 && whole_step_seconds < 0)) {
      const TrainingGraph whole = k == 1 ? micro : graph_at_batch(batch);
      if (baseline == 0) {
        baseline = Simulate(BuildTrainingSchedule(whole), options.simulator).peak_bytes;
        whole_lower_bound = PeakLowerBound(whole);
      }
      whole_step_seconds = ForwardBackwardSeconds(whole, cost);
    }
    // The other micro-batches' inputs stay resident through the step (ApplyMicroBatches): the
    // micro-batch's plan gets the budget they leave.
    PlanOptions o = options;
    int64_t rest = 0;
    if (options.budget_bytes > 0 && k > 1 &&
        !__builtin_mul_overflow(k - 1, micro.input_bytes(), &rest)) {
      o.budget_bytes = std::max<int64_t>(1, options.budget_bytes - rest);
    }
    Plan p;
    if (smallest) {
      p = SmallestPeakPlan(micro, cost, o);
    } else {
      p = k == 1 && whole ? *whole : MakePlan(micro, cost, o);
      // `auto` without a fitting plan at this k: the smallest peak tells whether a larger k
      // helps. A named strategy keeps its own answer: it is never replaced by another's.
      if (!p.feasible && options.budget_bytes > 0 && is_auto) p = SmallestPeakPlan(micro, cost, o);
    }
    p.budget_bytes = options.budget_bytes;
    ApplyMicroBatches(p, micro, k, options.simulator);
    p.baseline_peak_bytes = baseline;
    if (k > 1)
      p.predicted_micro_batch_seconds =
          std::max(0.0, k * ForwardBackwardSeconds(micro, cost) - whole_step_seconds);
    return p;
  };
  Plan best;
  if (micro_batches > 0) {
    best = plan_at(micro_batches);
  } else if (smallest) {
    // A smaller micro-batch never needs more memory: the largest k reaches the least, unless
    // splitting changes nothing (then k = 1, which costs nothing). The whole batch is planned
    // only when its lower bound leaves it a chance.
    const std::vector<int64_t> ks = Divisors(batch);
    if (ks.size() == 1) {
      best = plan_at(ks.front());
    } else {
      best = plan_at(ks.back());  // loads the whole batch's graph too: its lower bound is known
      const int64_t least = best.predicted_peak_bytes + best.margin_bytes;
      if (least >= whole_lower_bound) {
        Plan whole = plan_at(ks.front());
        if (whole.predicted_peak_bytes + whole.margin_bytes <= least) best = std::move(whole);
      }
    }
  } else {
    // A smaller micro-batch never needs more memory, so feasibility is monotone in k: try
    // k = 1, then the largest k, then bisect the divisors between them for the smallest k
    // that fits. At most 2 + log2(#divisors) plans (a 64-bit batch has < 110,000 divisors).
    const std::vector<int64_t> ks = Divisors(batch);
    whole_cannot_fit = whole_cannot_fit && ks.size() > 1;
    if (!whole_cannot_fit) best = plan_at(ks.front());
    if ((whole_cannot_fit || !best.feasible) && ks.size() > 1) {
      Plan last = plan_at(ks.back());
      if (!last.feasible) {
        if (whole_cannot_fit || last.predicted_peak_bytes < best.predicted_peak_bytes)
          best = std::move(last);
      } else {
        size_t lo = 0, hi = ks.size() - 1;  // ks[lo] does not fit, ks[hi] fits
        best = std::move(last);
        while (hi - lo > 1) {
          size_t mid = lo + (hi - lo) / 2;
          Plan p = plan_at(ks[mid]);
          if (p.feasible) {
            hi = mid;
            best = std::move(p);
          } else {
            lo = mid;
          }
        }
      }
    }
  }
  best.solve_seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return best;
}

}  // namespace

Plan PlanMicroBatched(const GraphAtBatch& graph_at_batch, int64_t batch, const CostModel& cost,
                      const PlanOptions& options, int64_t micro_batches) {
  return MicroBatched(graph_at_batch, batch, cost, options, micro_batches, /*smallest=*/false);
}

Plan planner::PlanMicroBatchedAfter(const GraphAtBatch& graph_at_batch, int64_t batch,
                                    const CostModel& cost, const PlanOptions& options,
                                    const Plan& whole) {
  return MicroBatched(graph_at_batch, batch, cost, options, 0, /*smallest=*/false, &whole);
}

Plan planner::PlanMicroBatchedBeyondWhole(const GraphAtBatch& graph_at_batch, int64_t batch,
                                          const CostModel& cost, const PlanOptions& options) {
  return MicroBatched(graph_at_batch, batch, cost, options, 0, /*smallest=*/false, nullptr,
                      /*whole_cannot_fit=*/true);
}

int64_t PeakLowerBound(const TrainingGraph& g) {
  int64_t persistent = 0;
  for (const Tensor& t : g.tensors)
    if (t.is_persistent() && !t.is_view()) persistent += t.bytes;
  persistent += g.library_workspace_bytes;  // allocated at setup, kept
  int64_t working = 0;
  std::vector<TensorId> storages;
  for (const Node& n : g.nodes) {
    storages.clear();
    for (const std::vector<TensorId>* side : {&n.inputs, &n.outputs}) {
      for (TensorId t : *side) {
        // Values known at analysis time may never be materialised.
        if (t == kNone || g.tensors[t].value) continue;
        const TensorId root = g.tensors[t].storage;
        if (!g.tensors[root].is_persistent()) storages.push_back(root);
      }
    }
    std::sort(storages.begin(), storages.end());
    storages.erase(std::unique(storages.begin(), storages.end()), storages.end());
    int64_t bytes = n.forward_workspace_bytes;
    for (TensorId t : storages) bytes += g.tensors[t].bytes;
    working = std::max(working, bytes);
  }
  return persistent + working;
}

Plan SmallestPeakMicroBatched(const GraphAtBatch& graph_at_batch, int64_t batch,
                              const CostModel& cost, const PlanOptions& options,
                              int64_t micro_batches) {
  return MicroBatched(graph_at_batch, batch, cost, options, micro_batches, /*smallest=*/true);
}

}  // namespace memplan
