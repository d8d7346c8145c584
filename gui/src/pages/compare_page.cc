#include "compare_page.h"

#include <QComboBox>
#include <QHBoxLayout>
#include <QLabel>
#include <QSortFilterProxyModel>
#include <QSplitter>
#include <QStackedWidget>
#include <QTableView>
#include <QVBoxLayout>

#include "common.h"
#include "document_set.h"
#include "models/compare_models.h"
#include "pages/page_util.h"
#include "profile_chart.h"
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
  chart_stack_ = new QStackedWidget;
  compare_chart_ = new TimelineChart;
  profile_chart_ = new ProfileMemoryChart;
  chart_stack_->addWidget(compare_chart_);
  chart_stack_->addWidget(profile_chart_);
  vsplit->addWidget(chart_stack_);
  auto* hsplit = new QSplitter(Qt::Horizontal);
  compare_model_ = new CompareModel(this);
  QTableView* ct = MakeTable(compare_model_, hsplit);
  ct->setColumnWidth(CompareModel::kQuantity, 170);
  ct->setColumnWidth(CompareModel::kA, 150);
  ct->setColumnWidth(CompareModel::kB, 150);
  hsplit->addWidget(ct);
  table_stack_ = new QStackedWidget;
  kept_model_ = new KeptModel(this);
  QTableView* kt = MakeTable(kept_model_, table_stack_);
  kt->setColumnWidth(KeptModel::kTensor, 320);
  table_stack_->addWidget(kt);
  node_time_model_ = new NodeTimeDiffModel(this);
  node_time_proxy_ = new QSortFilterProxyModel(this);
  node_time_proxy_->setSourceModel(node_time_model_);
  node_time_proxy_->setSortRole(Qt::UserRole);
  QTableView* nt = MakeTable(node_time_proxy_, table_stack_, /*sortable=*/true);
  nt->setColumnWidth(NodeTimeDiffModel::kNode, 240);
  nt->setColumnWidth(NodeTimeDiffModel::kOp, 90);
  nt->setColumnWidth(NodeTimeDiffModel::kPhase, 80);
  nt->sortByColumn(NodeTimeDiffModel::kDelta, Qt::DescendingOrder);  // the largest slow-downs first
  table_stack_->addWidget(nt);
  hsplit->addWidget(table_stack_);
  vsplit->addWidget(hsplit);
  vsplit->setStretchFactor(0, 3);
  vsplit->setStretchFactor(1, 2);
  vsplit->setSizes({520, 260});
  v->addWidget(vsplit, 1);
  auto changed = [this] {
    if (!refreshing_) showSelected();
  };
  connect(compare_a_, &QComboBox::currentIndexChanged, this, changed);
  connect(compare_b_, &QComboBox::currentIndexChanged, this, changed);
}

void ComparePage::refresh() {
  refreshing_ = true;
  std::vector<ItemPtr> list = docs_.compareItems();
  FillItemCombo(compare_a_, list, 0);
  FillItemCombo(compare_b_, list, 1);
  if (compare_b_->count() > 1 && compare_b_->currentIndex() == compare_a_->currentIndex()) {
    compare_b_->setCurrentIndex(
        compare_a_->currentIndex() == 0 ? 1 : 0);  // two different things by default
  }
  refreshing_ = false;
  showSelected();
}

QWidget* ComparePage::shownChart() const { return chart_stack_->currentWidget(); }

void ComparePage::choose(const QString& a, const QString& b) {
  refreshing_ = true;
  if (int i = compare_a_->findText(a); i >= 0) compare_a_->setCurrentIndex(i);
  if (int i = compare_b_->findText(b); i >= 0) compare_b_->setCurrentIndex(i);
  refreshing_ = false;
  showSelected();
}

void ComparePage::showSelected() {
  std::vector<ItemPtr> list = docs_.compareItems();
  auto pick = [&](QComboBox* c) -> ItemPtr {
    int i = c->currentIndex();
    return i >= 0 && i < static_cast<int>(list.size()) ? list[i] : nullptr;
  };
  ItemPtr a = pick(compare_a_), b = pick(compare_b_);
  const QColor color_a(0x1f, 0x77, 0xb4), color_b(0xff, 0x7f, 0x0e);
  compare_model_->setItems(a, b);
  kept_model_->setItems(a, b);
  node_time_model_->setItems(a, b);
  if (a && b && a->profile && b->profile) {
    // Two profiles need not share a schedule: their memory against time.
    std::vector<ProfileLine> lines = {
        {a->profile, QStringLiteral("A: %1").arg(ItemLabel(*a)), color_a}};
    if (b != a) lines.push_back({b->profile, QStringLiteral("B: %1").arg(ItemLabel(*b)), color_b});
    profile_chart_->setLines(std::move(lines),
                             QStringLiteral("A vs B: measured memory over the step"));
    chart_stack_->setCurrentWidget(profile_chart_);
    table_stack_->setCurrentIndex(1);
    return;
  }
  chart_stack_->setCurrentWidget(compare_chart_);
  table_stack_->setCurrentIndex(0);
  std::vector<Overlay> overlays;
  // Each series under the name of its kind of memory: predictions and run traces are
  // allocated bytes, a reserved prediction is the caching allocator's segments, a CUPTI
  // profile's is the device's memory.
  const bool gpu = !docs_.settings().device.empty();
  const QString allocated = gpu ? QStringLiteral("allocated, ") : QString();
  auto add = [&](const ItemPtr& p, const ItemPtr& other, const QString& tag, QColor color) {
    if (!p) return;
    if (p->timeline) {
      overlays.push_back({p->timeline,
                          QStringLiteral("%1: %2predicted, %3").arg(tag, allocated, ItemLabel(*p)),
                          color});
      if (!p->timeline->reserved.empty())
        overlays.push_back({ReservedSeries(*p->timeline),
                            QStringLiteral("%1: reserved, predicted").arg(tag),
                            color.lighter(140)});
    }
    if (p->measured)
      overlays.push_back(
          {p->measured, QStringLiteral("%1: %2measured").arg(tag, allocated), color.darker(150)});
    if (p->profile && other && other->timeline) {
      // A profile beside a prediction: its memory on the prediction's steps.
      MeasuredOverlay m = MeasuredOnSteps(*other->timeline, *p->profile, "");
      const QString kind =
          p->device_memory_peak_bytes >= 0 ? QStringLiteral("device memory (CUPTI), ") : QString();
      if (m.timeline)
        overlays.push_back(
            {m.timeline,
             QStringLiteral("%1: %2%3 on %4's steps")
                 .arg(tag, kind, ItemLabel(*p),
                      tag == QLatin1String("A") ? QStringLiteral("B") : QStringLiteral("A")),
             color});
    }
  };
  add(a, b, QStringLiteral("A"), color_a);
  if (b != a) add(b, a, QStringLiteral("B"), color_b);
  compare_chart_->setPrimary(nullptr, QString());
  compare_chart_->setOverlays(std::move(overlays));
  compare_chart_->setBudget(-1);
  QString title = a && b ? QStringLiteral("A vs B: bytes alive over the schedule")
                         : QStringLiteral("Open two files to compare");
  // Files made with other settings than the window's are compared, but never silently.
  for (const auto& [tag, p] :
       {std::pair{QStringLiteral("A"), a}, std::pair{QStringLiteral("B"), b}}) {
    if (const QStringList why = docs_.mismatchOf(p); !why.isEmpty())
      title += QStringLiteral(" · ⚠ %1: %2").arg(tag, why.join(QStringLiteral("; ")));
  }
  compare_chart_->setTitle(title);
}

}  // namespace memplan::gui
