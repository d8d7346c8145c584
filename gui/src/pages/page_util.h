// What the dashboard's pages share: the look of their tables, clearing a chart.
#pragma once

#include <vector>

#include "loader.h"

class QAbstractItemModel;
class QChart;
class QComboBox;
class QTableView;
class QWidget;

namespace memplan::gui {

QTableView* MakeTable(QAbstractItemModel* model, QWidget* parent, bool sortable = false);
// Removes every series and axis of a chart (to draw it anew).
void ClearChart(QChart* chart);
// Fills a combo box with the items' labels, keeping the current choice if it is still there,
// else choosing `fallback` (clamped to the last entry).
void FillItemCombo(QComboBox* combo, const std::vector<ItemPtr>& items, int fallback);

}  // namespace memplan::gui
