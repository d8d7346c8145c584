#include "table_model.h"

namespace memplan::gui {

Cell NumberCell(const QString& text, double value) { return Cell{text, value, {}, {}, {}}; }

QVariant CellData(const Cell& c, int role) {
  switch (role) {
    case Qt::DisplayRole:
      return c.text;
    case Qt::ToolTipRole:
      return c.tooltip.isEmpty() ? QVariant() : QVariant(c.tooltip);
    case Qt::ForegroundRole:
      return c.color.isValid() ? QVariant(c.color) : QVariant();
    case Qt::DecorationRole:
      return c.decoration.isValid() ? QVariant(c.decoration) : QVariant();
    case Qt::UserRole:
      return c.sort.isValid() ? c.sort : QVariant(c.text);
    case Qt::TextAlignmentRole:
      return c.sort.userType() == QMetaType::Double
                 ? QVariant(int(Qt::AlignRight | Qt::AlignVCenter))
                 : QVariant();
    default:
      return {};
  }
}

}  // namespace memplan::gui
