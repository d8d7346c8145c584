#include "timeline_page.h"

#include <QComboBox>
#include <QHBoxLayout>
#include <QHeaderView>
#include <QLabel>
#include <QSortFilterProxyModel>
#include <QSplitter>
#include <QTableView>
#include <QVBoxLayout>

#include "common.h"
#include "document_set.h"
#include "models/alive_model.h"
#include "pages/page_util.h"
#include "timeline_chart.h"

namespace memplan::gui {

TimelinePage::TimelinePage(const DocumentSet& docs, QWidget* parent) : QWidget(parent), docs_(docs) {
  auto* v = new QVBoxLayout(this);
  auto* controls = new QHBoxLayout;
  controls->addWidget(new QLabel(QStringLiteral("Timeline of")));
  combo_ = new QComboBox;
  combo_->setMinimumWidth(320);
  controls->addWidget(combo_);
  range_label_ = new QLabel;
  controls->addWidget(range_label_, 1);
  auto* hint = new QLabel(QStringLiteral("drag: zoom to a range · right-click or double-click: all steps · click: tensors alive"));
  hint->setStyleSheet(QStringLiteral("color: gray"));
  controls->addWidget(hint);
  v->addLayout(controls);

  auto* split = new QSplitter(Qt::Horizontal);
  chart_ = new TimelineChart;
  split->addWidget(chart_);
  auto* side = new QWidget;
  auto* sv = new QVBoxLayout(side);
  sv->setContentsMargins(0, 0, 0, 0);
  alive_label_ = new QLabel;
  alive_label_->setWordWrap(true);
  alive_label_->setTextFormat(Qt::RichText);
  sv->addWidget(alive_label_);
  alive_model_ = new AliveModel(this);
  alive_proxy_ = new QSortFilterProxyModel(this);
  alive_proxy_->setSourceModel(alive_model_);
  alive_proxy_->setSortRole(Qt::UserRole);
  QTableView* at = MakeTable(alive_proxy_, side, true);
  at->horizontalHeader()->setStretchLastSection(false);
  at->horizontalHeader()->setSectionResizeMode(AliveModel::kTensor, QHeaderView::Stretch);
  at->horizontalHeader()->setSectionResizeMode(AliveModel::kCategory, QHeaderView::ResizeToContents);
  at->horizontalHeader()->setSectionResizeMode(AliveModel::kBytes, QHeaderView::ResizeToContents);
  at->sortByColumn(AliveModel::kBytes, Qt::DescendingOrder);
  sv->addWidget(at, 1);
  split->addWidget(side);
  split->setStretchFactor(0, 3);
  split->setStretchFactor(1, 1);
  split->setSizes({930, 470});
  v->addWidget(split, 1);

  connect(combo_, &QComboBox::currentIndexChanged, this, [this] {
    if (refreshing_) return;
    selected_step_ = -1;
    showSelected();
    emit itemChosen();
  });
  connect(chart_, &TimelineChart::stepClicked, this, [this](qint64 s) { selectStep(s); });
  connect(chart_, &TimelineChart::rangeChanged, this, [this](qint64 a, qint64 b) {
    range_label_->setText(QStringLiteral("steps %1–%2").arg(a).arg(b));
    emit rangeChanged(a, b);  // the selection filters the lifetimes view too
  });
}

void TimelinePage::refresh() {
  refreshing_ = true;
  std::vector<ItemPtr> list = docs_.timelineItems();
  int base_index = 0;
  ItemPtr base = docs_.baseItem();
  for (size_t i = 0; i < list.size(); ++i) if (list[i] == base) base_index = static_cast<int>(i);
  FillItemCombo(combo_, list, base_index);
  refreshing_ = false;
  showSelected();
}

void TimelinePage::chooseItem(const QString& label) {
  int i = combo_->findText(label);
  if (i >= 0) combo_->setCurrentIndex(i);
}

ItemPtr TimelinePage::selectedItem() const {
  std::vector<ItemPtr> list = docs_.timelineItems();
  int i = combo_->currentIndex();
  return i >= 0 && i < static_cast<int>(list.size()) ? list[i] : nullptr;
}

void TimelinePage::showSelected() {
  ItemPtr item = selectedItem();
  ItemPtr run = docs_.runItem();
  ItemPtr plan = docs_.planItem();
  profile_overlay_ = {};
  if (!item) {
    chart_->setPrimary(nullptr, QStringLiteral("Memory timeline"));
    chart_->setOverlays({});
    chart_->setBudget(-1);
    alive_label_->setText(QString());
    alive_model_->setRows({});
    return;
  }
  std::shared_ptr<const TimelineData> primary = item->timeline ? item->timeline : item->measured;
  std::vector<Overlay> overlays;
  ItemPtr measured_src = item->measured ? item : run;
  if (measured_src && measured_src->measured && measured_src->measured != primary) {
    overlays.push_back({measured_src->measured, QStringLiteral("measured (%1)").arg(Q(measured_src->title)), QColor(0x11, 0x11, 0x11)});
  }
  int64_t budget = item->budget_bytes >= 0 ? item->budget_bytes : plan ? plan->budget_bytes : -1;
  QString title = QStringLiteral("%1 — peak %2").arg(ItemLabel(*item), BytesQ(primary->peak_bytes));
  if (item->kind == SourceKind::kRun && item->measured_peak_bytes >= 0)
    title += QStringLiteral(", measured %1").arg(BytesQ(item->measured_peak_bytes));
  // A profile's measured memory, placed on the predicted steps by scope (MeasuredOnSteps).
  profile_overlay_ = {};
  if (ItemPtr profile = docs_.profileFor(item); profile && item->timeline && primary == item->timeline) {
    const QString label = QStringLiteral("measured (%1)").arg(Q(profile->title));
    profile_overlay_ = MeasuredOnSteps(*item->timeline, *profile->profile, label.toStdString());
    if (profile_overlay_.timeline && profile_overlay_.matched_steps * 2 >= profile_overlay_.steps) {
      // A colour of its own: where measured and predicted agree, it traces the prediction's edge.
      overlays.push_back({profile_overlay_.timeline, label, ProfileOverlayColor()});
      title += QStringLiteral(", measured %1 (%2").arg(BytesQ(profile->measured_peak_bytes), Q(profile->title));
      if (profile->profile->micro_batches > 1) {
        title += QStringLiteral(", its first of %1 micro-batches").arg(profile->profile->micro_batches);
      }
      if (profile_overlay_.matched_steps < profile_overlay_.steps) {
        title += QStringLiteral(", %1 of %2 steps").arg(profile_overlay_.matched_steps).arg(profile_overlay_.steps);
      }
      title += QStringLiteral(")");
    } else {
      title += QStringLiteral(" · %1 is not a profile of this schedule (%2 of %3 steps match)")
                   .arg(Q(profile->title))
                   .arg(profile_overlay_.matched_steps)
                   .arg(profile_overlay_.steps);
      profile_overlay_.timeline.reset();
    }
  }
  chart_->setPrimary(primary, title);
  chart_->setOverlays(std::move(overlays));
  chart_->setBudget(budget);
  range_label_->setText(QStringLiteral("%1 steps").arg(primary->size()));
  selectStep(selected_step_ >= 0 ? selected_step_ : primary->peak_step);
}

void TimelinePage::selectStep(int64_t step) {
  ItemPtr item = selectedItem();
  if (!item) return;
  std::shared_ptr<const TimelineData> t = item->timeline ? item->timeline : item->measured;
  if (!t || step < 0 || step >= static_cast<int64_t>(t->size())) return;
  selected_step_ = step;
  QString head = QStringLiteral("<b>Alive at step %1</b>%2: %3<br>%4")
                     .arg(step)
                     .arg(step == t->peak_step ? QStringLiteral(" (the peak)") : QString())
                     .arg(BytesQ(t->bytes[step]))
                     .arg(Q(t->events[step]).toHtmlEscaped());
  std::vector<AliveBuffer> alive;
  if (item->schedule && t == item->timeline) {
    alive = AliveAt(*item->schedule, static_cast<size_t>(step));
    head += QStringLiteral("<br>%1 tensors, largest first").arg(alive.size());
  } else {
    head += QStringLiteral("<br><i>The tensors alive need the schedule: open the model (.onnx).</i>");
  }
  alive_label_->setText(head);
  alive_model_->setRows(std::move(alive));
  alive_proxy_->sort(AliveModel::kBytes, Qt::DescendingOrder);
}

}  // namespace memplan::gui
