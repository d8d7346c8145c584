// The plan explorer: a strategy and a budget slider that re-plan the model in a worker, the
// plan's timeline against the unplanned one, the Pareto curve of a sweep, and every
// strategy's plan at the budget.
#pragma once

#include <QWidget>
#include <cstdint>

#include "loader.h"

class QChartView;
class QComboBox;
class QLabel;
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

  TimelineChart* chart() const { return plan_chart_; }
  StrategyModel* strategyModel() const { return strategies_model_; }
  // The Pareto chart: one series per sweep (the chosen strategy's; `selective`'s when the
  // planner offers it), recompute as FLOPs overhead or, with `seconds`, predicted seconds.
  QChartView* paretoChart() const { return pareto_chart_; }
  void setParetoSeconds(bool seconds);

 signals:
  void planned(memplan::gui::ItemPtr plan);
  void saved(const QString& path);
  void error(const QString& message);

 private:
  void scheduleReplan();
  void savePlan();
  void refreshPareto(const ItemPtr& plan);

  const DocumentSet& docs_;
  PlanWorker* plan_worker_ = nullptr;
  QComboBox* strategy_combo_ = nullptr;
  QSlider* budget_slider_ = nullptr;
  QLabel* budget_label_ = nullptr;
  QLabel* plan_status_ = nullptr;
  QPushButton* save_plan_ = nullptr;
  TimelineChart* plan_chart_ = nullptr;
  QChartView* pareto_chart_ = nullptr;
  QComboBox* pareto_y_ = nullptr;
  StrategyModel* strategies_model_ = nullptr;
  int64_t requested_budget_ = -1;
  std::string machine_rates_;  // the time model's rates (PlanRequest::machine_rates)  // the budget
                               // asked for, until the slider moves
};

}  // namespace memplan::gui
