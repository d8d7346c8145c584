// The lifetimes page: the largest tensors of a schedule as bars over its steps and, for a
// selective plan, the table of its saved activations, kept or recomputed.
#pragma once

#include <QWidget>

#include "loader.h"

class QCheckBox;
class QLabel;
class QSortFilterProxyModel;
class QSpinBox;
class QTableView;

namespace memplan::gui {

class LifetimeView;
class StorageModel;

class LifetimesPage : public QWidget {
  Q_OBJECT
 public:
  explicit LifetimesPage(QWidget* parent = nullptr);
  // Shows `item`'s schedule, else `fallback`'s (the model), else nothing.
  void refresh(const ItemPtr& item, const ItemPtr& fallback);
  LifetimeView* view() const { return view_; }
  // A selective plan's storages (empty otherwise), and the sorted view the table shows.
  StorageModel* storageModel() const { return storage_model_; }
  QSortFilterProxyModel* storageProxy() const { return storage_proxy_; }

 private:
  LifetimeView* view_ = nullptr;
  QSpinBox* count_ = nullptr;
  QCheckBox* persistent_ = nullptr;
  StorageModel* storage_model_ = nullptr;
  QSortFilterProxyModel* storage_proxy_ = nullptr;
  QWidget* storage_box_ = nullptr;
  QLabel* storage_label_ = nullptr;
};

}  // namespace memplan::gui
