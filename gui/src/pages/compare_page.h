// Compare mode: two items' timelines overlaid, their quantities side by side, and the
// checkpoints each plan keeps. Two profiles: their measured memory against time, step time,
// peak and per-phase time side by side, and the time of every node in each. A profile beside
// a plan or analysis: its memory on the other's predicted steps.
#pragma once

#include <QWidget>

#include "loader.h"

class QComboBox;
class QSortFilterProxyModel;
class QStackedWidget;

namespace memplan::gui {

class CompareModel;
class DocumentSet;
class KeptModel;
class NodeTimeDiffModel;
class ProfileMemoryChart;
class TimelineChart;

class ComparePage : public QWidget {
  Q_OBJECT
 public:
  explicit ComparePage(const DocumentSet& docs, QWidget* parent = nullptr);
  // Follows the open items; A and B default to the first two.
  void refresh();

  TimelineChart* chart() const { return compare_chart_; }
  ProfileMemoryChart* profileChart() const { return profile_chart_; }
  // The chart on show (what "Export" writes): the profiles' chart when A and B are profiles.
  QWidget* shownChart() const;
  CompareModel* compareModel() const { return compare_model_; }
  KeptModel* keptModel() const { return kept_model_; }
  NodeTimeDiffModel* nodeTimeModel() const { return node_time_model_; }
  QSortFilterProxyModel* nodeTimeProxy() const { return node_time_proxy_; }
  // Chooses A and B by their labels (ItemLabel), as if the user had.
  void choose(const QString& a, const QString& b);

 private:
  void showSelected();

  const DocumentSet& docs_;
  QComboBox* compare_a_ = nullptr;
  QComboBox* compare_b_ = nullptr;
  QStackedWidget* chart_stack_ = nullptr;
  TimelineChart* compare_chart_ = nullptr;
  ProfileMemoryChart* profile_chart_ = nullptr;
  CompareModel* compare_model_ = nullptr;
  QStackedWidget* table_stack_ = nullptr;
  KeptModel* kept_model_ = nullptr;
  NodeTimeDiffModel* node_time_model_ = nullptr;
  QSortFilterProxyModel* node_time_proxy_ = nullptr;
  bool refreshing_ = false;
};

}  // namespace memplan::gui
