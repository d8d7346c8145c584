// The timeline page's table: the buffers alive at the selected step.
#pragma once

#include "document.h"
#include "table_model.h"

namespace memplan::gui {

class AliveModel : public RowTableModel<AliveBuffer> {
 public:
  enum Column { kTensor, kCategory, kBytes, kColumnCount };
  explicit AliveModel(QObject* parent = nullptr);

 protected:
  Cell cell(const AliveBuffer& row, int column) const override;
};

}  // namespace memplan::gui
