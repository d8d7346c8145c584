// The lifetimes page's table of a selective plan: every saved activation, kept or recomputed,
// and every other storage it drops, with the steps each is held (the analyzer's lifetimes).
#pragma once

#include "document.h"
#include "table_model.h"

namespace memplan::gui {

// "kept", "recomputed (2 times)".
QString StorageDecisionText(const StorageDecision& d);

class StorageModel : public RowTableModel<StorageDecision> {
 public:
  enum Column { kTensor, kBytes, kDecision, kForward, kRecomputed, kColumnCount };
  explicit StorageModel(QObject* parent = nullptr);

 protected:
  Cell cell(const StorageDecision& row, int column) const override;
};

}  // namespace memplan::gui
