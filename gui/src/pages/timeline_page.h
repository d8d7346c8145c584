// The timeline page: bytes alive over the schedule of one item (chosen in a combo box), the
// measured trace of a run or the measured memory of a profile over it, and the tensors alive
// at the clicked step.
#pragma once

#include <QWidget>
#include <cstdint>

#include "document.h"
#include "loader.h"

class QComboBox;
class QLabel;
class QSortFilterProxyModel;

namespace memplan::gui {

class AliveModel;
class DocumentSet;
class LinkLanes;
class TimelineChart;

class TimelinePage : public QWidget {
  Q_OBJECT
 public:
  explicit TimelinePage(const DocumentSet& docs, QWidget* parent = nullptr);
  // Follows the open items; keeps the chosen item if it is still there, else shows the model.
  void refresh();
  // Lists the tensors alive at `step` of the chosen item.
  void selectStep(int64_t step);
  // Chooses the item with this label (ItemLabel), as if the user had.
  void chooseItem(const QString& label);
  ItemPtr selectedItem() const;

  TimelineChart* chart() const { return chart_; }
  // An offload plan's link occupancy under the chart (hidden for other items).
  LinkLanes* linkLanes() const { return link_; }
  AliveModel* aliveModel() const { return alive_model_; }
  QSortFilterProxyModel* aliveProxy() const { return alive_proxy_; }
  // The open profile's memory on the chosen item's steps (its timeline is null when none is
  // drawn: no profile, or one of another model or plan).
  const MeasuredOverlay& profileOverlay() const { return profile_overlay_; }

 signals:
  void itemChosen();  // the user (or chooseItem) picked another item
  void rangeChanged(qint64 first, qint64 last);

 private:
  void showSelected();

  const DocumentSet& docs_;
  QComboBox* combo_ = nullptr;
  TimelineChart* chart_ = nullptr;
  LinkLanes* link_ = nullptr;
  QLabel* alive_label_ = nullptr;
  AliveModel* alive_model_ = nullptr;
  QSortFilterProxyModel* alive_proxy_ = nullptr;
  QLabel* range_label_ = nullptr;
  bool refreshing_ = false;
  int64_t selected_step_ = -1;
  MeasuredOverlay profile_overlay_;
  const Item* shown_base_ = nullptr;  // the model or analysis the combo last moved to
};

}  // namespace memplan::gui
