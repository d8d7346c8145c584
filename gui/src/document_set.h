// The files the dashboard has open (one slot per path, in the order opened) and the plan
// explorer's latest plan, with the choices every page makes from them: which item is "the
// model", "the plan", "the run", "the profile".
#pragma once

#include <QString>
#include <QStringList>
#include <vector>

#include "loader.h"
#include "models/summary_models.h"

namespace memplan::gui {

class DocumentSet {
 public:
  // A new slot, loading; returns its index.
  int add(const QString& path);
  void setLoaded(int slot, ItemPtr item);
  void setFailed(int slot, const QString& message);
  void setLoading(int slot);  // loading again (re-analysis)
  void setExplorerPlan(ItemPtr plan) { explorer_plan_ = std::move(plan); }

  int size() const { return paths_.size(); }
  const QString& path(int slot) const { return paths_[slot]; }
  const ItemPtr& slot(int slot) const { return slots_[slot]; }
  const ItemPtr& explorerPlan() const { return explorer_plan_; }

  std::vector<ItemPtr> items() const;  // loaded items in slot order, then the explorer's plan
  ItemPtr baseItem() const;            // the latest model, else the latest analysis
  ItemPtr planItem() const;            // the explorer's plan, else the latest plan file
  ItemPtr runItem() const;             // the latest run
  std::vector<ItemPtr> profileItems() const;   // the profiles, in slot order
  // The profile to overlay on `item`'s predicted timeline: the latest one of the same model
  // (by file name), else the latest one.
  ItemPtr profileFor(const ItemPtr& item) const;
  std::vector<ItemPtr> timelineItems() const;  // items with a timeline, in items() order
  std::vector<ItemPtr> compareItems() const;   // timelineItems(), then the profiles
  std::vector<FileRow> fileRows() const;

 private:
  QStringList paths_;
  std::vector<ItemPtr> slots_;  // null while loading or after a failure
  std::vector<QString> errors_;
  ItemPtr explorer_plan_;
};

}  // namespace memplan::gui
