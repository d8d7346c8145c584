// The lifetimes page: the largest tensors of a schedule as bars over its steps.
#pragma once

#include <QWidget>

#include "loader.h"

class QCheckBox;
class QSpinBox;

namespace memplan::gui {

class LifetimeView;

class LifetimesPage : public QWidget {
  Q_OBJECT
 public:
  explicit LifetimesPage(QWidget* parent = nullptr);
  // Shows `item`'s schedule, else `fallback`'s (the model), else nothing.
  void refresh(const ItemPtr& item, const ItemPtr& fallback);
  LifetimeView* view() const { return view_; }

 private:
  LifetimeView* view_ = nullptr;
  QSpinBox* count_ = nullptr;
  QCheckBox* persistent_ = nullptr;
};

}  // namespace memplan::gui
