// The files the dashboard has open (one slot per path, in the order opened) and the plan
// explorer's latest plan, with the choices every page makes from them: which item is "the
// model", "the plan", "the run", "the profile".
#pragma once

#include <QString>
#include <QStringList>
#include <optional>
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
  // The window's training settings and where they come from (a file's title, or "the
  // toolbar"). Items that disagree with them, or were made for another model than the open
  // one, are left out of every page but the list of opened files, which says why.
  void setSettings(const ModelOptions& settings, const QString& source) {
    settings_ = settings;
    settings_source_ = source;
  }
  const ModelOptions& settings() const { return settings_; }
  const QString& settingsSource() const { return settings_source_; }
  // The settings the opened files carry: the first file (in slot order) that records a batch;
  // nullopt when none does. `source` gets its title.
  std::optional<ModelOptions> fileSettings(const ModelOptions& defaults, QString* source) const;
  // Why the item in `slot` disagrees with the settings or the open model (empty: it agrees).
  QStringList mismatch(int slot) const;
  QStringList mismatchOf(const ItemPtr& item) const;
  bool matches(const ItemPtr& item) const;

  int size() const { return paths_.size(); }
  const QString& path(int slot) const { return paths_[slot]; }
  const ItemPtr& slot(int slot) const { return slots_[slot]; }
  const ItemPtr& explorerPlan() const { return explorer_plan_; }

  // Loaded items in slot order, then the explorer's plan. The pages that combine files (the
  // summary, overlays, the explorer) take only those that match (baseItem, planItem,
  // runItem, profileFor); a file chosen on its own says where it differs.
  std::vector<ItemPtr> items() const;
  ItemPtr baseItem() const;  // the latest matching model, else analysis
  ItemPtr planItem() const;  // the explorer's plan, else the latest matching plan file
  ItemPtr runItem() const;   // the latest matching run
  std::vector<ItemPtr> profileItems() const;  // the profiles, in slot order
  // The profile to overlay on `item`'s predicted timeline: the latest matching one of the same
  // model (by file name), else the latest matching one.
  ItemPtr profileFor(const ItemPtr& item) const;
  std::vector<ItemPtr> timelineItems() const;  // items with a timeline, in items() order
  std::vector<ItemPtr> compareItems() const;   // timelineItems(), then the profiles
  std::vector<FileRow> fileRows() const;

 private:
  QStringList paths_;
  std::vector<ItemPtr> slots_;  // null while loading or after a failure
  std::vector<QString> errors_;
  ItemPtr explorer_plan_;
  ModelOptions settings_;
  QString settings_source_ = QStringLiteral("the toolbar");
  // The model the other files are checked against: the latest model, else none.
  const Item* modelForChecks() const;
};

}  // namespace memplan::gui
