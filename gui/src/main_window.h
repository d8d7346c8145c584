// The dashboard window: assembles the pages (summary, timeline, time, lifetimes, plan
// explorer, compare: gui/src/pages/), the toolbar and the open documents. Files open in a worker
// thread and failures show in a banner at the top.
#pragma once

#include <QMainWindow>
#include <QStringList>
#include <map>
#include <memory>
#include <set>
#include <vector>

#include "document_set.h"
#include "loader.h"

class QAbstractItemModel;
class QComboBox;
class QLabel;
class QSpinBox;
class QTabWidget;

namespace memplan::gui {

class ComparePage;
class LifetimeView;
class LifetimesPage;
class PlanPage;
class SummaryPage;
class TimelineChart;
class TimelinePage;
class TimePage;

class MainWindow : public QMainWindow {
  Q_OBJECT
 public:
  explicit MainWindow(QWidget* parent = nullptr);
  ~MainWindow() override;

  // The window's training settings, as chosen (the command line's --batch, a test): files
  // opened later with other settings are marked, not followed. Without a choice the window
  // takes the settings of the first opened file that records them (plan, run, profile,
  // analysis) and analyses its models with them.
  void setModelOptions(const ModelOptions& options, bool chosen = true);
  // The time model's rates for re-planning (PlanRequest::machine_rates).
  void setMachineRates(const std::string& rates);
  // The batch models open at. Once a file is open, the batch box shows its batch (of the
  // item the summary describes) and models opened next use it too.
  const ModelOptions& modelOptions() const { return options_; }
  int batchBoxValue() const;
  QString optimizerBoxText() const;
  QString settingsSource() const { return docs_.settingsSource(); }
  // The summary's headline, as shown.
  QString summaryHeadline() const;
  // The opened files' rows (the summary's "Opened files").
  std::vector<FileRow> fileRows() const { return docs_.fileRows(); }
  void openFiles(const QStringList& paths);
  // Processes events until every load and re-plan finished; true when idle in time.
  bool waitForIdle(int timeout_ms);

  static QStringList pageNames();  // summary, timeline, time, lifetimes, plan, compare
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
  TimelineChart* timelineChart() const;
  TimelineChart* planChart() const;
  TimelineChart* compareChart() const;
  LifetimeView* lifetimeView() const;
  LifetimesPage* lifetimesPage() const { return lifetimes_; }
  PlanPage* planPage() const { return plan_; }
  // Summary, breakdown, files, alive, alive (sorted view), strategies, compare, kept, node
  // time, node time (sorted view), recompute time, node time compare, node time compare
  // (sorted view), a selective plan's storages, its storages (sorted view).
  QList<QAbstractItemModel*> itemModels() const;
  TimelinePage* timelinePage() const { return timeline_; }
  TimePage* timePage() const { return time_; }
  ComparePage* comparePage() const { return compare_; }
  // What a click on the timeline does: list the tensors alive at `step`.
  void selectStep(int64_t step);
  // The plan explorer's controls (tests drive them).
  void requestPlan(int64_t budget_bytes, const QString& strategy);

 signals:
  void itemsChanged();

 private:
  void onLoaded(int slot, ItemPtr item);
  void onFailed(int slot, const QString& path, const QString& message);
  void onPlanned(ItemPtr item);
  void showError(const QString& message);
  void settle();
  void loadModel(int slot);
  void showSettings();
  void refreshAll();
  void refreshLifetimes();
  void reanalyze();
  void openDialog();
  void exportDialog(bool svg);

  ModelOptions options_;
  ModelOptions chosen_options_;  // the last chosen (command line, toolbar): the files' defaults
  bool settings_chosen_ = false;
  // Models wait until the JSON files opened with them are read, so that they are analysed
  // once, with those files' settings.
  std::set<int> json_loading_, model_loading_;
  std::vector<int> waiting_models_;
  std::map<int, ModelOptions> loaded_with_;  // per model slot, the settings of its last load
  // Per JSON slot: the device it was last read for, and the models opened beside it.
  std::map<int, std::pair<std::string, QStringList>> json_with_;
  Loader* loader_ = nullptr;
  DocumentSet docs_;
  QStringList errors_;

  QTabWidget* tabs_ = nullptr;
  QWidget* banner_ = nullptr;
  QLabel* banner_label_ = nullptr;
  QSpinBox* batch_spin_ = nullptr;
  QComboBox* optimizer_combo_ = nullptr;
  QComboBox* device_combo_ = nullptr;

  SummaryPage* summary_ = nullptr;
  TimelinePage* timeline_ = nullptr;
  TimePage* time_ = nullptr;
  LifetimesPage* lifetimes_ = nullptr;
  PlanPage* plan_ = nullptr;
  ComparePage* compare_ = nullptr;
};

}  // namespace memplan::gui
