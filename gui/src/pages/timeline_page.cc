#include "timeline_page.h"

#include <QChart>
#include <QComboBox>
#include <QHBoxLayout>
#include <QHeaderView>
#include <QLabel>
#include <QSortFilterProxyModel>
#include <QSplitter>
#include <QTableView>
#include <QVBoxLayout>
#include <algorithm>

#include "common.h"
#include "document_set.h"
#include "models/alive_model.h"
#include "pages/page_util.h"
#include "timeline_chart.h"

namespace memplan::gui {

TimelinePage::TimelinePage(const DocumentSet& docs, QWidget* parent)
    : QWidget(parent), docs_(docs) {
  auto* v = new QVBoxLayout(this);
  auto* controls = new QHBoxLayout;
  controls->addWidget(new QLabel(QStringLiteral("Timeline of")));
  combo_ = new QComboBox;
  combo_->setMinimumWidth(320);
  controls->addWidget(combo_);
  range_label_ = new QLabel;
  controls->addWidget(range_label_, 1);
  auto* hint = new QLabel(QStringLiteral(
      "drag: zoom to a range · right-click or double-click: all steps · click: tensors alive"));
  hint->setStyleSheet(QStringLiteral("color: gray"));
  controls->addWidget(hint);
  v->addLayout(controls);

  auto* split = new QSplitter(Qt::Horizontal);
  // The chart and, for offload plans, the link's two copy streams under it on the same steps.
  auto* charts = new QWidget;
  auto* cv = new QVBoxLayout(charts);
  cv->setContentsMargins(0, 0, 0, 0);
  cv->setSpacing(0);
  chart_ = new TimelineChart;
  cv->addWidget(chart_, 1);
  link_ = new LinkLanes;
  link_->hide();
  cv->addWidget(link_);
  split->addWidget(charts);
  auto place_lanes = [this] {
    const QRectF area = chart_->chart()->plotArea();
    const QPoint a = chart_->mapFromScene(chart_->chart()->mapToScene(area.topLeft()));
    const QPoint b = chart_->mapFromScene(chart_->chart()->mapToScene(area.topRight()));
    link_->setPlotArea(a.x() + chart_->x(), b.x() + chart_->x());
  };
  connect(chart_->chart(), &QChart::plotAreaChanged, this, place_lanes);
  connect(chart_, &TimelineChart::rangeChanged, link_,
          [this](qint64 a, qint64 b) { link_->setRange(a, b); });
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
  at->horizontalHeader()->setSectionResizeMode(AliveModel::kCategory,
                                               QHeaderView::ResizeToContents);
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
  for (size_t i = 0; i < list.size(); ++i)
    if (list[i] == base) base_index = static_cast<int>(i);
  FillItemCombo(combo_, list, base_index);
  // A model that arrives (or is analysed again) is what the page shows: the files opened with
  // it are read first, and would otherwise keep the choice.
  if (base && base.get() != shown_base_) combo_->setCurrentIndex(base_index);
  shown_base_ = base.get();
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
    chart_->setMarks({});
    chart_->setBudget(-1);
    alive_label_->setText(QString());
    alive_model_->setRows({});
    return;
  }
  std::shared_ptr<const TimelineData> primary = item->timeline ? item->timeline : item->measured;
  const QStringList mismatch = docs_.mismatchOf(item);
  if (!mismatch.isEmpty()) {
    run.reset();
    plan.reset();
  }
  std::vector<Overlay> overlays;
  std::vector<Mark> marks;
  ItemPtr measured_src = item->measured ? item : run;
  // Every series is named for its kind of memory: the prediction and a run's trace are
  // allocated bytes; a CUPTI profile's are the device's; reserved is the caching allocator's
  // segments.
  const bool gpu = !docs_.settings().device.empty();
  const QString allocated = gpu ? QStringLiteral("allocated, ") : QString();
  if (measured_src && measured_src->measured && measured_src->measured != primary) {
    overlays.push_back({measured_src->measured,
                        QStringLiteral("%1measured (%2)").arg(allocated, Q(measured_src->title)),
                        QColor(0x11, 0x11, 0x11)});
  }
  int64_t budget = item->budget_bytes >= 0 ? item->budget_bytes : plan ? plan->budget_bytes : -1;
  QString title = QStringLiteral("%1 — peak %2%3")
                      .arg(ItemLabel(*item), BytesQ(primary->peak_bytes),
                           gpu ? QStringLiteral(" allocated") : QString());
  // A file made with other settings, chosen on its own: drawn alone, and said so.
  if (!mismatch.isEmpty())
    title += QStringLiteral(" · ⚠ %1: not the window's settings, drawn alone")
                 .arg(mismatch.join(QStringLiteral("; ")));
  if (primary->reserved.empty() && item->predicted_reserved_peak_bytes >= 0)
    marks.push_back({item->predicted_reserved_peak_bytes,
                     QStringLiteral("reserved peak, predicted"), ReservedColor()});
  // The measured peaks a run or profile gives as figures: each beside the prediction of the
  // same kind (allocated with the stack, reserved with the reserved line).
  ItemPtr profile = docs_.matches(item) ? docs_.profileFor(item) : nullptr;
  if (!profile && docs_.matches(item) && !docs_.profileItems().empty()) {
    const ItemPtr other = docs_.profileItems().back();
    title += QStringLiteral(" · %1 is not a profile of this schedule: %2")
                 .arg(Q(other->title), docs_.mismatchOf(other).join(QStringLiteral("; ")));
  }
  // The measured figures belong to the schedule that ran: shown with the run itself, or with
  // the plan it ran (same strategy and budget), never over another schedule's prediction.
  const bool ran_this =
      run && (item == run || (item->kind == SourceKind::kPlan && item->strategy == run->strategy &&
                              item->budget_bytes == run->budget_bytes));
  ItemPtr figures = ran_this ? run : nullptr;
  if (figures && gpu) {
    if (figures->measured_peak_bytes >= 0 && !figures->measured)
      marks.push_back({figures->measured_peak_bytes, QStringLiteral("allocated peak, measured"),
                       QColor(0x11, 0x11, 0x11)});
    if (figures->measured_reserved_peak_bytes >= 0)
      marks.push_back({figures->measured_reserved_peak_bytes,
                       QStringLiteral("reserved peak, measured"), ReservedColor().darker(140)});
  }
  if (item->kind == SourceKind::kRun && item->measured_peak_bytes >= 0)
    title += QStringLiteral(", measured %1").arg(BytesQ(item->measured_peak_bytes));
  // A profile's measured memory, placed on the predicted steps by scope (MeasuredOnSteps).
  profile_overlay_ = {};
  // A profile of a step that recomputes (a plan's) does not measure a schedule without
  // recompute steps (the plain step), nor the reverse, even where most nodes match.
  auto recomputes = [](const TimelineData& t) {
    return std::find(t.phases.begin(), t.phases.end(), Phase::kRecompute) != t.phases.end();
  };
  auto profile_recomputes = [](const Profile& p) {
    return std::any_of(p.slices.begin(), p.slices.end(),
                       [](const ProfileSlice& s) { return s.scope.phase == Phase::kRecompute; });
  };
  if (profile && item->timeline && primary == item->timeline &&
      recomputes(*item->timeline) != profile_recomputes(*profile->profile)) {
    title += QStringLiteral(" · %1 %2")
                 .arg(Q(profile->title),
                      profile_recomputes(*profile->profile)
                          ? QStringLiteral("measured a plan that recomputes (not drawn here)")
                          : QStringLiteral("measured a step without recompute (not drawn here)"));
    profile.reset();
  }
  if (profile && item->timeline && primary == item->timeline) {
    // CUPTI records the device's memory (cudaMalloc), not the allocator's blocks: a series of
    // its own name and colour, never "measured" beside an allocated prediction.
    const bool cupti = profile->device_memory_peak_bytes >= 0;
    const QString label = cupti ? QStringLiteral("device memory (CUPTI)")
                                : QStringLiteral("measured (%1)").arg(Q(profile->title));
    profile_overlay_ = MeasuredOnSteps(*item->timeline, *profile->profile, label.toStdString());
    if (profile_overlay_.timeline && profile_overlay_.matched_steps * 2 >= profile_overlay_.steps) {
      // A colour of its own: where measured and predicted agree, it traces the prediction's edge.
      overlays.push_back(
          {profile_overlay_.timeline, label, cupti ? DeviceMemoryColor() : ProfileOverlayColor()});
      if (cupti)
        title += QStringLiteral(", device memory %1 (CUPTI, %2")
                     .arg(BytesQ(profile->device_memory_peak_bytes), Q(profile->title));
      else
        title += QStringLiteral(", measured %1 (%2")
                     .arg(BytesQ(profile->measured_peak_bytes), Q(profile->title));
      if (profile->profile->micro_batches > 1) {
        title +=
            QStringLiteral(", its first of %1 micro-batches").arg(profile->profile->micro_batches);
      }
      if (profile_overlay_.matched_steps < profile_overlay_.steps) {
        title += QStringLiteral(", %1 of %2 steps")
                     .arg(profile_overlay_.matched_steps)
                     .arg(profile_overlay_.steps);
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
  chart_->setMarks(std::move(marks));
  chart_->setOverlays(std::move(overlays));
  chart_->setBudget(budget);
  // An offload plan: its copies on the link, under the steps that run beside them.
  if (primary == item->timeline && !primary->copies.empty()) {
    link_->setCopies(primary->copies,
                     QStringLiteral("Link occupancy: %1 copies, %2 s of copies not hidden (stall)")
                         .arg(primary->copies.size())
                         .arg(item->predicted_stall_seconds < 0
                                  ? QStringLiteral("?")
                                  : QString::number(item->predicted_stall_seconds, 'g', 3)));
    link_->setRange(chart_->rangeFirst(), chart_->rangeLast());
    link_->show();
  } else {
    link_->setCopies({}, QString());
    link_->hide();
  }
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
    head +=
        QStringLiteral("<br><i>The tensors alive need the schedule: open the model (.onnx).</i>");
  }
  alive_label_->setText(head);
  alive_model_->setRows(std::move(alive));
  alive_proxy_->sort(AliveModel::kBytes, Qt::DescendingOrder);
}

}  // namespace memplan::gui
