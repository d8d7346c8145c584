// The plan explorer's table: every strategy's plan at the current budget.
#pragma once

#include "document.h"
#include "table_model.h"

namespace memplan::gui {

class StrategyModel : public RowTableModel<StrategyRow> {
 public:
  enum Column {
    kStrategy,
    kPeak,
    kOverhead,
    kRecomputeTime,  // the plan's predicted_recompute_seconds
    kCheckpoints,
    kRecomputed,  // storages a selective plan drops and recomputes
    kSections,
    kFeasible,
    kSolveTime,
    kColumnCount
  };
  explicit StrategyModel(QObject* parent = nullptr);

 protected:
  Cell cell(const StrategyRow& row, int column) const override;
};

}  // namespace memplan::gui
