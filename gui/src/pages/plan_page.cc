#include "plan_page.h"

#include <QChart>
#include <QChartView>
#include <QComboBox>
#include <QCoreApplication>
#include <QDeadlineTimer>
#include <QFileDialog>
#include <QFutureWatcher>
#include <QHBoxLayout>
#include <QLabel>
#include <QLineEdit>
#include <QLineSeries>
#include <QPainter>
#include <QProgressBar>
#include <QPushButton>
#include <QScatterSeries>
#include <QSignalBlocker>
#include <QSlider>
#include <QSplitter>
#include <QTableView>
#include <QThread>
#include <QTimer>
#include <QVBoxLayout>
#include <QValueAxis>
#include <QtConcurrent/QtConcurrentRun>
#include <algorithm>
#include <cmath>

#include "common.h"
#include "document_set.h"
#include "memplan/parse.h"
#include "models/strategy_model.h"
#include "pages/page_util.h"
#include "plan_worker.h"
#include "timeline_chart.h"

namespace memplan::gui {

PlanPage::PlanPage(const DocumentSet& docs, QWidget* parent) : QWidget(parent), docs_(docs) {
  plan_worker_ = new PlanWorker(this);
  connect(plan_worker_, &PlanWorker::planned, this, [this](ItemPtr item) {
    plan_status_->setText(
        QStringLiteral("Plan <b>%1</b>: peak %2 for a budget of %3 (%4), recompute overhead %5, "
                       "verified by replaying its schedule.")
            .arg(Q(item->strategy),
                 item->predicted_reserved_peak_bytes >= 0
                     ? QStringLiteral("%1 allocated, %2 reserved")
                           .arg(BytesQ(item->plan_peak_bytes),
                                BytesQ(item->predicted_reserved_peak_bytes))
                     : BytesQ(item->plan_peak_bytes),
                 item->budget_of.empty() ? BytesQ(item->budget_bytes)
                                         : QStringLiteral("%1 of %2 memory")
                                               .arg(BytesQ(item->budget_bytes), Q(item->budget_of)),
                 item->feasible == 1
                     ? QStringLiteral("fits")
                     : QStringLiteral("<span style='color:#c01010'>does not fit</span>"),
                 Q(PercentText(item->overhead))));
    if (item->offload) {
      // Offload: what moves to pinned host memory, its peak against the host budget, the stall,
      // and the planner's own words on its choice.
      QString text = plan_status_->text();
      text += QStringLiteral(
                  "<br>Offloaded %1 storages (%2) to pinned host memory; host peak %3 "
                  "of a host budget of %4; %5 s of copies not hidden (stall).")
                  .arg(item->offloaded.size())
                  .arg(BytesQ(item->offloaded_bytes), BytesQ(item->predicted_host_peak_bytes),
                       item->host_budget_bytes > 0 ? BytesQ(item->host_budget_bytes)
                                                   : QStringLiteral("no limit"))
                  .arg(item->predicted_stall_seconds, 0, 'g', 3);
      for (const std::string& note : item->notes)
        text += QStringLiteral("<br><i>%1</i>").arg(Q(note).toHtmlEscaped());
      plan_status_->setText(text);
    }
    emit planned(std::move(item));
  });
  connect(plan_worker_, &PlanWorker::failed, this, [this](const QString& m) {
    plan_status_->setText(
        QStringLiteral("<span style='color:#c01010'>%1</span>").arg(m.toHtmlEscaped()));
  });

  auto* v = new QVBoxLayout(this);
  auto* controls = new QHBoxLayout;
  controls->addWidget(new QLabel(QStringLiteral("Strategy")));
  strategy_combo_ = new QComboBox;
  strategy_combo_->addItems(PlannerAvailable() ? PlannerStrategies()
                                               : QStringList{QStringLiteral("auto")});
  controls->addWidget(strategy_combo_);
  controls->addWidget(new QLabel(QStringLiteral("Host budget")));
  host_budget_ = new QLineEdit;
  host_budget_->setPlaceholderText(QStringLiteral("default"));
  host_budget_->setToolTip(QStringLiteral(
      "offload: the pinned host memory a plan may hold (a size: 512MiB, 8GB); empty: the memory "
      "available now, less 10% and 1 GiB, as memplan plan --host-budget. A given one also lets "
      "auto try offload."));
  host_budget_->setMaximumWidth(110);
  controls->addWidget(host_budget_);
  controls->addWidget(new QLabel(QStringLiteral("Budget")));
  budget_slider_ = new QSlider(Qt::Horizontal);
  budget_slider_->setRange(5, 100);  // percent of the baseline peak
  budget_slider_->setValue(50);
  budget_slider_->setMinimumWidth(300);
  controls->addWidget(budget_slider_, 1);
  budget_label_ = new QLabel;
  budget_label_->setMinimumWidth(190);
  controls->addWidget(budget_label_);
  save_plan_ = new QPushButton(QStringLiteral("Save plan…"));
  controls->addWidget(save_plan_);
  v->addLayout(controls);
  plan_status_ = new QLabel;
  plan_status_->setWordWrap(true);
  plan_status_->setTextFormat(Qt::RichText);
  v->addWidget(plan_status_);

  // The plan's timeline across the whole width; below it the Pareto curve beside the
  // strategies, so that neither chart is squeezed into a column (1024x768 included).
  auto* vsplit = new QSplitter(Qt::Vertical);
  auto* hsplit = new QSplitter(Qt::Horizontal);
  plan_chart_ = new TimelineChart;
  plan_chart_->setMinimumHeight(240);
  plan_chart_->setCompactLegend(true);
  vsplit->addWidget(plan_chart_);
  auto* pareto = new QWidget;
  auto* pv = new QVBoxLayout(pareto);
  pv->setContentsMargins(0, 0, 0, 0);
  auto* py = new QHBoxLayout;
  py->addWidget(new QLabel(QStringLiteral("Recompute as")));
  pareto_y_ = new QComboBox;
  pareto_y_->addItems(
      {QStringLiteral("FLOPs (% of the forward)"), QStringLiteral("predicted time")});
  pareto_y_->setToolTip(QStringLiteral(
      "The planner's numbers for each plan: recompute FLOPs over forward FLOPs, or the cost "
      "model's predicted recompute seconds (what `selective` minimises)"));
  py->addWidget(pareto_y_);
  // The sweep runs in the background when the page opens: its progress, series by series.
  sweep_label_ = new QLabel;
  py->addWidget(sweep_label_);
  sweep_progress_ = new QProgressBar;
  sweep_progress_->setMaximumWidth(160);
  sweep_progress_->setTextVisible(false);
  sweep_progress_->hide();
  py->addWidget(sweep_progress_);
  py->addStretch(1);
  pv->addLayout(py);
  pareto_chart_ = new QChartView(new QChart);
  pareto_chart_->setRenderHint(QPainter::Antialiasing);
  pareto_chart_->setMinimumSize(360, 220);
  pareto_chart_->chart()->setMargins(QMargins(4, 4, 4, 4));
  pareto_chart_->chart()->legend()->setAlignment(Qt::AlignBottom);
  pv->addWidget(pareto_chart_, 1);
  hsplit->addWidget(pareto);
  strategies_model_ = new StrategyModel(this);
  QTableView* strategies = MakeTable(strategies_model_, hsplit);
  strategies->setColumnWidth(StrategyModel::kRecomputeTime, 150);
  strategies->setColumnWidth(StrategyModel::kRecomputed, 150);
  hsplit->addWidget(strategies);
  hsplit->setStretchFactor(0, 1);
  hsplit->setStretchFactor(1, 1);
  vsplit->addWidget(hsplit);
  vsplit->setStretchFactor(0, 1);
  vsplit->setStretchFactor(1, 1);
  vsplit->setSizes({420, 360});
  v->addWidget(vsplit, 1);

  auto* debounce = new QTimer(this);
  debounce->setSingleShot(true);
  debounce->setInterval(150);
  connect(debounce, &QTimer::timeout, this, &PlanPage::scheduleReplan);
  connect(budget_slider_, &QSlider::valueChanged, this, [this, debounce] {
    requested_budget_ = -1;
    refresh();
    if (PlannerAvailable()) debounce->start();
  });
  connect(strategy_combo_, &QComboBox::currentIndexChanged, this, [debounce] {
    if (PlannerAvailable()) debounce->start();
  });
  connect(host_budget_, &QLineEdit::editingFinished, this, [debounce] {
    if (PlannerAvailable()) debounce->start();
  });
  connect(save_plan_, &QPushButton::clicked, this, &PlanPage::savePlan);
  connect(pareto_y_, &QComboBox::currentIndexChanged, this,
          [this] { refreshPareto(docs_.planItem()); });
}

void PlanPage::setParetoSeconds(bool seconds) { pareto_y_->setCurrentIndex(seconds ? 1 : 0); }

bool PlanPage::busy() const { return plan_worker_->busy() || sweeping_; }
bool PlanPage::waitForIdle(int timeout_ms) {
  QDeadlineTimer deadline(timeout_ms);
  while (busy() && !deadline.hasExpired()) {
    if (plan_worker_->busy()) plan_worker_->waitForIdle(50);
    QCoreApplication::processEvents(QEventLoop::AllEvents, 50);
    if (busy()) QThread::msleep(5);
  }
  return !busy();
}

void PlanPage::setHostBudgetText(const QString& text) { host_budget_->setText(text); }
QString PlanPage::hostBudgetText() const { return host_budget_->text(); }

int PlanPage::sliderPercent() const { return budget_slider_->value(); }
QString PlanPage::budgetText() const { return budget_label_->text(); }
QString PlanPage::statusText() const { return plan_status_->text(); }

// The latest plan file shown (not the explorer's own plan).
ItemPtr PlanPage::planFile() const {
  ItemPtr last;
  for (const ItemPtr& p : docs_.items())
    if (p->kind == SourceKind::kPlan && p != docs_.explorerPlan() && docs_.matches(p)) last = p;
  return last;
}

int64_t PlanPage::sliderBaselineBytes() const {
  ItemPtr file = planFile(), base = docs_.baseItem();
  if (file && file->baseline_peak_bytes > 0) return file->baseline_peak_bytes;
  return base ? base->baseline_peak_bytes : -1;
}

PlanRequest PlanPage::baseRequest() const {
  ItemPtr base = docs_.baseItem();
  PlanRequest r;
  if (!base) return r;
  r.analysis = base->analysis;
  r.model_path = base->path;
  r.machine_rates = machine_rates_;
  r.device = docs_.settings().device;
  r.allocator_mode = docs_.settings().allocator_mode;
  return r;
}

void PlanPage::showEvent(QShowEvent* e) {
  QWidget::showEvent(e);
  ItemPtr base = docs_.baseItem();
  if (!PlannerAvailable() || !base || !base->analysis) return;
  startSweep();
  // Whenever a model is open the explorer plans it: at the slider's budget, once per model,
  // unless a plan file is open (then it is shown until the slider moves).
  if (!docs_.explorerPlan() && !planFile() && auto_planned_for_ != base->analysis.get()) {
    auto_planned_for_ = base->analysis.get();
    scheduleReplan();
  }
}

void PlanPage::startSweep() {
  ItemPtr base = docs_.baseItem();
  if (!PlannerAvailable() || !base || !base->analysis || sweeping_) return;
  if (sweep_for_ == base->analysis.get()) return;
  sweep_for_ = base->analysis.get();
  sweep_points_.clear();
  sweep_todo_.clear();
  const std::string chosen = strategy_combo_->currentText().toStdString();
  sweep_todo_.push_back(chosen);
  if (chosen != "selective" && PlannerStrategies().contains(QStringLiteral("selective")))
    sweep_todo_.push_back("selective");
  sweep_total_ = static_cast<int>(sweep_todo_.size());
  sweeping_ = true;
  sweep_progress_->setRange(0, sweep_total_);
  sweep_progress_->setValue(0);
  sweep_progress_->show();
  sweepNext();
}

// One strategy's sweep at a time in a worker thread; the chart grows as each one lands.
void PlanPage::sweepNext() {
  if (sweep_todo_.empty() ||
      sweep_for_ != (docs_.baseItem() ? docs_.baseItem()->analysis.get() : nullptr)) {
    sweeping_ = false;
    sweep_progress_->hide();
    sweep_label_->setText(sweep_points_.empty()
                              ? QString()
                              : QStringLiteral("sweep: %1 plans").arg(sweep_points_.size()));
    refreshPareto(docs_.planItem());
    return;
  }
  const std::string strategy = sweep_todo_.front();
  sweep_todo_.erase(sweep_todo_.begin());
  sweep_label_->setText(QStringLiteral("sweeping %1 (%2 of %3)…")
                            .arg(Q(strategy))
                            .arg(sweep_total_ - static_cast<int>(sweep_todo_.size()))
                            .arg(sweep_total_));
  using Points = std::vector<ParetoPoint>;
  auto* watcher = new QFutureWatcher<Points>(this);
  connect(watcher, &QFutureWatcher<Points>::finished, this, [this, watcher] {
    Points points = watcher->result();
    watcher->deleteLater();
    sweep_points_.insert(sweep_points_.end(), points.begin(), points.end());
    sweep_progress_->setValue(sweep_total_ - static_cast<int>(sweep_todo_.size()));
    refreshPareto(docs_.planItem());
    sweepNext();
  });
  watcher->setFuture(QtConcurrent::run([r = baseRequest(), strategy]() -> Points {
    try {
      return SweepSeries(r, strategy);
    } catch (const std::exception&) {
      return {};  // a strategy that cannot sweep this graph adds no series
    }
  }));
}

void PlanPage::refresh() {
  ItemPtr base = docs_.baseItem();
  ItemPtr plan = docs_.planItem();
  const bool can_plan = PlannerAvailable() && base && base->analysis;
  budget_slider_->setEnabled(can_plan);
  strategy_combo_->setEnabled(can_plan);
  save_plan_->setEnabled(PlannerAvailable() && docs_.explorerPlan() != nullptr);
  const int64_t baseline = can_plan || !plan ? sliderBaselineBytes() : plan->baseline_peak_bytes;
  ItemPtr file = planFile();
  if (can_plan) {
    if (file && !docs_.explorerPlan() && requested_budget_ < 0 && baseline > 0) {
      // The slider starts at the opened plan's budget, a share of that plan's own baseline.
      QSignalBlocker block(budget_slider_), block_combo(strategy_combo_);
      budget_slider_->setValue(
          static_cast<int>(std::llround(100.0 * file->budget_bytes / baseline)));
      if (int i = strategy_combo_->findText(Q(file->strategy)); i >= 0)
        strategy_combo_->setCurrentIndex(i);
    }
    int64_t budget = requested_budget_ > 0
                         ? requested_budget_
                         : Budget{.percent = 1.0 * budget_slider_->value()}.Resolve(baseline);
    budget_label_->setText(
        QStringLiteral("%1 (%2% of %3 %4)")
            .arg(BytesQ(budget))
            .arg(budget_slider_->value())
            .arg(file ? QStringLiteral("the plan's baseline") : QStringLiteral("the baseline"),
                 BytesQ(baseline)));
    if (!plan_worker_->busy() && !docs_.explorerPlan()) {
      plan_status_->setText(
          QStringLiteral("<i>%1 Move the slider or pick a strategy to re-plan %2 (%3).</i>")
              .arg(file ? QStringLiteral("Showing %1.").arg(Q(file->title).toHtmlEscaped())
                        : QString(),
                   Q(base->title).toHtmlEscaped(), Q(SettingsText(docs_.settings()))));
    }
  } else {
    budget_label_->setText(plan ? QStringLiteral("%1").arg(BytesQ(plan->budget_bytes)) : QString());
    if (!PlannerAvailable()) {
      plan_status_->setText(QStringLiteral(
          "<i>Re-planning needs the planner library, which this build does not have. "
          "Plans made by <tt>memplan plan --json</tt> can be opened and explored here.</i>"));
    } else if (!base || !base->analysis) {
      plan_status_->setText(
          QStringLiteral("<i>Open a model (.onnx) to re-plan with the budget slider.</i>"));
    }
  }
  if (plan) {
    std::shared_ptr<const TimelineData> t = plan->timeline;
    // On a GPU: allocated beside reserved, and what the budget bounds.
    QString peaks = BytesQ(plan->plan_peak_bytes);
    if (plan->predicted_reserved_peak_bytes >= 0)
      peaks = QStringLiteral("%1 allocated, %2 reserved")
                  .arg(peaks, BytesQ(plan->predicted_reserved_peak_bytes));
    QString budget = BytesQ(plan->budget_bytes);
    if (!plan->budget_of.empty()) budget += QStringLiteral(" of %1 memory").arg(Q(plan->budget_of));
    plan_chart_->setPrimary(
        t, QStringLiteral("Plan %1 — peak %2, budget %3").arg(Q(plan->strategy), peaks, budget));
    std::vector<Overlay> overlays;
    if (base && base->timeline)
      overlays.push_back({base->timeline, QStringLiteral("no plan"), QColor(0x55, 0x55, 0x55)});
    std::vector<Mark> marks;
    if (t && t->reserved.empty() && plan->predicted_reserved_peak_bytes >= 0)
      marks.push_back({plan->predicted_reserved_peak_bytes,
                       QStringLiteral("reserved peak, predicted"), ReservedColor()});
    plan_chart_->setMarks(std::move(marks));
    plan_chart_->setOverlays(std::move(overlays));
    plan_chart_->setBudget(plan->budget_bytes);
  } else {
    plan_chart_->setPrimary(nullptr, QStringLiteral("No plan yet"));
    plan_chart_->setOverlays({});
    plan_chart_->setMarks({});
    plan_chart_->setBudget(-1);
  }
  refreshPareto(plan);
  strategies_model_->setRows(plan ? plan->strategies : std::vector<StrategyRow>{});
}

// The Pareto curves: peak against recompute, one series per sweep (the chosen strategy's and,
// when the planner offers it, `selective`'s), the current plan marked. Every value is the
// planner's: the plans' predicted peaks, FLOPs overheads and predicted recompute seconds.
void PlanPage::refreshPareto(const ItemPtr& plan) {
  QChart* chart = pareto_chart_->chart();
  ClearChart(chart);
  const bool seconds = pareto_y_->currentIndex() == 1;
  chart->setTitle(seconds
                      ? QStringLiteral("Pareto curve: peak vs predicted recompute time")
                      : QStringLiteral("Pareto curve: peak vs recompute (% of the forward FLOPs)"));
  std::vector<ParetoPoint> sweep = plan ? plan->sweep : std::vector<ParetoPoint>{};
  // The background sweep of the open model, while no plan brings its own.
  ItemPtr base = docs_.baseItem();
  if (sweep.empty() && base && base->analysis.get() == sweep_for_) sweep = sweep_points_;
  if (sweep.empty() && !plan) {
    chart->setTitle(QStringLiteral("Pareto curve (open a plan made with --sweep)"));
    return;
  }
  // A point's recompute on the chosen axis; negative: unknown (a file without seconds).
  auto recompute = [seconds](double overhead, double recompute_seconds) {
    return seconds ? recompute_seconds : overhead * 100;
  };
  int64_t max_b = 1;
  double max_y = 0;
  for (const ParetoPoint& p : sweep) {
    max_b = std::max(max_b, p.peak_bytes);
    max_y = std::max(max_y, recompute(p.overhead, p.recompute_seconds));
  }
  const double plan_y =
      plan ? recompute(std::max(0.0, plan->overhead), plan->predicted_recompute_seconds) : -1;
  if (plan) {
    max_b = std::max(max_b, plan->plan_peak_bytes);
    max_y = std::max(max_y, plan_y);
  }
  ByteUnit unit = UnitFor(max_b);
  // Seconds in ms below one second.
  const double y_scale = seconds && max_y < 1 ? 1000 : 1;
  // One series per sweep, in the order the sweeps come (the chosen strategy's first).
  std::vector<QString> names;
  for (const ParetoPoint& p : sweep) {
    const QString name = p.series.empty() ? QStringLiteral("sweep") : Q(p.series);
    if (std::find(names.begin(), names.end(), name) == names.end()) names.push_back(name);
  }
  std::stable_sort(sweep.begin(), sweep.end(), [](const ParetoPoint& a, const ParetoPoint& b) {
    return a.peak_bytes < b.peak_bytes;
  });
  auto* ax = new QValueAxis;
  ax->setTitleText(!docs_.settings().device.empty()
                       ? QStringLiteral("peak, allocated (%1)").arg(unit.name)
                       : QStringLiteral("peak (%1)").arg(unit.name));
  auto* ay = new QValueAxis;
  // Short titles and few ticks: readable where the chart is small (1024x768).
  ay->setTitleText(!seconds      ? QStringLiteral("recompute (%)")
                   : y_scale > 1 ? QStringLiteral("predicted recompute (ms)")
                                 : QStringLiteral("predicted recompute (s)"));
  ax->setTickCount(5);
  ay->setTickCount(5);
  chart->addAxis(ax, Qt::AlignBottom);
  chart->addAxis(ay, Qt::AlignLeft);
  double ymax = seconds ? 0 : 1, xmax = static_cast<double>(max_b) / unit.divisor;
  for (const QString& name : names) {
    auto* line = new QLineSeries;
    auto* dots = new QScatterSeries;
    line->setName(name == QLatin1String("sweep") ? QStringLiteral("sweep")
                                                 : QStringLiteral("%1 sweep").arg(name));
    dots->setName(name == QLatin1String("sweep") ? QStringLiteral("plans")
                                                 : QStringLiteral("%1 plans").arg(name));
    dots->setMarkerSize(7);
    if (name == QLatin1String("selective")) {
      line->setColor(SelectiveColor());
      dots->setColor(SelectiveColor());
      dots->setMarkerShape(QScatterSeries::MarkerShapeRectangle);
    } else {
      line->setColor(PredictedColor());
      dots->setColor(PredictedColor());
    }
    for (const ParetoPoint& p : sweep) {
      if ((p.series.empty() ? QStringLiteral("sweep") : Q(p.series)) != name) continue;
      const double y = recompute(p.overhead, p.recompute_seconds);
      if (y < 0) continue;
      QPointF pt(static_cast<double>(p.peak_bytes) / unit.divisor, y * y_scale);
      line->append(pt);
      dots->append(pt);
      ymax = std::max(ymax, y * y_scale);
    }
    for (QAbstractSeries* s :
         {static_cast<QAbstractSeries*>(line), static_cast<QAbstractSeries*>(dots)}) {
      chart->addSeries(s);
      s->attachAxis(ax);
      s->attachAxis(ay);
    }
  }
  if (plan && plan->plan_peak_bytes >= 0 && plan_y >= 0) {
    auto* cur = new QScatterSeries;
    cur->setName(QStringLiteral("current plan"));
    cur->setMarkerSize(13);
    cur->setColor(QColor(0xc0, 0x10, 0x10));
    cur->append(static_cast<double>(plan->plan_peak_bytes) / unit.divisor, plan_y * y_scale);
    ymax = std::max(ymax, plan_y * y_scale);
    chart->addSeries(cur);
    cur->attachAxis(ax);
    cur->attachAxis(ay);
  }
  if (ymax <= 0) ymax = 1;
  ax->setRange(0, xmax * 1.1);
  ay->setRange(0, ymax * 1.15);
  ax->applyNiceNumbers();
  ay->applyNiceNumbers();
  ax->setLabelFormat(ax->max() < 10 ? QStringLiteral("%.1f") : QStringLiteral("%.0f"));
  ay->setLabelFormat(ay->max() < 10 ? QStringLiteral("%.1f") : QStringLiteral("%.0f"));
}

void PlanPage::scheduleReplan() {
  ItemPtr base = docs_.baseItem();
  if (!PlannerAvailable() || !base || !base->analysis) return;
  // The slider's percentage resolves as `memplan plan --budget N%` does, of the baseline it
  // spans (the opened plan's own, when one is open).
  int64_t budget = Budget{.percent = 1.0 * budget_slider_->value()}.Resolve(sliderBaselineBytes());
  requestPlan(budget, strategy_combo_->currentText());
}

void PlanPage::requestPlan(int64_t budget_bytes, const QString& strategy) {
  ItemPtr base = docs_.baseItem();
  if (!base || !base->analysis) {
    plan_status_->setText(QStringLiteral("<i>Open a model (.onnx) to re-plan.</i>"));
    return;
  }
  {
    // Show the request in the controls without re-triggering them.
    QSignalBlocker b1(budget_slider_), b2(strategy_combo_);
    int i = strategy_combo_->findText(strategy);
    if (i >= 0) strategy_combo_->setCurrentIndex(i);
    if (const int64_t baseline = sliderBaselineBytes(); baseline > 0) {
      budget_slider_->setValue(static_cast<int>(std::llround(100.0 * budget_bytes / baseline)));
    }
  }
  requested_budget_ = budget_bytes;
  PlanRequest r = baseRequest();
  // The host budget: the command line's reading of a size (ParseBytes, as --host-budget).
  const std::string host = host_budget_->text().trimmed().toStdString();
  if (!host.empty()) {
    try {
      r.host_budget_bytes = ParseBytes(host);
    } catch (const MemplanError& e) {
      plan_status_->setText(QStringLiteral("<span style='color:#c01010'>Host budget: %1</span>")
                                .arg(QString::fromStdString(e.what()).toHtmlEscaped()));
      return;
    }
    if (r.host_budget_bytes <= 0) {
      plan_status_->setText(QStringLiteral(
          "<span style='color:#c01010'>Host budget: must be more than 0 bytes</span>"));
      return;
    }
  }
  r.budget_bytes = budget_bytes;
  r.strategy = strategy.toStdString();
  r.sweep = true;
  plan_status_->setText(QStringLiteral("Planning %1 for %2…").arg(strategy, BytesQ(budget_bytes)));
  plan_worker_->request(std::move(r));
}

void PlanPage::savePlan() {
  ItemPtr plan = docs_.explorerPlan();
  if (!plan) return;
  QString path =
      QFileDialog::getSaveFileName(this, QStringLiteral("Save plan"), QStringLiteral("plan.json"),
                                   QStringLiteral("JSON (*.json)"));
  if (path.isEmpty()) return;
  try {
    SavePlanJson(*plan, path.toStdString());
    emit saved(path);
  } catch (const std::exception& e) {
    emit error(QString::fromStdString(e.what()));
  }
}

}  // namespace memplan::gui
