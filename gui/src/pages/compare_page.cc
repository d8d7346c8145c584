#include "compare_page.h"

#include <QComboBox>
#include <QHBoxLayout>
#include <QLabel>
#include <QSplitter>
#include <QTableView>
#include <QVBoxLayout>

#include "common.h"
#include "document_set.h"
#include "models/compare_models.h"
#include "pages/page_util.h"
#include "timeline_chart.h"

namespace memplan::gui {

ComparePage::ComparePage(const DocumentSet& docs, QWidget* parent) : QWidget(parent), docs_(docs) {
  auto* v = new QVBoxLayout(this);
  auto* controls = new QHBoxLayout;
  controls->addWidget(new QLabel(QStringLiteral("<span style='color:#1f77b4'><b>A</b></span>")));
  compare_a_ = new QComboBox;
  compare_a_->setMinimumWidth(300);
  controls->addWidget(compare_a_, 1);
  controls->addWidget(new QLabel(QStringLiteral("<span style='color:#ff7f0e'><b>B</b></span>")));
  compare_b_ = new QComboBox;
  compare_b_->setMinimumWidth(300);
  controls->addWidget(compare_b_, 1);
  v->addLayout(controls);
  auto* vsplit = new QSplitter(Qt::Vertical);
  compare_chart_ = new TimelineChart;
  vsplit->addWidget(compare_chart_);
  auto* hsplit = new QSplitter(Qt::Horizontal);
  compare_model_ = new CompareModel(this);
  QTableView* ct = MakeTable(compare_model_, hsplit);
  ct->setColumnWidth(CompareModel::kQuantity, 170);
  ct->setColumnWidth(CompareModel::kA, 150);
  ct->setColumnWidth(CompareModel::kB, 150);
  hsplit->addWidget(ct);
  kept_model_ = new KeptModel(this);
  QTableView* kt = MakeTable(kept_model_, hsplit);
  kt->setColumnWidth(KeptModel::kTensor, 320);
  hsplit->addWidget(kt);
  vsplit->addWidget(hsplit);
  vsplit->setStretchFactor(0, 3);
  vsplit->setStretchFactor(1, 2);
  vsplit->setSizes({520, 260});
  v->addWidget(vsplit, 1);
  auto changed = [this] { if (!refreshing_) showSelected(); };
  connect(compare_a_, &QComboBox::currentIndexChanged, this, changed);
  connect(compare_b_, &QComboBox::currentIndexChanged, this, changed);
}

void ComparePage::refresh() {
  refreshing_ = true;
  std::vector<ItemPtr> list = docs_.timelineItems();
  FillItemCombo(compare_a_, list, 0);
  FillItemCombo(compare_b_, list, 1);
  if (compare_b_->count() > 1 && compare_b_->currentIndex() == compare_a_->currentIndex()) {
    compare_b_->setCurrentIndex(compare_a_->currentIndex() == 0 ? 1 : 0);  // two different things by default
  }
  refreshing_ = false;
  showSelected();
}

void ComparePage::showSelected() {
  std::vector<ItemPtr> list = docs_.timelineItems();
  auto pick = [&](QComboBox* c) -> ItemPtr {
    int i = c->currentIndex();
    return i >= 0 && i < static_cast<int>(list.size()) ? list[i] : nullptr;
  };
  ItemPtr a = pick(compare_a_), b = pick(compare_b_);
  std::vector<Overlay> overlays;
  auto add = [&](const ItemPtr& p, const QString& tag, QColor color) {
    if (!p) return;
    if (p->timeline) overlays.push_back({p->timeline, QStringLiteral("%1: %2").arg(tag, ItemLabel(*p)), color});
    if (p->measured) overlays.push_back({p->measured, QStringLiteral("%1: measured").arg(tag), color.darker(150)});
  };
  add(a, QStringLiteral("A"), QColor(0x1f, 0x77, 0xb4));
  if (b != a) add(b, QStringLiteral("B"), QColor(0xff, 0x7f, 0x0e));
  compare_chart_->setPrimary(nullptr, QString());
  compare_chart_->setOverlays(std::move(overlays));
  compare_chart_->setBudget(-1);
  compare_chart_->setTitle(a && b ? QStringLiteral("A vs B: bytes alive over the schedule") : QStringLiteral("Open two files to compare"));
  compare_model_->setItems(a, b);
  kept_model_->setItems(a, b);
}

}  // namespace memplan::gui
