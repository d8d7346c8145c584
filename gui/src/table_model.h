// The base of every table of the dashboard: a read-only QAbstractTableModel over a vector of
// typed rows. Each model names its columns in an enum and says, per row and column, which Cell
// to show; the base maps a Cell to Qt's roles the same way for every table.
#pragma once

#include <QAbstractTableModel>
#include <QColor>
#include <QStringList>
#include <QVariant>
#include <utility>
#include <vector>

namespace memplan::gui {

struct Cell {
  QString text;
  QVariant sort;  // Qt::UserRole: the value to sort by (numbers sort as numbers)
  QColor color;   // foreground; invalid: default
  QString tooltip;
  QColor decoration;  // a color swatch; invalid: none
};

inline Cell TextCell(const QString& text) { return Cell{text, text, {}, {}, {}}; }
Cell NumberCell(const QString& text, double value);
// A cell's value for a role: DisplayRole the text, UserRole the sort value (numbers right-aligned).
QVariant CellData(const Cell& c, int role);

template <typename Row>
class RowTableModel : public QAbstractTableModel {
 public:
  RowTableModel(QStringList headers, QObject* parent)
      : QAbstractTableModel(parent), headers_(std::move(headers)) {}

  void setRows(std::vector<Row> rows) {
    beginResetModel();
    rows_ = std::move(rows);
    endResetModel();
  }
  const std::vector<Row>& rows() const { return rows_; }

  int rowCount(const QModelIndex& parent = {}) const override {
    return parent.isValid() ? 0 : static_cast<int>(rows_.size());
  }
  int columnCount(const QModelIndex& parent = {}) const override {
    return parent.isValid() ? 0 : headers_.size();
  }
  QVariant data(const QModelIndex& index, int role = Qt::DisplayRole) const override {
    if (!checkIndex(index, CheckIndexOption::IndexIsValid | CheckIndexOption::ParentIsInvalid))
      return {};
    return CellData(cell(rows_[index.row()], index.column()), role);
  }
  QVariant headerData(int section, Qt::Orientation orientation,
                      int role = Qt::DisplayRole) const override {
    if (role != Qt::DisplayRole) return {};
    if (orientation == Qt::Horizontal)
      return section >= 0 && section < headers_.size() ? QVariant(headers_[section]) : QVariant();
    return section + 1;
  }

 protected:
  virtual Cell cell(const Row& row, int column) const = 0;

 private:
  QStringList headers_;
  std::vector<Row> rows_;
};

}  // namespace memplan::gui
