#include "time_page.h"

#include <QBarCategoryAxis>
#include <QBarSeries>
#include <QBarSet>
#include <QChart>
#include <QChartView>
#include <QComboBox>
#include <QFileInfo>
#include <QHBoxLayout>
#include <QHeaderView>
#include <QHorizontalBarSeries>
#include <QLabel>
#include <QLegend>
#include <QRegularExpression>
#include <QSortFilterProxyModel>
#include <QSplitter>
#include <QTableView>
#include <QVBoxLayout>
#include <QValueAxis>
#include <algorithm>

#include "common.h"
#include "document_set.h"
#include "models/time_models.h"
#include "pages/page_util.h"

namespace memplan::gui {

namespace {

// A unit for an axis of seconds.
struct TimeUnit {
  double scale = 1e3;
  QString name = QStringLiteral("ms");
};
TimeUnit TimeUnitFor(double max_seconds) {
  if (max_seconds >= 1) return {1, QStringLiteral("s")};
  if (max_seconds >= 1e-3) return {1e3, QStringLiteral("ms")};
  return {1e6, QStringLiteral("µs")};
}

QString Elide(const QString& s, int max_chars) {
  return s.size() <= max_chars ? s : QStringLiteral("…") + s.right(max_chars - 1);
}

QChartView* MakeChartView() {
  auto* v = new QChartView(new QChart);
  v->setRenderHint(QPainter::Antialiasing);
  v->chart()->setMargins(QMargins(4, 4, 4, 4));
  v->chart()->setAnimationOptions(QChart::NoAnimation);
  v->chart()->legend()->setAlignment(Qt::AlignBottom);
  v->setMinimumSize(300, 240);
  return v;
}

QBarSet* MakeSet(const QString& name, QColor color) {
  auto* set = new QBarSet(name);
  set->setColor(color);
  set->setBorderColor(color.darker(130));
  return set;
}

const Phase kPhases[] = {Phase::kSetup,        Phase::kForward,   Phase::kLoss,
                         Phase::kBackward,     Phase::kRecompute, Phase::kOptimizer,
                         Phase::kCommunication};

}  // namespace

TimePage::TimePage(const DocumentSet& docs, QWidget* parent) : QWidget(parent), docs_(docs) {
  auto* v = new QVBoxLayout(this);
  auto* controls = new QHBoxLayout;
  controls->addWidget(new QLabel(QStringLiteral("Profile")));
  combo_ = new QComboBox;
  combo_->setMinimumWidth(280);
  controls->addWidget(combo_);
  controls->addWidget(new QLabel(QStringLiteral(" Phase")));
  phase_combo_ = new QComboBox;
  phase_combo_->addItem(QStringLiteral("all"), QString());
  for (Phase p : kPhases)
    phase_combo_->addItem(QString::fromLatin1(PhaseName(p)), QString::fromLatin1(PhaseName(p)));
  controls->addWidget(phase_combo_);
  controls->addStretch(1);
  v->addLayout(controls);
  headline_ = new QLabel;
  headline_->setTextFormat(Qt::RichText);
  headline_->setWordWrap(true);
  v->addWidget(headline_);

  auto* vsplit = new QSplitter(Qt::Vertical);
  charts_ = new QWidget;
  auto* ch = new QHBoxLayout(charts_);
  ch->setContentsMargins(0, 0, 0, 0);
  node_chart_ = MakeChartView();
  segment_chart_ = MakeChartView();
  ch->addWidget(node_chart_, 3);
  ch->addWidget(segment_chart_, 2);
  vsplit->addWidget(charts_);

  auto* hsplit = new QSplitter(Qt::Horizontal);
  node_model_ = new NodeTimeModel(this);
  node_proxy_ = new QSortFilterProxyModel(this);
  node_proxy_->setSourceModel(node_model_);
  node_proxy_->setSortRole(Qt::UserRole);
  node_proxy_->setFilterKeyColumn(NodeTimeModel::kPhase);
  QTableView* nt = MakeTable(node_proxy_, hsplit, /*sortable=*/true);
  nt->setColumnWidth(NodeTimeModel::kNode, 220);
  nt->setColumnWidth(NodeTimeModel::kOp, 110);
  nt->setColumnWidth(NodeTimeModel::kPhase, 80);
  nt->setColumnWidth(NodeTimeModel::kSegment, 64);
  nt->setColumnWidth(NodeTimeModel::kCalls, 50);
  nt->sortByColumn(NodeTimeModel::kMeasured, Qt::DescendingOrder);
  hsplit->addWidget(nt);
  recompute_model_ = new RecomputeTimeModel(this);
  QTableView* rt = MakeTable(recompute_model_, hsplit);
  rt->setColumnWidth(RecomputeTimeModel::kSegment, 110);
  hsplit->addWidget(rt);
  hsplit->setStretchFactor(0, 3);
  hsplit->setStretchFactor(1, 2);
  hsplit->setSizes({880, 520});
  vsplit->addWidget(hsplit);
  vsplit->setStretchFactor(0, 3);
  vsplit->setStretchFactor(1, 2);
  vsplit->setSizes({460, 300});
  v->addWidget(vsplit, 1);

  connect(combo_, &QComboBox::currentIndexChanged, this, [this] {
    if (!refreshing_) showSelected();
  });
  connect(phase_combo_, &QComboBox::currentIndexChanged, this, [this] {
    const QString phase = phase_combo_->currentData().toString();
    node_proxy_->setFilterRegularExpression(
        phase.isEmpty() ? QRegularExpression()
                        : QRegularExpression(QStringLiteral("^%1$").arg(phase)));
    refreshNodeChart();
  });
  showSelected();
}

void TimePage::refresh() {
  refreshing_ = true;
  std::vector<ItemPtr> list = docs_.profileItems();
  FillItemCombo(combo_, list, static_cast<int>(list.size()) - 1);
  refreshing_ = false;
  showSelected();
}

ItemPtr TimePage::selectedItem() const {
  std::vector<ItemPtr> list = docs_.profileItems();
  int i = combo_->currentIndex();
  return i >= 0 && i < static_cast<int>(list.size()) ? list[i] : nullptr;
}

void TimePage::setPhaseFilter(const QString& phase) {
  int i = phase_combo_->findData(phase);
  if (i >= 0) phase_combo_->setCurrentIndex(i);
}

void TimePage::showSelected() {
  ItemPtr item = selectedItem();
  std::shared_ptr<const Profile> p = item ? item->profile : nullptr;
  node_model_->setProfile(p);
  recompute_model_->setProfile(p);
  if (!p) {
    headline_->setText(QStringLiteral(
        "<b>No profile open.</b> Profile a step with <tt>memplan run MODEL [--plan PLAN.json] "
        "--profile OUT.json</tt> and open OUT.json to see measured against predicted time."));
  } else {
    QStringList parts;
    parts << QStringLiteral("<b>%1</b> · step %2 (%3)")
                 .arg(QFileInfo(Q(p->model)).fileName().toHtmlEscaped(),
                      DurationText(p->step_seconds),
                      HasDeviceTimes(*p) ? QStringLiteral("kernel times from CUPTI")
                                         : QStringLiteral("host times"));
    for (Phase ph : kPhases) {
      const double s = p->PhaseSeconds(ph);
      if (s > 0)
        parts << QStringLiteral("%1 %2").arg(QString::fromLatin1(PhaseName(ph)), DurationText(s));
    }
    parts << QStringLiteral("peak %1").arg(BytesQ(p->peak_bytes));
    QString head = parts.join(QStringLiteral(" · "));
    head +=
        QStringLiteral("<br><span style='color:gray'>%1 backend on %2, batch %3%4</span>")
            .arg(Q(p->backend).toHtmlEscaped(), Q(p->device).toHtmlEscaped())
            .arg(p->batch)
            .arg(p->micro_batches > 1 ? QStringLiteral(" in %1 micro-batches").arg(p->micro_batches)
                                      : QString());
    for (const std::string& note : item->notes)
      head +=
          QStringLiteral("<br><span style='color:#b01010'>%1</span>").arg(Q(note).toHtmlEscaped());
    headline_->setText(head);
  }
  refreshNodeChart();
  refreshSegmentChart();
}

void TimePage::refreshNodeChart() {
  QChart* c = node_chart_->chart();
  ClearChart(c);
  ItemPtr item = selectedItem();
  if (!item || !item->profile) {
    c->setTitle(QStringLiteral("Time per node: no profile open"));
    return;
  }
  const QString phase = phase_combo_->currentData().toString();
  std::vector<const NodeTimeRow*> rows;
  bool predicted_any = false;
  for (const NodeTimeRow& r : node_model_->rows()) {
    if (r.node.node == kNone) continue;
    if (!phase.isEmpty() && phase != QLatin1String(PhaseName(r.node.phase))) continue;
    rows.push_back(&r);
    predicted_any = predicted_any || r.node.predicted_seconds > 0;
  }
  std::stable_sort(rows.begin(), rows.end(), [](const NodeTimeRow* a, const NodeTimeRow* b) {
    return a->measured > b->measured;
  });
  if (rows.size() > static_cast<size_t>(kChartNodes)) rows.resize(kChartNodes);
  const QString where = phase.isEmpty() ? QString() : QStringLiteral(" of the %1").arg(phase);
  if (rows.empty()) {
    c->setTitle(QStringLiteral("Time per node: no node%1 in this profile").arg(where));
    return;
  }
  double max_s = 0;
  for (const NodeTimeRow* r : rows)
    max_s = std::max({max_s, r->measured, r->node.predicted_seconds});
  const TimeUnit unit = TimeUnitFor(max_s);
  QBarSet* measured = MakeSet(HasDeviceTimes(*item->profile) ? QStringLiteral("measured (kernels)")
                                                             : QStringLiteral("measured (host)"),
                              MeasuredColor());
  QBarSet* predicted = MakeSet(QStringLiteral("predicted (cost model)"), PredictedColor());
  QStringList categories;
  // A horizontal bar chart draws its first category at the bottom: the slowest goes last.
  for (auto it = rows.rbegin(); it != rows.rend(); ++it) {
    categories << Elide(NodeTimeLabel((*it)->node), 46);
    measured->append((*it)->measured * unit.scale);
    predicted->append((*it)->node.predicted_seconds * unit.scale);
  }
  auto* series = new QHorizontalBarSeries;
  series->append(measured);
  if (predicted_any)
    series->append(predicted);
  else
    delete predicted;
  series->setBarWidth(0.8);
  c->addSeries(series);
  auto* ay = new QBarCategoryAxis;
  ay->append(categories);
  QFont f = ay->labelsFont();
  f.setPointSizeF(f.pointSizeF() * 0.85);
  ay->setLabelsFont(f);
  auto* ax = new QValueAxis;
  ax->setMin(0);
  ax->setMax(max_s * unit.scale * 1.05);
  ax->applyNiceNumbers();
  ax->setLabelFormat(QStringLiteral("%g"));
  ax->setTitleText(QStringLiteral("time (%1)").arg(unit.name));
  c->addAxis(ay, Qt::AlignLeft);
  c->addAxis(ax, Qt::AlignBottom);
  series->attachAxis(ay);
  series->attachAxis(ax);
  c->setTitle(QStringLiteral("The %1 slowest nodes%2: measured%3")
                  .arg(rows.size())
                  .arg(where, predicted_any
                                  ? QStringLiteral(" vs predicted")
                                  : QStringLiteral(" (this profile has no predictions)")));
}

void TimePage::refreshSegmentChart() {
  QChart* c = segment_chart_->chart();
  ClearChart(c);
  ItemPtr item = selectedItem();
  if (!item || !item->profile) {
    c->setTitle(QStringLiteral("Recompute per segment: no profile open"));
    return;
  }
  const Profile& p = *item->profile;
  QStringList categories;
  QBarSet* measured = MakeSet(QStringLiteral("measured"), MeasuredColor());
  QBarSet* predicted = nullptr;
  double max_s = 0;
  std::vector<std::pair<QString, std::pair<double, double>>> bars;  // label, (measured, predicted)
  for (const RecomputeTimeRow& r : recompute_model_->rows()) {
    if (r.segment < 0) continue;  // the total is in the table
    bars.push_back({QStringLiteral("segment %1").arg(r.segment), {r.measured, r.predicted}});
  }
  const bool recomputes = !bars.empty();
  if (recomputes) {
    bool predicted_any = false;
    for (const auto& b : bars) predicted_any = predicted_any || b.second.second > 0;
    if (predicted_any)
      predicted = MakeSet(QStringLiteral("predicted (cost model)"), PredictedColor());
    c->setTitle(QStringLiteral("Recompute per segment: %1 measured vs %2 predicted")
                    .arg(DurationText(p.RecomputeSeconds()),
                         predicted_any ? DurationText(p.PredictedRecomputeSeconds())
                                       : QStringLiteral("\u2014")));
  } else {
    // A plan without recompute: the time per phase instead of an empty chart.
    for (Phase ph : kPhases) {
      const double s = p.PhaseSeconds(ph);
      if (s > 0) bars.push_back({QString::fromLatin1(PhaseName(ph)), {s, 0}});
    }
    c->setTitle(QStringLiteral("Time per phase (this step recomputes nothing)"));
  }
  for (const auto& [label, v] : bars) {
    categories << label;
    max_s = std::max({max_s, v.first, v.second});
  }
  if (bars.empty()) {
    delete measured;
    delete predicted;
    return;
  }
  const TimeUnit unit = TimeUnitFor(max_s);
  for (const auto& [label, v] : bars) {
    measured->append(v.first * unit.scale);
    if (predicted) predicted->append(v.second * unit.scale);
  }
  auto* series = new QBarSeries;
  series->append(measured);
  if (predicted) series->append(predicted);
  c->addSeries(series);
  auto* ax = new QBarCategoryAxis;
  ax->append(categories);
  auto* ay = new QValueAxis;
  ay->setMin(0);
  ay->setMax(std::max(max_s * unit.scale * 1.1, 1e-9));
  ay->applyNiceNumbers();
  ay->setLabelFormat(QStringLiteral("%g"));
  ay->setTitleText(QStringLiteral("time (%1)").arg(unit.name));
  c->addAxis(ax, Qt::AlignBottom);
  c->addAxis(ay, Qt::AlignLeft);
  series->attachAxis(ax);
  series->attachAxis(ay);
  if (!recomputes)
    c->legend()->setVisible(false);
  else
    c->legend()->setVisible(true);
}

}  // namespace memplan::gui
