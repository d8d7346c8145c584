#include "alive_model.h"

#include "common.h"

namespace memplan::gui {

AliveModel::AliveModel(QObject* parent)
    : RowTableModel({QStringLiteral("Tensor"), QStringLiteral("Category"), QStringLiteral("Bytes")},
                    parent) {}

Cell AliveModel::cell(const AliveBuffer& row, int column) const {
  switch (column) {
    case kTensor: {
      Cell c = TextCell(Q(row.name));
      c.tooltip = Q(row.name);
      return c;
    }
    case kCategory: {
      Cell c = TextCell(CategoryLabel(row.category));
      c.decoration = CategoryColor(row.category);
      return c;
    }
    case kBytes:
      return NumberCell(BytesQ(row.bytes), static_cast<double>(row.bytes));
  }
  return {};
}

}  // namespace memplan::gui
