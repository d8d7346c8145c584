#include "plan_worker.h"

#include <QCoreApplication>
#include <QDeadlineTimer>
#include <QFutureWatcher>
#include <QThread>
#include <QtConcurrent/QtConcurrentRun>
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <sstream>

#ifdef MEMPLAN_GUI_HAVE_PLANNER
#include <nlohmann/json.hpp>

#include "cli_util.h"
#include "memplan/cuda_device.h"
#include "memplan/plan_report.h"
#include "memplan/planner.h"
#endif

namespace memplan::gui {

namespace {
struct PlanResult {
  ItemPtr item;
  QString error;
};
}  // namespace

#ifdef MEMPLAN_GUI_HAVE_PLANNER
namespace {

constexpr const char* kSelective = "selective";

std::mutex sweep_mutex;
// Sweeps are slow and do not depend on the budget: one per (analysis, strategy).
std::map<std::pair<const Analysis*, std::string>, std::vector<ParetoPoint>> sweep_cache;

// An offload plan's fields (plan.h) as the plan has them, and the link's occupancy: the copies
// of the planner's stream replay (SimulateStreams over ScheduleStepSeconds at the cost model's
// seconds) on `t`'s steps.
void ReadOffload(const Plan& p, const TrainingGraph& g, const CostModel& cost, Item& item,
                 TimelineData& t) {
  if (p.offloaded.empty() && p.strategy != "offload") return;
  item.offload = true;
  item.offloaded.clear();
  for (const OffloadChoice& c : p.offloaded) item.offloaded.push_back(g.tensors[c.tensor].name);
  item.offloaded_bytes = 0;
  for (const Buffer& b : p.schedule.buffers)
    if (b.host) item.offloaded_bytes += b.bytes;
  item.predicted_host_peak_bytes = p.predicted_host_peak_bytes;
  item.host_budget_bytes = p.host_budget_bytes;
  item.predicted_stall_seconds = p.predicted_stall_seconds;
  item.device_to_host_bytes_per_second = p.link.device_to_host_bytes_per_second;
  item.host_to_device_bytes_per_second = p.link.host_to_device_bytes_per_second;
  if (p.offloaded.empty()) return;
  const StreamTimeline streams = SimulateStreams(
      p.schedule, ScheduleStepSeconds(PredictNodeSeconds(g, cost), p.schedule), p.link);
  t.copies = LinkOccupancy(g, p.schedule, streams);
}

// `g`: the graph the plan's schedule runs (the model at the plan's micro-batch size); `a`: the
// analysis of the whole batch.
Item ItemFromPlan(const Plan& p, const TrainingGraph& g, const std::shared_ptr<const Analysis>& a,
                  const std::string& model_path, const std::optional<CudaDevice>& cuda,
                  const CostModel& cost) {
  Item item;
  item.kind = SourceKind::kPlan;
  item.path = model_path;
  item.title = "explorer";
  item.model = g.model_path.empty() ? model_path : g.model_path;
  item.batch = p.batch * p.micro_batches * p.layout.devices;
  item.optimizer = OptimizerName(g.optimizer);
  item.num_nodes = static_cast<int64_t>(g.nodes.size());
  item.param_bytes = g.param_bytes();
  item.forward_flops = p.forward_flops;
  item.baseline_peak_bytes = p.baseline_peak_bytes;
  item.peak_event = p.schedule.StepLabel(g, p.timeline.peak_step);
  item.strategy = p.strategy;
  item.budget_bytes = p.budget_bytes;
  item.plan_peak_bytes = p.predicted_peak_bytes;
  item.recompute_flops = p.recompute_flops;
  item.overhead = p.overhead();
  item.feasible = p.feasible ? 1 : 0;
  item.solve_seconds = p.solve_seconds;
  item.predicted_recompute_seconds = p.predicted_recompute_seconds;
  item.loss = LossKindName(g.loss_kind);
  item.micro_batches = p.micro_batches;
  item.structure_fingerprint = StructureFingerprint(g);
  if (!p.budget_of.empty()) {
    item.budget_of = p.budget_of;
    item.predicted_reserved_peak_bytes = p.predicted_reserved_peak_bytes;
  }
  if (p.layout.devices > 1) {
    item.devices = p.layout.devices;
    item.shard = ShardModeName(p.layout.shard);
    item.bucket_count = static_cast<int64_t>(ParameterBuckets(g, p.layout).size());
    item.predicted_comm_seconds = p.predicted_comm_seconds;
  }
  for (TensorId t : p.checkpoints) item.checkpoints.push_back(g.tensors[t].name);
  for (TensorId t : p.recomputed) item.recomputed.push_back(g.tensors[t].name);
  item.recomputed_ids = p.recomputed;
  if (!p.recomputed.empty() || p.strategy == kSelective)
    item.storages = SelectiveStorages(g, p.schedule, p.recomputed);
  item.num_sections = p.num_sections();
  item.has_breakdown = true;
  item.breakdown = p.timeline.breakdown_at_peak;
  item.notes = p.notes;
  for (TensorId t : a->bottlenecks) item.bottlenecks.push_back(g.tensors[t].name);
  auto timeline = std::make_shared<TimelineData>(
      TimelineFromSchedule(g, p.schedule, p.timeline, "plan " + p.strategy));
  ReadOffload(p, g, cost, item, *timeline);
  if (cuda) {
    // The reserved bytes per step, as PredictDeviceMemory replays the plan's schedule.
    const ReservedTimeline r = SimulateReserved(p.schedule, cuda->allocator());
    timeline->reserved = r.reserved_during;
    timeline->reserved_peak_bytes = r.reserved_peak_bytes;
  }
  item.timeline = std::move(timeline);
  if (cuda) {
    const DeviceMemory m = PredictDeviceMemory(p.schedule, *cuda);
    item.predicted_for = cuda->device;
    item.allocator_mode = m.allocator_mode;
    item.workspace_bytes = m.workspace_bytes;
    item.context_bytes = m.context_bytes;
  }
  item.schedule = std::make_shared<Schedule>(p.schedule);
  item.bottleneck_ids = a->bottlenecks;
  item.checkpoint_ids = p.checkpoints;
  item.analysis = a;
  item.plan_json = PlanToJson(p, g).dump(2, ' ', false, nlohmann::json::error_handler_t::replace);
  return item;
}

bool OffersStrategy(const std::string& name) {
  const std::vector<std::string>& names = StrategyNames();
  return std::find(names.begin(), names.end(), name) != names.end();
}

// One strategy's sweep of budgets (SweepBudgets), each point labelled with that strategy as
// its series. Cached: sweeps are slow and do not depend on the budget.
std::vector<ParetoPoint> CachedSweep(const std::shared_ptr<const Analysis>& analysis,
                                     const TrainingGraph& g, const CostModel& cost,
                                     PlanOptions options, const std::string& strategy,
                                     int64_t host_budget = 0) {
  // Offload's sweep depends on the host budget asked for too (0: the default).
  auto key = std::make_pair(analysis.get(), strategy == "offload" || options.auto_offload
                                                ? strategy + "@" + std::to_string(host_budget)
                                                : strategy);
  {
    std::lock_guard<std::mutex> lock(sweep_mutex);
    auto it = sweep_cache.find(key);
    if (it != sweep_cache.end()) return it->second;
  }
  options.strategy = strategy;
  std::vector<ParetoPoint> points = ParetoPoints(SweepBudgets(g, cost, options), strategy);
  std::lock_guard<std::mutex> lock(sweep_mutex);
  sweep_cache[key] = points;
  return points;
}

}  // namespace

bool PlannerAvailable() { return true; }

QStringList PlannerStrategies() {
  QStringList out;
  for (const std::string& s : StrategyNames()) {
    if (s == "manual") continue;  // needs tensor names: the command line's --checkpoints
    if (s == "milp" && !MilpAvailable()) continue;
    out << QString::fromStdString(s);
  }
  return out;
}

namespace {
CostModel CostOf(const PlanRequest& r) {
  CostModel cost;
  if (!r.machine_rates.empty()) {
    cost.node_seconds =
        RooflineNodeSeconds(MachineRatesFromJson(nlohmann::json::parse(r.machine_rates)));
  }
  return cost;
}
}  // namespace

std::vector<ParetoPoint> SweepSeries(const PlanRequest& r, const std::string& strategy) {
  if (!r.analysis) throw MemplanError("no model to sweep: open a model (.onnx) first");
  return CachedSweep(r.analysis, r.analysis->graph, CostOf(r), PlanOptions{}, strategy);
}

Item MakePlanItem(const PlanRequest& r) {
  if (!r.analysis) throw MemplanError("no model to plan for: open a model (.onnx) first");
  const TrainingGraph& g = r.analysis->graph;
  const CostModel cost = CostOf(r);
  std::optional<CudaDevice> cuda;
  if (!r.device.empty()) cuda = DeviceFor({.device = r.device, .allocator_mode = r.allocator_mode});
  // The analysis graph carries the device's workspaces; estimated cuDNN ones keep a margin.
  if (cuda) cuda->conv_margin_bytes = ConvWorkspaceMargins(g, *cuda);
  // The command line's entry point, so that a budget gets the same plan here as from
  // `memplan plan` (micro-batches included when checkpointing alone does not fit).
  BudgetPlanOptions request;
  request.budget.bytes = r.budget_bytes;
  request.plan.strategy = r.strategy;
  request.search_smallest = false;  // a slider move re-plans: only the plan is shown
  request.cuda = cuda;  // on a GPU the budget bounds reserved memory, as on the command line
  // Offload, as `memplan plan` sets it: the link of the device, and the host budget (a given one
  // also lets `auto` try offload).
  request.plan.link = DefaultLinkRates(cuda ? "cuda" : "cpu");
  request.plan.host_budget_bytes =
      r.host_budget_bytes > 0 ? r.host_budget_bytes : cli::DefaultHostBudget();
  request.plan.auto_offload = r.host_budget_bytes > 0;
  const GraphAtBatch graph_at_batch = [&](int64_t batch) {
    LoadOptions o;
    o.batch = batch;
    o.optimizer = g.optimizer;
    o.loss = g.loss_kind;
    o.grads = g.grads;
    TrainingGraph at = LoadTrainingGraph(r.model_path, o);
    if (cuda) PrepareGraphForCuda(at, *cuda);
    return at;
  };
  const Plan plan = PlanForBudget(g, graph_at_batch, cost, request).plan;
  Item item = plan.batch == g.batch ? ItemFromPlan(plan, g, r.analysis, r.model_path, cuda, cost)
                                    : ItemFromPlan(plan, graph_at_batch(plan.batch), r.analysis,
                                                   r.model_path, cuda, cost);
  if (!r.sweep) return item;
  PlanOptions options = request.plan;
  options.budget_bytes = r.budget_bytes;
  // Every strategy at this budget, for the comparison table (milp only when asked: slow).
  for (const std::string& s : StrategyNames()) {
    if (s == "auto" || s == "manual" || (s == "milp" && r.strategy != "milp")) continue;
    PlanOptions o = options;
    o.strategy = s;
    try {
      Plan p = MakePlan(g, cost, o);
      StrategyRow row;
      row.strategy = s;
      row.peak_bytes = p.predicted_peak_bytes;
      row.overhead = p.overhead();
      row.checkpoints = static_cast<int64_t>(p.checkpoints.size());
      row.sections = p.num_sections();
      row.feasible = p.feasible;
      row.solve_seconds = p.solve_seconds;
      row.recomputed = static_cast<int64_t>(p.recomputed.size());
      row.recompute_seconds = p.predicted_recompute_seconds;
      item.strategies.push_back(row);
    } catch (const MemplanError&) {
      // A strategy that cannot plan this graph is left out of the table.
    }
  }
  // The Pareto curve: the chosen strategy's sweep and, when the planner offers it and it was
  // not the one chosen, `selective`'s as a series of its own.
  item.sweep = CachedSweep(r.analysis, g, cost, options, r.strategy, r.host_budget_bytes);
  if (r.strategy != kSelective && OffersStrategy(kSelective)) {
    std::vector<ParetoPoint> selective =
        CachedSweep(r.analysis, g, cost, options, kSelective, r.host_budget_bytes);
    item.sweep.insert(item.sweep.end(), selective.begin(), selective.end());
  }
  return item;
}

void SavePlanJson(const Item& plan, const std::string& path) {
  if (plan.plan_json.empty())
    throw MemplanError("this plan was not made here; it is already a file");
  WriteFileAtomically(path, plan.plan_json + "\n");
}

namespace {

std::string ReadText(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw MemplanError(path + ": cannot open the file");
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// The model a plan names: as written (relative to the working directory), else beside the plan.
std::string PlanModelPath(const std::string& plan_path, const std::string& model,
                          const std::vector<std::string>& opened_models) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (fs::is_regular_file(model, ec)) return model;
  const fs::path dir = fs::path(plan_path).parent_path();
  for (const fs::path& candidate : {dir / model, dir / fs::path(model).filename()}) {
    if (fs::path(model).is_absolute() && candidate == dir / model) continue;
    if (fs::is_regular_file(candidate, ec)) return candidate.string();
  }
  // PlanFromJson checks the fingerprint: a model of the same name but another structure is
  // refused there, with its reason.
  for (const std::string& m : opened_models) {
    if (fs::path(m).filename() == fs::path(model).filename() && fs::is_regular_file(m, ec))
      return m;
  }
  throw MemplanError("its model '" + model +
                     "' is not there (nor beside the plan); open the model too to see its tensors");
}

}  // namespace

Item WithPlanSchedule(const std::string& path, Item file,
                      const std::vector<std::string>& opened_models, const ModelOptions& device) {
  if (file.kind != SourceKind::kPlan || file.schedule) return file;
  // A plan without its model's name (PlanReport's "model"): only its numbers and timeline.
  if (file.model.empty()) return file;
  try {
    const nlohmann::json j = nlohmann::json::parse(ReadText(path));
    // As `memplan run --plan` loads the model: the plan's micro-batch, optimizer, grads and loss.
    const LoadOptions o = LoadOptionsForPlan(j, LoadOptions{});
    TrainingGraph g = LoadTrainingGraph(PlanModelPath(path, file.model, opened_models), o);
    std::optional<CudaDevice> cuda;
    if (!device.device.empty()) {
      cuda = DeviceFor(device);
      PrepareGraphForCuda(g, *cuda);
      cuda->conv_margin_bytes = ConvWorkspaceMargins(g, *cuda);
    }
    const Plan p = PlanFromJson(j, g);
    file.schedule = std::make_shared<Schedule>(p.schedule);
    auto timeline = std::make_shared<TimelineData>(
        TimelineFromSchedule(g, p.schedule, p.timeline, "plan " + p.strategy));
    // The link's occupancy at the rates the plan's seconds were predicted with.
    CostModel cost;
    if (j.contains("time_model") && j["time_model"].contains("rates"))
      cost.node_seconds = RooflineNodeSeconds(MachineRatesFromJson(j["time_model"]["rates"]));
    const double file_stall = file.predicted_stall_seconds;
    ReadOffload(p, g, cost, file, *timeline);
    if (file_stall >= 0) file.predicted_stall_seconds = file_stall;  // the file's numbers stay
    if (cuda) {
      const ReservedTimeline r = SimulateReserved(p.schedule, cuda->allocator());
      timeline->reserved = r.reserved_during;
      timeline->reserved_peak_bytes = r.reserved_peak_bytes;
    }
    file.timeline = std::move(timeline);
    file.bottleneck_ids = FindBottlenecks(g);
    file.checkpoint_ids = p.checkpoints;
    file.recomputed_ids = p.recomputed;
    file.recomputed.clear();
    for (TensorId t : p.recomputed) file.recomputed.push_back(g.tensors[t].name);
    if (!p.recomputed.empty() || p.strategy == kSelective)
      file.storages = SelectiveStorages(g, p.schedule, p.recomputed);
    if (file.plan_peak_bytes >= 0 && p.predicted_peak_bytes != file.plan_peak_bytes) {
      file.notes.push_back("replayed on its model, the plan peaks at " +
                           BytesText(p.predicted_peak_bytes) + ", not the file's " +
                           BytesText(file.plan_peak_bytes) + " (the timeline is the replay's)");
    }
  } catch (const std::exception& e) {
    file.notes.push_back(std::string("the plan's tensors are not shown: ") + e.what());
  }
  return file;
}

#else
bool PlannerAvailable() { return false; }
Item WithPlanSchedule(const std::string&, Item file, const std::vector<std::string>&,
                      const ModelOptions&) {
  return file;
}
QStringList PlannerStrategies() { return {}; }
std::vector<ParetoPoint> SweepSeries(const PlanRequest&, const std::string&) {
  throw MemplanError(
      "sweeping needs the planner library, which this build of memplan does not have");
}
Item MakePlanItem(const PlanRequest&) {
  throw MemplanError(
      "re-planning needs the planner library, which this build of memplan does not have");
}
void SavePlanJson(const Item&, const std::string&) {
  throw MemplanError(
      "saving a plan needs the planner library, which this build of memplan does not have");
}
#endif

PlanWorker::PlanWorker(QObject* parent) : QObject(parent) { qRegisterMetaType<ItemPtr>(); }

void PlanWorker::request(PlanRequest r) {
  if (busy_) {
    next_ = std::move(r);
    return;
  }
  start(std::move(r));
}

void PlanWorker::start(PlanRequest r) {
  busy_ = true;
  auto* watcher = new QFutureWatcher<PlanResult>(this);
  connect(watcher, &QFutureWatcher<PlanResult>::finished, this, [this, watcher] {
    PlanResult res = watcher->result();
    watcher->deleteLater();
    busy_ = false;
    if (next_) {
      PlanRequest n = std::move(*next_);
      next_.reset();
      start(std::move(n));  // a newer request supersedes this result
      return;
    }
    if (res.item)
      emit planned(res.item);
    else
      emit failed(res.error);
  });
  watcher->setFuture(QtConcurrent::run([r = std::move(r)]() -> PlanResult {
    try {
      return {std::make_shared<const Item>(MakePlanItem(r)), {}};
    } catch (const std::exception& e) {
      return {nullptr, QString::fromStdString(e.what())};
    } catch (...) {
      return {nullptr, QStringLiteral("the planner failed")};
    }
  }));
}

bool PlanWorker::waitForIdle(int timeout_ms) {
  QDeadlineTimer deadline(timeout_ms);
  while (busy_ && !deadline.hasExpired()) {
    QCoreApplication::processEvents(QEventLoop::AllEvents, 50);
    if (busy_) QThread::msleep(5);
  }
  return !busy_;
}

}  // namespace memplan::gui
