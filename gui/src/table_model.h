// A read-only table of display cells, the model behind every table of the dashboard.
#pragma once

#include <QAbstractTableModel>
#include <QColor>
#include <QStringList>
#include <QVariant>
#include <QVector>

namespace memplan::gui {

struct Cell {
  QString text;
  QVariant sort;  // Qt::UserRole: the value to sort by (numbers sort as numbers)
  QColor color;   // foreground; invalid: default
  QString tooltip;
  QColor decoration;  // a color swatch; invalid: none
};

class TableModel : public QAbstractTableModel {
  Q_OBJECT
 public:
  explicit TableModel(QStringList headers, QObject* parent = nullptr);

  void setRows(QVector<QVector<Cell>> rows);
  const QVector<QVector<Cell>>& rows() const { return rows_; }

  int rowCount(const QModelIndex& parent = {}) const override;
  int columnCount(const QModelIndex& parent = {}) const override;
  QVariant data(const QModelIndex& index, int role = Qt::DisplayRole) const override;
  QVariant headerData(int section, Qt::Orientation orientation, int role = Qt::DisplayRole) const override;

 private:
  QStringList headers_;
  QVector<QVector<Cell>> rows_;
};

inline Cell TextCell(const QString& text) { return Cell{text, text, {}, {}, {}}; }
Cell NumberCell(const QString& text, double value);

}  // namespace memplan::gui
