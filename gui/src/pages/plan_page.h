// The plan explorer: a strategy and a budget slider that re-plan the model in a worker, the
// plan's timeline against the unplanned one, the Pareto curve of a sweep, and every
// strategy's plan at the budget.
#pragma once

#include <QWidget>
#include <cstdint>

#include "loader.h"
#include "plan_worker.h"

class QChartView;
class QComboBox;
class QLabel;
class QLineEdit;
class QProgressBar;
class QPushButton;
class QSlider;

namespace memplan::gui {

class DocumentSet;
class PlanWorker;
class StrategyModel;
class TimelineChart;

class PlanPage : public QWidget {
  Q_OBJECT
 public:
  explicit PlanPage(const DocumentSet& docs, QWidget* parent = nullptr);
  // The rates the explorer prices recompute with (PlanRequest::machine_rates).
  void setMachineRates(std::string rates) { machine_rates_ = std::move(rates); }
  void refresh();
  // Plans the model for `budget_bytes` with `strategy` in the worker; planned() follows.
  void requestPlan(int64_t budget_bytes, const QString& strategy);
  bool busy() const;
  bool waitForIdle(int timeout_ms);
  // Offload's host budget as typed (a size: "512MiB", "8GB"); empty: the machine's default, as
  // `memplan plan` computes it. Read by the command line's parser (ParseBytes).
  void setHostBudgetText(const QString& text);
  QString hostBudgetText() const;

  TimelineChart* chart() const { return plan_chart_; }
  StrategyModel* strategyModel() const { return strategies_model_; }
  // The Pareto chart: one series per sweep (the chosen strategy's; `selective`'s when the
  // planner offers it), recompute as FLOPs overhead or, with `seconds`, predicted seconds.
  QChartView* paretoChart() const { return pareto_chart_; }
  void setParetoSeconds(bool seconds);
  // The baseline the budget slider's percentages are of: the opened plan's own baseline when a
  // plan file is open, else the model's.
  int64_t sliderBaselineBytes() const;
  int sliderPercent() const;
  QString budgetText() const;
  QString statusText() const;
  // The background sweep (started when the page is shown with a model open): its points and
  // whether it runs.
  const std::vector<ParetoPoint>& sweepPoints() const { return sweep_points_; }
  bool sweeping() const { return sweeping_; }
  void startSweep();

 protected:
  void showEvent(QShowEvent* e) override;

 signals:
  void planned(memplan::gui::ItemPtr plan);
  void saved(const QString& path);
  void error(const QString& message);

 private:
  void scheduleReplan();
  void savePlan();
  void refreshPareto(const ItemPtr& plan);
  void sweepNext();
  ItemPtr planFile() const;
  PlanRequest baseRequest() const;

  const DocumentSet& docs_;
  PlanWorker* plan_worker_ = nullptr;
  QComboBox* strategy_combo_ = nullptr;
  QLineEdit* host_budget_ = nullptr;
  QSlider* budget_slider_ = nullptr;
  QLabel* budget_label_ = nullptr;
  QLabel* plan_status_ = nullptr;
  QPushButton* save_plan_ = nullptr;
  TimelineChart* plan_chart_ = nullptr;
  QChartView* pareto_chart_ = nullptr;
  QComboBox* pareto_y_ = nullptr;
  StrategyModel* strategies_model_ = nullptr;
  QProgressBar* sweep_progress_ = nullptr;
  QLabel* sweep_label_ = nullptr;
  int64_t requested_budget_ = -1;  // the budget asked for, until the slider moves
  std::string machine_rates_;      // the time model's rates (PlanRequest::machine_rates)
  // The background sweep: the analysis it is of, the series still to sweep, the points so far.
  const Analysis* sweep_for_ = nullptr;
  std::vector<std::string> sweep_todo_;
  std::vector<ParetoPoint> sweep_points_;
  bool sweeping_ = false;
  int sweep_total_ = 0;
  bool auto_planned_ = false;  // the explorer planned once by itself for the open model
  const Analysis* auto_planned_for_ = nullptr;
};

}  // namespace memplan::gui
