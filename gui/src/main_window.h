// The dashboard window: a summary first, then the memory timeline, tensor lifetimes, the
// plan explorer and compare mode, each a tab; files open in a worker thread and failures
// show in a banner at the top.
#pragma once

#include <QMainWindow>
#include <QStringList>
#include <memory>
#include <vector>

#include "loader.h"
#include "plan_worker.h"

class QAbstractItemModel;
class QCheckBox;
class QChartView;
class QComboBox;
class QLabel;
class QPushButton;
class QSlider;
class QSortFilterProxyModel;
class QSpinBox;
class QTabWidget;
class QTableView;

namespace memplan::gui {

class LifetimeView;
class TableModel;
class TimelineChart;

class MainWindow : public QMainWindow {
  Q_OBJECT
 public:
  explicit MainWindow(QWidget* parent = nullptr);
  ~MainWindow() override;

  void setModelOptions(const ModelOptions& options);
  const ModelOptions& modelOptions() const { return options_; }
  void openFiles(const QStringList& paths);
  // Processes events until every load and re-plan finished; true when idle in time.
  bool waitForIdle(int timeout_ms);

  static QStringList pageNames();  // summary, timeline, lifetimes, plan, compare
  bool setPage(const QString& name);
  QString currentPageName() const;
  QWidget* page(const QString& name) const;

  // PNG, or SVG when the path ends in .svg (and this build has Qt Svg).
  bool exportWidget(QWidget* w, const QString& path, QString* error) const;
  bool exportPage(const QString& page, const QString& path, QString* error);

  QStringList errors() const;
  QString bannerText() const;
  bool bannerShown() const;

  std::vector<ItemPtr> items() const;
  TimelineChart* timelineChart() const { return timeline_chart_; }
  TimelineChart* planChart() const { return plan_chart_; }
  TimelineChart* compareChart() const { return compare_chart_; }
  LifetimeView* lifetimeView() const { return lifetime_view_; }
  QList<QAbstractItemModel*> itemModels() const;
  // What a click on the timeline does: list the tensors alive at `step`.
  void selectStep(int64_t step);
  // The plan explorer's controls (tests drive them).
  void requestPlan(int64_t budget_bytes, const QString& strategy);

 signals:
  void itemsChanged();

 private:
  void buildSummaryPage();
  void buildTimelinePage();
  void buildLifetimesPage();
  void buildPlanPage();
  void buildComparePage();
  void onLoaded(int slot, ItemPtr item);
  void onFailed(int slot, const QString& path, const QString& message);
  void showError(const QString& message);
  void refreshAll();
  void refreshSummary();
  void refreshTimeline();
  void refreshLifetimes();
  void refreshPlan();
  void refreshCompare();
  void refreshFiles();
  void reanalyze();
  void openDialog();
  void exportDialog(bool svg);
  void onPlanned(ItemPtr item);
  void savePlan();
  void scheduleReplan();

  ItemPtr baseItem() const;   // the latest model or analysis
  ItemPtr planItem() const;   // the explorer's plan, else the latest plan file
  ItemPtr runItem() const;    // the latest run
  std::vector<ItemPtr> timelineItems() const;  // items with a timeline, in the combo's order
  ItemPtr selectedTimelineItem() const;

  ModelOptions options_;
  Loader* loader_ = nullptr;
  PlanWorker* plan_worker_ = nullptr;
  QStringList paths_;
  std::vector<ItemPtr> slots_;  // per opened path; null while loading or after a failure
  std::vector<QString> slot_errors_;
  QStringList errors_;
  ItemPtr explorer_plan_;

  QTabWidget* tabs_ = nullptr;
  QWidget* banner_ = nullptr;
  QLabel* banner_label_ = nullptr;
  QSpinBox* batch_spin_ = nullptr;
  QComboBox* optimizer_combo_ = nullptr;

  // Summary.
  QLabel* headline_ = nullptr;
  TableModel* summary_model_ = nullptr;
  TableModel* breakdown_model_ = nullptr;
  TableModel* files_model_ = nullptr;
  QChartView* breakdown_chart_ = nullptr;

  // Timeline.
  QComboBox* timeline_combo_ = nullptr;
  TimelineChart* timeline_chart_ = nullptr;
  QLabel* alive_label_ = nullptr;
  TableModel* alive_model_ = nullptr;
  QSortFilterProxyModel* alive_proxy_ = nullptr;
  QLabel* range_label_ = nullptr;

  // Lifetimes.
  LifetimeView* lifetime_view_ = nullptr;
  QSpinBox* lifetime_count_ = nullptr;
  QCheckBox* lifetime_persistent_ = nullptr;

  // Plan explorer.
  QComboBox* strategy_combo_ = nullptr;
  QSlider* budget_slider_ = nullptr;
  QLabel* budget_label_ = nullptr;
  QLabel* plan_status_ = nullptr;
  QPushButton* save_plan_ = nullptr;
  TimelineChart* plan_chart_ = nullptr;
  QChartView* pareto_chart_ = nullptr;
  TableModel* strategies_model_ = nullptr;

  // Compare.
  QComboBox* compare_a_ = nullptr;
  QComboBox* compare_b_ = nullptr;
  TimelineChart* compare_chart_ = nullptr;
  TableModel* compare_model_ = nullptr;
  TableModel* kept_model_ = nullptr;

  bool refreshing_ = false;
  int64_t selected_step_ = -1;
  int64_t requested_budget_ = -1;  // the budget asked for, until the slider moves
};

}  // namespace memplan::gui
