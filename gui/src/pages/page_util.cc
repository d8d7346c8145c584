#include "page_util.h"

#include <QChart>
#include <QComboBox>
#include <QHeaderView>
#include <QTableView>
#include <algorithm>

#include "common.h"

namespace memplan::gui {

QTableView* MakeTable(QAbstractItemModel* model, QWidget* parent, bool sortable) {
  auto* view = new QTableView(parent);
  view->setModel(model);
  view->setSelectionBehavior(QAbstractItemView::SelectRows);
  view->setAlternatingRowColors(true);
  view->verticalHeader()->setVisible(false);
  view->verticalHeader()->setDefaultSectionSize(22);
  view->horizontalHeader()->setStretchLastSection(true);
  view->setSortingEnabled(sortable);
  view->setWordWrap(false);
  return view;
}

void ClearChart(QChart* chart) {
  chart->removeAllSeries();
  for (QAbstractAxis* a : chart->axes()) {
    chart->removeAxis(a);
    delete a;
  }
}

void FillItemCombo(QComboBox* combo, const std::vector<ItemPtr>& items, int fallback) {
  QString current = combo->currentText();
  combo->clear();
  for (const ItemPtr& p : items) combo->addItem(ItemLabel(*p));
  int i = combo->findText(current);
  combo->setCurrentIndex(i >= 0 ? i : std::min<int>(fallback, combo->count() - 1));
}

}  // namespace memplan::gui
