// The time page: a profile's measured time per node against the cost model's prediction (a
// sortable table, filterable by phase, and a chart of the slowest nodes), and the recompute
// time per segment, measured against predicted (a table and a chart).
#pragma once

#include <QWidget>

#include "loader.h"

class QChartView;
class QComboBox;
class QLabel;
class QSortFilterProxyModel;

namespace memplan::gui {

class DocumentSet;
class NodeTimeModel;
class RecomputeTimeModel;

class TimePage : public QWidget {
  Q_OBJECT
 public:
  explicit TimePage(const DocumentSet& docs, QWidget* parent = nullptr);
  // Follows the open profiles; keeps the chosen one if it is still there, else the latest.
  void refresh();
  ItemPtr selectedItem() const;
  // "" for every phase, else a phase's name.
  void setPhaseFilter(const QString& phase);

  NodeTimeModel* nodeModel() const { return node_model_; }
  QSortFilterProxyModel* nodeProxy() const { return node_proxy_; }
  RecomputeTimeModel* recomputeModel() const { return recompute_model_; }
  QChartView* nodeChart() const { return node_chart_; }
  QChartView* segmentChart() const { return segment_chart_; }
  QWidget* charts() const { return charts_; }  // what "Export" writes
  // How many of the slowest nodes the node chart shows.
  static constexpr int kChartNodes = 15;

 private:
  void showSelected();
  void refreshNodeChart();
  void refreshSegmentChart();

  const DocumentSet& docs_;
  QComboBox* combo_ = nullptr;
  QComboBox* phase_combo_ = nullptr;
  QLabel* headline_ = nullptr;
  QWidget* charts_ = nullptr;
  QChartView* node_chart_ = nullptr;
  QChartView* segment_chart_ = nullptr;
  NodeTimeModel* node_model_ = nullptr;
  QSortFilterProxyModel* node_proxy_ = nullptr;
  RecomputeTimeModel* recompute_model_ = nullptr;
  bool refreshing_ = false;
};

}  // namespace memplan::gui
