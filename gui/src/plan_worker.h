// Re-planning off the UI thread: the plan explorer's budget slider and strategy choice ask
// the planner library (when this build has it) for a plan and get back an Item to display.
// Requests that arrive while one runs are coalesced: only the latest one runs next.
#pragma once

#include <QObject>
#include <QStringList>
#include <memory>
#include <optional>
#include <string>

#include "loader.h"

namespace memplan::gui {

struct PlanRequest {
  std::shared_ptr<const Analysis> analysis;
  std::string model_path;
  int64_t budget_bytes = 0;
  std::string strategy = "auto";
  bool sweep = false;  // also compute the Pareto curve and the per-strategy table
  // The time model's rates (MachineRatesToJson as text); empty: DefaultMachineRates("cpu").
  std::string machine_rates;
  // "" or "cuda": plan for a CUDA device as `memplan plan --device cuda` does (the budget
  // bounds the reserved peak); the analysis must then carry the library workspaces (LoadItem
  // with ModelOptions::device).
  std::string device;
  std::string allocator_mode;  // ModelOptions::allocator_mode
  // Offload: the pinned host memory a plan may hold (`memplan plan --host-budget`; a given one
  // also lets `auto` try offload); <= 0: the machine's default as the command line computes it
  // (DefaultHostBudget).
  int64_t host_budget_bytes = 0;
};

// Whether this build can re-plan (the planner library was linked in).
bool PlannerAvailable();
QStringList PlannerStrategies();
// Runs the planner; throws MemplanError. Call off the UI thread.
Item MakePlanItem(const PlanRequest& request);
// The planner's sweep of budgets for `strategy` on the request's model (SweepBudgets; its
// points labelled with the strategy as their series). Cached per (analysis, strategy): the
// plan explorer runs it in the background when it opens, and MakePlanItem's sweep reuses it.
std::vector<ParetoPoint> SweepSeries(const PlanRequest& request, const std::string& strategy);
// Writes the plan of an Item made by MakePlanItem as the planner's JSON; throws MemplanError.
void SavePlanJson(const Item& plan, const std::string& path);
// A plan file (`path`, read by the document layer into `file`) replayed on the model it names,
// as `memplan run --plan` does (PlanFromJson on the model loaded at the plan's micro-batch,
// optimizer and loss): the schedule behind its timeline, for the lifetimes and the tensors
// alive at a step, and a selective plan's kept and recomputed tensors. The file's numbers stay.
// Never throws: without the planner, the model, or with a model the plan was not made for, the
// item comes back without a schedule and a note says why. `opened_models`: models opened
// beside the plan, tried (by file name) when the plan's model is not where it says: a plan
// made on another machine names that machine's path. `device.device` "cuda": replayed as `memplan
// run` replays it on a CUDA device (with the cuBLAS workspaces), with the reserved bytes per step.
Item WithPlanSchedule(const std::string& path, Item file,
                      const std::vector<std::string>& opened_models = {},
                      const ModelOptions& device = {});

class PlanWorker : public QObject {
  Q_OBJECT
 public:
  explicit PlanWorker(QObject* parent = nullptr);
  void request(PlanRequest r);
  bool busy() const { return busy_; }
  bool waitForIdle(int timeout_ms);

 signals:
  void planned(memplan::gui::ItemPtr item);
  void failed(const QString& message);

 private:
  void start(PlanRequest r);
  bool busy_ = false;
  std::optional<PlanRequest> next_;
};

}  // namespace memplan::gui
