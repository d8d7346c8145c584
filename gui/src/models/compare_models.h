// The compare page's tables: quantities of two items side by side, and which checkpoints
// each plan keeps.
#pragma once

#include <string>

#include "loader.h"
#include "table_model.h"

namespace memplan::gui {

enum class CompareQuantity {
  kPredictedPeak,  // the plan's peak, else the timeline's, else the baseline
  kMeasuredPeak,
  kBudget,
  kBaselinePeak,
  kOverhead,
  kCheckpoints,
  kStrategy,
  kScheduleSteps,
};

class CompareModel : public RowTableModel<CompareQuantity> {
 public:
  enum Column { kQuantity, kA, kB, kDelta, kColumnCount };
  explicit CompareModel(QObject* parent = nullptr);
  // Every quantity when either item is set; no rows when both are null.
  void setItems(ItemPtr a, ItemPtr b);

 protected:
  Cell cell(const CompareQuantity& row, int column) const override;

 private:
  ItemPtr a_, b_;
};

struct KeptRow {
  enum class KeptBy { kAOnly, kBOnly, kBoth };
  std::string tensor;
  KeptBy kept_by = KeptBy::kBoth;
};

class KeptModel : public RowTableModel<KeptRow> {
 public:
  enum Column { kTensor, kKeptBy, kColumnCount };
  explicit KeptModel(QObject* parent = nullptr);
  // A's checkpoints that B lacks, then B's that A lacks, then those in both; none unless both are set.
  void setItems(const ItemPtr& a, const ItemPtr& b);

 protected:
  Cell cell(const KeptRow& row, int column) const override;
};

}  // namespace memplan::gui
