// Compare mode: two items' timelines overlaid, their quantities side by side, and the
// checkpoints each plan keeps.
#pragma once

#include <QWidget>

#include "loader.h"

class QComboBox;

namespace memplan::gui {

class CompareModel;
class DocumentSet;
class KeptModel;
class TimelineChart;

class ComparePage : public QWidget {
  Q_OBJECT
 public:
  explicit ComparePage(const DocumentSet& docs, QWidget* parent = nullptr);
  // Follows the open items; A and B default to the first two.
  void refresh();

  TimelineChart* chart() const { return compare_chart_; }
  CompareModel* compareModel() const { return compare_model_; }
  KeptModel* keptModel() const { return kept_model_; }

 private:
  void showSelected();

  const DocumentSet& docs_;
  QComboBox* compare_a_ = nullptr;
  QComboBox* compare_b_ = nullptr;
  TimelineChart* compare_chart_ = nullptr;
  CompareModel* compare_model_ = nullptr;
  KeptModel* kept_model_ = nullptr;
  bool refreshing_ = false;
};

}  // namespace memplan::gui
