#include "table_model.h"

namespace memplan::gui {

Cell NumberCell(const QString& text, double value) { return Cell{text, value, {}, {}, {}}; }

TableModel::TableModel(QStringList headers, QObject* parent) : QAbstractTableModel(parent), headers_(std::move(headers)) {}

void TableModel::setRows(QVector<QVector<Cell>> rows) {
  beginResetModel();
  rows_ = std::move(rows);
  for (auto& r : rows_) r.resize(headers_.size());
  endResetModel();
}

int TableModel::rowCount(const QModelIndex& parent) const { return parent.isValid() ? 0 : rows_.size(); }
int TableModel::columnCount(const QModelIndex& parent) const { return parent.isValid() ? 0 : headers_.size(); }

QVariant TableModel::data(const QModelIndex& index, int role) const {
  if (!checkIndex(index, CheckIndexOption::IndexIsValid | CheckIndexOption::ParentIsInvalid)) return {};
  const Cell& c = rows_[index.row()][index.column()];
  switch (role) {
    case Qt::DisplayRole: return c.text;
    case Qt::ToolTipRole: return c.tooltip.isEmpty() ? QVariant() : QVariant(c.tooltip);
    case Qt::ForegroundRole: return c.color.isValid() ? QVariant(c.color) : QVariant();
    case Qt::DecorationRole: return c.decoration.isValid() ? QVariant(c.decoration) : QVariant();
    case Qt::UserRole: return c.sort.isValid() ? c.sort : QVariant(c.text);
    case Qt::TextAlignmentRole:
      return c.sort.userType() == QMetaType::Double ? QVariant(int(Qt::AlignRight | Qt::AlignVCenter)) : QVariant();
    default: return {};
  }
}

QVariant TableModel::headerData(int section, Qt::Orientation orientation, int role) const {
  if (role != Qt::DisplayRole) return {};
  if (orientation == Qt::Horizontal) return section >= 0 && section < headers_.size() ? QVariant(headers_[section]) : QVariant();
  return section + 1;
}

}  // namespace memplan::gui
