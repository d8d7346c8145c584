#include "main_window.h"

#include <QAction>
#include <QApplication>
#include <QBuffer>
#include <QBarCategoryAxis>
#include <QBarSet>
#include <QChart>
#include <QChartView>
#include <QCheckBox>
#include <QComboBox>
#include <QDeadlineTimer>
#include <QFileDialog>
#include <QFileInfo>
#include <QHBoxLayout>
#include <QHeaderView>
#include <QHorizontalBarSeries>
#include <QLabel>
#include <QLineSeries>
#include <QPainter>
#include <QPushButton>
#include <QScatterSeries>
#include <QScrollArea>
#include <QSignalBlocker>
#include <QSlider>
#include <QSortFilterProxyModel>
#include <QSpinBox>
#include <QSplitter>
#include <QStatusBar>
#include <QTabWidget>
#include <QTableView>
#include <QThread>
#include <QTimer>
#include <QToolBar>
#include <QVBoxLayout>
#include <QValueAxis>
#include <algorithm>
#include <cmath>
#include <set>

#ifdef MEMPLAN_GUI_HAVE_SVG
#include <QSvgGenerator>
#endif

#include "common.h"
#include "memplan/parse.h"
#include "lifetime_view.h"
#include "table_model.h"
#include "timeline_chart.h"

namespace memplan::gui {

namespace {

QTableView* MakeTable(QAbstractItemModel* model, QWidget* parent, bool sortable = false) {
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

QString ItemLabel(const Item& item) {
  QString label = QStringLiteral("%1 (%2)").arg(Q(item.title), QString::fromLatin1(SourceKindName(item.kind)));
  if (item.kind == SourceKind::kPlan && !item.strategy.empty()) label += QStringLiteral(" · ") + Q(item.strategy);
  return label;
}

QString FlopsText(double f) {
  if (f < 0) return QStringLiteral("\u2014");
  return QString::number(f, 'e', 2);
}

QString SecondsText(double s) {
  if (s < 0) return QStringLiteral("\u2014");
  if (s < 1) return QStringLiteral("%1 ms").arg(s * 1000, 0, 'f', 1);
  return QStringLiteral("%1 s").arg(s, 0, 'f', 2);
}

QString SignedBytes(int64_t a, int64_t b) {
  if (a < 0 || b < 0) return QStringLiteral("\u2014");
  int64_t d = b - a;
  QString s = (d < 0 ? QStringLiteral("−") : QStringLiteral("+")) + BytesQ(d < 0 ? -d : d);
  if (a > 0) s += QStringLiteral(" (%1%2%)").arg(d < 0 ? "" : "+").arg(100.0 * d / a, 0, 'f', 1);
  return s;
}

const char* kPages[] = {"summary", "timeline", "lifetimes", "plan", "compare"};

}  // namespace

MainWindow::MainWindow(QWidget* parent) : QMainWindow(parent) {
  setWindowTitle(QStringLiteral("memplan — training memory dashboard"));
  loader_ = new Loader(this);
  plan_worker_ = new PlanWorker(this);
  connect(loader_, &Loader::loaded, this, &MainWindow::onLoaded);
  connect(loader_, &Loader::failed, this, &MainWindow::onFailed);
  connect(loader_, &Loader::idle, this, [this] { statusBar()->showMessage(QStringLiteral("Ready"), 3000); });
  connect(plan_worker_, &PlanWorker::planned, this, &MainWindow::onPlanned);
  connect(plan_worker_, &PlanWorker::failed, this, [this](const QString& m) {
    plan_status_->setText(QStringLiteral("<span style='color:#c01010'>%1</span>").arg(m.toHtmlEscaped()));
  });

  // Toolbar: open, model options, export.
  QToolBar* tb = addToolBar(QStringLiteral("main"));
  tb->setMovable(false);
  QAction* open = tb->addAction(QStringLiteral("Open…"), this, &MainWindow::openDialog);
  open->setShortcut(QKeySequence::Open);
  tb->addSeparator();
  tb->addWidget(new QLabel(QStringLiteral(" Batch ")));
  batch_spin_ = new QSpinBox;
  batch_spin_->setRange(1, 1 << 16);
  batch_spin_->setValue(static_cast<int>(options_.batch));
  tb->addWidget(batch_spin_);
  tb->addWidget(new QLabel(QStringLiteral(" Optimizer ")));
  optimizer_combo_ = new QComboBox;
  optimizer_combo_->addItems({QStringLiteral("sgd"), QStringLiteral("momentum"), QStringLiteral("adam")});
  tb->addWidget(optimizer_combo_);
  tb->addAction(QStringLiteral("Re-analyze"), this, &MainWindow::reanalyze)
      ->setToolTip(QStringLiteral("Analyze the opened models again with this batch and optimizer"));
  tb->addSeparator();
  tb->addAction(QStringLiteral("Export PNG…"), this, [this] { exportDialog(false); });
#ifdef MEMPLAN_GUI_HAVE_SVG
  tb->addAction(QStringLiteral("Export SVG…"), this, [this] { exportDialog(true); });
#endif

  auto* central = new QWidget;
  auto* layout = new QVBoxLayout(central);
  layout->setContentsMargins(4, 4, 4, 4);
  banner_ = new QFrame;
  banner_->setObjectName(QStringLiteral("errorBanner"));
  banner_->setStyleSheet(QStringLiteral("#errorBanner { background: #fde2e1; border: 1px solid #c01010; border-radius: 3px; }"));
  auto* bl = new QHBoxLayout(banner_);
  bl->setContentsMargins(8, 4, 4, 4);
  banner_label_ = new QLabel;
  banner_label_->setWordWrap(true);
  banner_label_->setTextInteractionFlags(Qt::TextSelectableByMouse);
  bl->addWidget(banner_label_, 1);
  auto* dismiss = new QPushButton(QStringLiteral("Dismiss"));
  connect(dismiss, &QPushButton::clicked, this, [this] {
    errors_.clear();
    banner_->hide();
  });
  bl->addWidget(dismiss, 0, Qt::AlignTop);
  banner_->hide();
  layout->addWidget(banner_);
  tabs_ = new QTabWidget;
  layout->addWidget(tabs_, 1);
  setCentralWidget(central);

  buildSummaryPage();
  buildTimelinePage();
  buildLifetimesPage();
  buildPlanPage();
  buildComparePage();
  resize(1400, 900);
  refreshAll();
}

MainWindow::~MainWindow() {
  // Let workers finish before their results' receivers go away.
  loader_->waitForIdle(600000);
  plan_worker_->waitForIdle(600000);
}

void MainWindow::setModelOptions(const ModelOptions& options) {
  options_ = options;
  batch_spin_->setValue(static_cast<int>(options.batch));
  optimizer_combo_->setCurrentText(QString::fromLatin1(OptimizerName(options.optimizer)));
}

QStringList MainWindow::pageNames() {
  QStringList names;
  for (const char* p : kPages) names << QString::fromLatin1(p);
  return names;
}

bool MainWindow::setPage(const QString& name) {
  int i = pageNames().indexOf(name);
  if (i < 0) return false;
  tabs_->setCurrentIndex(i);
  return true;
}

QString MainWindow::currentPageName() const { return pageNames().value(tabs_->currentIndex()); }

QWidget* MainWindow::page(const QString& name) const {
  int i = pageNames().indexOf(name);
  return i < 0 ? nullptr : tabs_->widget(i);
}

// ---------------------------------------------------------------------------------------
// Pages.

void MainWindow::buildSummaryPage() {
  auto* page = new QWidget;
  auto* v = new QVBoxLayout(page);
  headline_ = new QLabel;
  headline_->setTextFormat(Qt::RichText);
  headline_->setWordWrap(true);
  QFont f = headline_->font();
  f.setPointSizeF(f.pointSizeF() * 1.25);
  headline_->setFont(f);
  v->addWidget(headline_);

  auto* split = new QSplitter(Qt::Horizontal);
  summary_model_ = new TableModel({QStringLiteral("Quantity"), QStringLiteral("Value"), QStringLiteral("From")}, this);
  QTableView* st = MakeTable(summary_model_, split);
  st->setColumnWidth(0, 190);
  st->setColumnWidth(1, 330);
  split->addWidget(st);

  auto* right = new QWidget;
  auto* rv = new QVBoxLayout(right);
  rv->setContentsMargins(0, 0, 0, 0);
  breakdown_chart_ = new QChartView(new QChart);
  breakdown_chart_->setRenderHint(QPainter::Antialiasing);
  breakdown_chart_->setMinimumHeight(260);
  breakdown_chart_->chart()->legend()->hide();
  rv->addWidget(breakdown_chart_, 3);
  breakdown_model_ = new TableModel({QStringLiteral("Category"), QStringLiteral("Bytes at the peak"), QStringLiteral("Share")}, this);
  QTableView* bt = MakeTable(breakdown_model_, right);
  bt->setColumnWidth(0, 180);
  bt->setColumnWidth(1, 150);
  rv->addWidget(bt, 2);
  split->addWidget(right);
  split->setStretchFactor(0, 1);
  split->setStretchFactor(1, 1);
  v->addWidget(split, 4);

  files_model_ = new TableModel({QStringLiteral("File"), QStringLiteral("Kind"), QStringLiteral("Status")}, this);
  QTableView* ft = MakeTable(files_model_, page);
  ft->setColumnWidth(0, 420);
  ft->setColumnWidth(1, 90);
  ft->setMaximumHeight(150);
  v->addWidget(new QLabel(QStringLiteral("<b>Opened files</b>")));
  v->addWidget(ft, 1);
  tabs_->addTab(page, QStringLiteral("Summary"));
}

void MainWindow::buildTimelinePage() {
  auto* page = new QWidget;
  auto* v = new QVBoxLayout(page);
  auto* controls = new QHBoxLayout;
  controls->addWidget(new QLabel(QStringLiteral("Timeline of")));
  timeline_combo_ = new QComboBox;
  timeline_combo_->setMinimumWidth(320);
  controls->addWidget(timeline_combo_);
  range_label_ = new QLabel;
  controls->addWidget(range_label_, 1);
  auto* hint = new QLabel(QStringLiteral("drag: zoom to a range · right-click or double-click: all steps · click: tensors alive"));
  hint->setStyleSheet(QStringLiteral("color: gray"));
  controls->addWidget(hint);
  v->addLayout(controls);

  auto* split = new QSplitter(Qt::Horizontal);
  timeline_chart_ = new TimelineChart;
  split->addWidget(timeline_chart_);
  auto* side = new QWidget;
  auto* sv = new QVBoxLayout(side);
  sv->setContentsMargins(0, 0, 0, 0);
  alive_label_ = new QLabel;
  alive_label_->setWordWrap(true);
  alive_label_->setTextFormat(Qt::RichText);
  sv->addWidget(alive_label_);
  alive_model_ = new TableModel({QStringLiteral("Tensor"), QStringLiteral("Category"), QStringLiteral("Bytes")}, this);
  alive_proxy_ = new QSortFilterProxyModel(this);
  alive_proxy_->setSourceModel(alive_model_);
  alive_proxy_->setSortRole(Qt::UserRole);
  QTableView* at = MakeTable(alive_proxy_, side, true);
  at->horizontalHeader()->setStretchLastSection(false);
  at->horizontalHeader()->setSectionResizeMode(0, QHeaderView::Stretch);
  at->horizontalHeader()->setSectionResizeMode(1, QHeaderView::ResizeToContents);
  at->horizontalHeader()->setSectionResizeMode(2, QHeaderView::ResizeToContents);
  at->sortByColumn(2, Qt::DescendingOrder);
  sv->addWidget(at, 1);
  split->addWidget(side);
  split->setStretchFactor(0, 3);
  split->setStretchFactor(1, 1);
  split->setSizes({930, 470});
  v->addWidget(split, 1);

  connect(timeline_combo_, &QComboBox::currentIndexChanged, this, [this] {
    if (!refreshing_) {
      selected_step_ = -1;
      refreshTimeline();
      refreshLifetimes();
    }
  });
  connect(timeline_chart_, &TimelineChart::stepClicked, this, [this](qint64 s) { selectStep(s); });
  connect(timeline_chart_, &TimelineChart::rangeChanged, this, [this](qint64 a, qint64 b) {
    range_label_->setText(QStringLiteral("steps %1–%2").arg(a).arg(b));
    lifetime_view_->setRange(a, b);  // the selection filters the lifetimes view too
  });
  tabs_->addTab(page, QStringLiteral("Timeline"));
}

void MainWindow::buildLifetimesPage() {
  auto* page = new QWidget;
  auto* v = new QVBoxLayout(page);
  auto* controls = new QHBoxLayout;
  controls->addWidget(new QLabel(QStringLiteral("Largest")));
  lifetime_count_ = new QSpinBox;
  lifetime_count_->setRange(5, 500);
  lifetime_count_->setValue(40);
  controls->addWidget(lifetime_count_);
  controls->addWidget(new QLabel(QStringLiteral("tensors")));
  lifetime_persistent_ = new QCheckBox(QStringLiteral("include parameters, gradients, optimizer state, inputs"));
  controls->addWidget(lifetime_persistent_);
  controls->addStretch(1);
  auto* hint = new QLabel(QStringLiteral("a range dragged on the timeline filters this view"));
  hint->setStyleSheet(QStringLiteral("color: gray"));
  controls->addWidget(hint);
  v->addLayout(controls);
  lifetime_view_ = new LifetimeView;
  auto* scroll = new QScrollArea;
  scroll->setWidget(lifetime_view_);
  scroll->setWidgetResizable(true);
  scroll->setFrameShape(QFrame::NoFrame);
  v->addWidget(scroll, 1);
  connect(lifetime_count_, &QSpinBox::valueChanged, lifetime_view_, &LifetimeView::setMaxBuffers);
  connect(lifetime_persistent_, &QCheckBox::toggled, lifetime_view_, &LifetimeView::setIncludePersistent);
  tabs_->addTab(page, QStringLiteral("Lifetimes"));
}

void MainWindow::buildPlanPage() {
  auto* page = new QWidget;
  auto* v = new QVBoxLayout(page);
  auto* controls = new QHBoxLayout;
  controls->addWidget(new QLabel(QStringLiteral("Strategy")));
  strategy_combo_ = new QComboBox;
  strategy_combo_->addItems(PlannerAvailable() ? PlannerStrategies() : QStringList{QStringLiteral("auto")});
  controls->addWidget(strategy_combo_);
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

  auto* vsplit = new QSplitter(Qt::Vertical);
  auto* hsplit = new QSplitter(Qt::Horizontal);
  plan_chart_ = new TimelineChart;
  hsplit->addWidget(plan_chart_);
  pareto_chart_ = new QChartView(new QChart);
  pareto_chart_->setRenderHint(QPainter::Antialiasing);
  pareto_chart_->setMinimumWidth(380);
  hsplit->addWidget(pareto_chart_);
  hsplit->setStretchFactor(0, 3);
  hsplit->setStretchFactor(1, 2);
  vsplit->addWidget(hsplit);
  strategies_model_ = new TableModel({QStringLiteral("Strategy"), QStringLiteral("Peak"), QStringLiteral("Overhead"),
                                      QStringLiteral("Checkpoints"), QStringLiteral("Sections"),
                                      QStringLiteral("Feasible"), QStringLiteral("Solve time")},
                                     this);
  vsplit->addWidget(MakeTable(strategies_model_, vsplit));
  vsplit->setStretchFactor(0, 3);
  vsplit->setStretchFactor(1, 1);
  vsplit->setSizes({560, 200});
  v->addWidget(vsplit, 1);

  auto* debounce = new QTimer(this);
  debounce->setSingleShot(true);
  debounce->setInterval(150);
  connect(debounce, &QTimer::timeout, this, &MainWindow::scheduleReplan);
  connect(budget_slider_, &QSlider::valueChanged, this, [this, debounce] {
    requested_budget_ = -1;
    refreshPlan();
    if (PlannerAvailable()) debounce->start();
  });
  connect(strategy_combo_, &QComboBox::currentIndexChanged, this, [this, debounce] {
    if (PlannerAvailable() && !refreshing_) debounce->start();
  });
  connect(save_plan_, &QPushButton::clicked, this, &MainWindow::savePlan);
  tabs_->addTab(page, QStringLiteral("Plan explorer"));
}

void MainWindow::buildComparePage() {
  auto* page = new QWidget;
  auto* v = new QVBoxLayout(page);
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
  compare_model_ = new TableModel({QStringLiteral("Quantity"), QStringLiteral("A"), QStringLiteral("B"), QStringLiteral("B − A")}, this);
  QTableView* ct = MakeTable(compare_model_, hsplit);
  ct->setColumnWidth(0, 170);
  ct->setColumnWidth(1, 150);
  ct->setColumnWidth(2, 150);
  hsplit->addWidget(ct);
  kept_model_ = new TableModel({QStringLiteral("Checkpoint tensor"), QStringLiteral("Kept by")}, this);
  QTableView* kt = MakeTable(kept_model_, hsplit);
  kt->setColumnWidth(0, 320);
  hsplit->addWidget(kt);
  vsplit->addWidget(hsplit);
  vsplit->setStretchFactor(0, 3);
  vsplit->setStretchFactor(1, 2);
  vsplit->setSizes({520, 260});
  v->addWidget(vsplit, 1);
  auto changed = [this] { if (!refreshing_) refreshCompare(); };
  connect(compare_a_, &QComboBox::currentIndexChanged, this, changed);
  connect(compare_b_, &QComboBox::currentIndexChanged, this, changed);
  tabs_->addTab(page, QStringLiteral("Compare"));
}

// ---------------------------------------------------------------------------------------
// Loading.

void MainWindow::openFiles(const QStringList& paths) {
  for (const QString& p : paths) {
    int slot = static_cast<int>(slots_.size());
    paths_ << p;
    slots_.push_back(nullptr);
    slot_errors_.push_back({});
    loader_->load(slot, p, options_);
  }
  if (!paths.isEmpty()) statusBar()->showMessage(QStringLiteral("Loading %1 file(s)…").arg(loader_->pending()));
  refreshFiles();
}

void MainWindow::reanalyze() {
  options_.batch = batch_spin_->value();
  options_.optimizer = ParseOptimizer(optimizer_combo_->currentText().toStdString());
  for (size_t i = 0; i < slots_.size(); ++i) {
    bool is_model = slots_[i] ? slots_[i]->kind == SourceKind::kModel : !paths_[i].endsWith(QStringLiteral(".json"));
    if (!is_model) continue;
    slot_errors_[i].clear();
    loader_->load(static_cast<int>(i), paths_[i], options_);
  }
  explorer_plan_.reset();
  statusBar()->showMessage(QStringLiteral("Analyzing at batch %1…").arg(options_.batch));
  refreshFiles();
}

bool MainWindow::waitForIdle(int timeout_ms) {
  QDeadlineTimer deadline(timeout_ms);
  while ((loader_->pending() > 0 || plan_worker_->busy()) && !deadline.hasExpired()) {
    QCoreApplication::processEvents(QEventLoop::AllEvents, 50);
    QThread::msleep(5);
  }
  QCoreApplication::processEvents();
  return loader_->pending() == 0 && !plan_worker_->busy();
}

void MainWindow::onLoaded(int slot, ItemPtr item) {
  if (slot < 0 || slot >= static_cast<int>(slots_.size())) return;
  slots_[slot] = std::move(item);
  slot_errors_[slot].clear();
  refreshAll();
  emit itemsChanged();
}

void MainWindow::onFailed(int slot, const QString& path, const QString& message) {
  if (slot >= 0 && slot < static_cast<int>(slots_.size())) {
    slots_[slot].reset();
    slot_errors_[slot] = message;
  }
  showError(message.startsWith(path) ? message : path + QStringLiteral(": ") + message);
  refreshAll();
  emit itemsChanged();
}

void MainWindow::showError(const QString& message) {
  errors_ << message;
  QStringList shown;
  for (const QString& e : errors_) shown << e.toHtmlEscaped();
  banner_label_->setText(QStringLiteral("<b>Could not open %1 file(s)</b><br>%2")
                             .arg(errors_.size())
                             .arg(shown.join(QStringLiteral("<br>"))));
  banner_->show();
}

QStringList MainWindow::errors() const { return errors_; }
QString MainWindow::bannerText() const { return banner_label_->text(); }
bool MainWindow::bannerShown() const { return banner_->isVisibleTo(const_cast<MainWindow*>(this)); }

std::vector<ItemPtr> MainWindow::items() const {
  std::vector<ItemPtr> out;
  for (const ItemPtr& p : slots_) if (p) out.push_back(p);
  if (explorer_plan_) out.push_back(explorer_plan_);
  return out;
}

ItemPtr MainWindow::baseItem() const {
  ItemPtr best;
  for (const ItemPtr& p : slots_) {
    if (!p || (p->kind != SourceKind::kModel && p->kind != SourceKind::kAnalysis)) continue;
    if (!best || (best->kind == SourceKind::kAnalysis && p->kind == SourceKind::kModel)) best = p;
  }
  return best;
}

ItemPtr MainWindow::planItem() const {
  if (explorer_plan_) return explorer_plan_;
  ItemPtr last;
  for (const ItemPtr& p : slots_) if (p && p->kind == SourceKind::kPlan) last = p;
  return last;
}

ItemPtr MainWindow::runItem() const {
  ItemPtr last;
  for (const ItemPtr& p : slots_) if (p && p->kind == SourceKind::kRun) last = p;
  return last;
}

std::vector<ItemPtr> MainWindow::timelineItems() const {
  std::vector<ItemPtr> out;
  for (const ItemPtr& p : items()) if (p->timeline || p->measured) out.push_back(p);
  return out;
}

ItemPtr MainWindow::selectedTimelineItem() const {
  std::vector<ItemPtr> list = timelineItems();
  int i = timeline_combo_->currentIndex();
  return i >= 0 && i < static_cast<int>(list.size()) ? list[i] : nullptr;
}

QList<QAbstractItemModel*> MainWindow::itemModels() const {
  return {summary_model_, breakdown_model_, files_model_, alive_model_, alive_proxy_, strategies_model_, compare_model_, kept_model_};
}

// ---------------------------------------------------------------------------------------
// Refreshing the pages from the loaded items.

void MainWindow::refreshAll() {
  refreshing_ = true;
  // The timeline and compare choices follow the items; keep the user's choice if it stays.
  std::vector<ItemPtr> list = timelineItems();
  auto fill = [&](QComboBox* combo, int fallback) {
    QString current = combo->currentText();
    combo->clear();
    for (const ItemPtr& p : list) combo->addItem(ItemLabel(*p));
    int i = combo->findText(current);
    combo->setCurrentIndex(i >= 0 ? i : std::min<int>(fallback, combo->count() - 1));
  };
  int base_index = 0;
  ItemPtr base = baseItem();
  for (size_t i = 0; i < list.size(); ++i) if (list[i] == base) base_index = static_cast<int>(i);
  fill(timeline_combo_, base_index);
  fill(compare_a_, 0);
  fill(compare_b_, 1);
  if (compare_b_->count() > 1 && compare_b_->currentIndex() == compare_a_->currentIndex()) {
    compare_b_->setCurrentIndex(compare_a_->currentIndex() == 0 ? 1 : 0);  // two different things by default
  }
  refreshing_ = false;
  refreshFiles();
  refreshSummary();
  refreshTimeline();
  refreshLifetimes();
  refreshPlan();
  refreshCompare();
}

void MainWindow::refreshFiles() {
  QVector<QVector<Cell>> rows;
  for (int i = 0; i < paths_.size(); ++i) {
    Cell status;
    QString kind;
    if (slots_[i]) {
      kind = QString::fromLatin1(SourceKindName(slots_[i]->kind));
      status = TextCell(QStringLiteral("loaded"));
      status.color = QColor(0x2a, 0x7a, 0x2a);
    } else if (!slot_errors_[i].isEmpty()) {
      status = TextCell(slot_errors_[i]);
      status.color = QColor(0xc0, 0x10, 0x10);
      status.tooltip = slot_errors_[i];
    } else {
      status = TextCell(QStringLiteral("loading…"));
    }
    Cell file = TextCell(QFileInfo(paths_[i]).fileName());
    file.tooltip = paths_[i];
    rows.push_back({file, TextCell(kind), status});
  }
  files_model_->setRows(rows);
}

void MainWindow::refreshSummary() {
  ItemPtr base = baseItem(), plan = planItem(), run = runItem();
  ItemPtr any = base ? base : plan ? plan : run;
  QVector<QVector<Cell>> rows;
  auto from = [](const ItemPtr& p) { return p ? Q(p->title) : QString(); };
  auto row = [&](const QString& k, const QString& v, const ItemPtr& src, const QString& tip = {}) {
    Cell value = TextCell(v);
    value.tooltip = tip.isEmpty() ? v : tip;
    rows.push_back({TextCell(k), value, TextCell(from(src))});
  };
  if (!any) {
    headline_->setText(QStringLiteral("<b>No file open.</b> Open a model (.onnx) or a memplan analysis, plan or run "
                                      "JSON file (toolbar: Open…, or <tt>memplan gui FILE...</tt>)."));
    summary_model_->setRows({});
    breakdown_model_->setRows({});
    breakdown_chart_->chart()->removeAllSeries();
    return;
  }
  QString model = Q(any->model);
  row(QStringLiteral("Model"), QFileInfo(model).fileName(), any, model);
  if (any->batch >= 0) row(QStringLiteral("Batch"), QString::number(any->batch), any);
  if (!any->optimizer.empty()) row(QStringLiteral("Optimizer"), Q(any->optimizer), any);
  if (any->num_nodes >= 0) row(QStringLiteral("Nodes"), QString::number(any->num_nodes), any);
  if (any->param_bytes >= 0) row(QStringLiteral("Parameters"), BytesQ(any->param_bytes), any);
  if (any->forward_flops >= 0) row(QStringLiteral("Forward FLOPs"), FlopsText(any->forward_flops), any);
  ItemPtr baseline_src = base && base->baseline_peak_bytes >= 0 ? base : plan && plan->baseline_peak_bytes >= 0 ? plan : nullptr;
  int64_t baseline = baseline_src ? baseline_src->baseline_peak_bytes : -1;
  row(QStringLiteral("Baseline peak"), BytesQ(baseline), baseline_src);
  if (base && !base->peak_event.empty()) row(QStringLiteral("Peak at"), Q(base->peak_event), base);
  if (plan) {
    row(QStringLiteral("Plan strategy"), Q(plan->strategy), plan);
    row(QStringLiteral("Plan peak"), BytesQ(plan->plan_peak_bytes), plan);
    row(QStringLiteral("Budget"), BytesQ(plan->budget_bytes), plan);
    row(QStringLiteral("Fits the budget"), plan->feasible < 0 ? QStringLiteral("\u2014") : plan->feasible ? QStringLiteral("yes") : QStringLiteral("no"), plan);
    row(QStringLiteral("Recompute overhead"),
        QStringLiteral("%1 of the forward FLOPs (%2 FLOPs)").arg(Q(PercentText(plan->overhead)), FlopsText(plan->recompute_flops)), plan);
    row(QStringLiteral("Checkpoints / sections"),
        QStringLiteral("%1 / %2").arg(plan->checkpoints.size()).arg(plan->num_sections < 0 ? QStringLiteral("\u2014") : QString::number(plan->num_sections)),
        plan);
  } else {
    row(QStringLiteral("Plan peak"), QStringLiteral("\u2014 (no plan open)"), nullptr);
  }
  if (run) {
    row(QStringLiteral("Measured peak"), BytesQ(run->measured_peak_bytes), run);
    if (run->run_predicted_peak_bytes > 0 && run->measured_peak_bytes >= 0) {
      row(QStringLiteral("Measured vs predicted"),
          QStringLiteral("%1 vs %2").arg(BytesQ(run->measured_peak_bytes), BytesQ(run->run_predicted_peak_bytes)), run);
    }
    row(QStringLiteral("Device"), Q(run->device), run);
    row(QStringLiteral("Step time / recompute"),
        QStringLiteral("%1 / %2").arg(SecondsText(run->step_seconds), SecondsText(run->recompute_seconds)), run);
  } else {
    row(QStringLiteral("Measured peak"), QStringLiteral("\u2014 (no run open)"), nullptr);
  }
  if (base && !base->bottlenecks.empty()) {
    QStringList names;
    for (size_t i = 0; i < base->bottlenecks.size() && i < 3; ++i) names << Q(base->bottlenecks[i]);
    row(QStringLiteral("Bottleneck tensors"), QStringLiteral("%1: %2…").arg(base->bottlenecks.size()).arg(names.join(", ")), base);
  }
  if (any->notes.size()) row(QStringLiteral("Notes"), Q(any->notes.front()), any);
  summary_model_->setRows(rows);

  // Headline.
  QString head = QStringLiteral("<b>%1</b>").arg(QFileInfo(model).fileName().toHtmlEscaped());
  if (any->batch >= 0) head += QStringLiteral(" · batch %1").arg(any->batch);
  head += QStringLiteral(" · baseline peak <b>%1</b>").arg(BytesQ(baseline));
  if (plan) head += QStringLiteral(" · plan (%1) <b>%2</b> for a budget of %3").arg(Q(plan->strategy), BytesQ(plan->plan_peak_bytes), BytesQ(plan->budget_bytes));
  if (run) head += QStringLiteral(" · measured <b>%1</b>").arg(BytesQ(run->measured_peak_bytes));
  headline_->setText(head);

  // Breakdown at the peak.
  ItemPtr bsrc = base && base->has_breakdown ? base : plan && plan->has_breakdown ? plan : nullptr;
  QVector<QVector<Cell>> brows;
  QChart* chart = breakdown_chart_->chart();
  chart->removeAllSeries();
  for (QAbstractAxis* a : chart->axes()) {
    chart->removeAxis(a);
    delete a;
  }
  if (bsrc) {
    int64_t total = 0;
    for (int64_t b : bsrc->breakdown) total += b;
    int64_t max_b = 1;
    for (int64_t b : bsrc->breakdown) max_b = std::max(max_b, b);
    ByteUnit unit = UnitFor(max_b);
    auto* set = new QBarSet(QStringLiteral("bytes"));
    QStringList cats;
    // Largest at the top of a horizontal bar chart: append smallest first.
    std::vector<MemoryCategory> order(std::begin(kStackOrder), std::end(kStackOrder));
    std::stable_sort(order.begin(), order.end(), [&](MemoryCategory a, MemoryCategory b) {
      return bsrc->breakdown[static_cast<int>(a)] < bsrc->breakdown[static_cast<int>(b)];
    });
    for (MemoryCategory c : order) {
      int64_t b = bsrc->breakdown[static_cast<int>(c)];
      if (b <= 0) continue;
      cats << CategoryLabel(c);
      set->append(static_cast<double>(b) / unit.divisor);
    }
    for (auto it = order.rbegin(); it != order.rend(); ++it) {
      int64_t b = bsrc->breakdown[static_cast<int>(*it)];
      Cell name = TextCell(CategoryLabel(*it));
      name.decoration = CategoryColor(*it);
      brows.push_back({name, NumberCell(BytesQ(b), static_cast<double>(b)),
                       NumberCell(Q(PercentText(total > 0 ? static_cast<double>(b) / total : -1)), static_cast<double>(b))});
    }
    set->setColor(QColor(0xf2, 0x8e, 0x2b));
    auto* series = new QHorizontalBarSeries;
    series->append(set);
    chart->addSeries(series);
    auto* ay = new QBarCategoryAxis;
    ay->append(cats);
    auto* ax = new QValueAxis;
    ax->setTitleText(unit.name);
    ax->setMin(0);
    chart->addAxis(ay, Qt::AlignLeft);
    chart->addAxis(ax, Qt::AlignBottom);
    series->attachAxis(ax);
    series->attachAxis(ay);
    ax->setMax(ax->max() * 1.25);
    ax->applyNiceNumbers();
    chart->setTitle(QStringLiteral("Memory at the peak by category (%1, from %2)").arg(BytesQ(total), Q(bsrc->title)));
  } else {
    chart->setTitle(QStringLiteral("No per-category breakdown in the open files"));
  }
  breakdown_model_->setRows(brows);
}

void MainWindow::refreshTimeline() {
  ItemPtr item = selectedTimelineItem();
  ItemPtr run = runItem();
  ItemPtr plan = planItem();
  if (!item) {
    timeline_chart_->setPrimary(nullptr, QStringLiteral("Memory timeline"));
    timeline_chart_->setOverlays({});
    timeline_chart_->setBudget(-1);
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
  timeline_chart_->setPrimary(primary, title);
  timeline_chart_->setOverlays(std::move(overlays));
  timeline_chart_->setBudget(budget);
  range_label_->setText(QStringLiteral("%1 steps").arg(primary->size()));
  selectStep(selected_step_ >= 0 ? selected_step_ : primary->peak_step);
}

void MainWindow::selectStep(int64_t step) {
  ItemPtr item = selectedTimelineItem();
  if (!item) return;
  std::shared_ptr<const TimelineData> t = item->timeline ? item->timeline : item->measured;
  if (!t || step < 0 || step >= static_cast<int64_t>(t->size())) return;
  selected_step_ = step;
  QString head = QStringLiteral("<b>Alive at step %1</b>%2: %3<br>%4")
                     .arg(step)
                     .arg(step == t->peak_step ? QStringLiteral(" (the peak)") : QString())
                     .arg(BytesQ(t->bytes[step]))
                     .arg(Q(t->events[step]).toHtmlEscaped());
  QVector<QVector<Cell>> rows;
  if (item->schedule && t == item->timeline) {
    std::vector<AliveBuffer> alive = AliveAt(*item->schedule, static_cast<size_t>(step));
    for (const AliveBuffer& a : alive) {
      Cell name = TextCell(Q(a.name));
      name.tooltip = Q(a.name);
      Cell cat = TextCell(CategoryLabel(a.category));
      cat.decoration = CategoryColor(a.category);
      rows.push_back({name, cat, NumberCell(BytesQ(a.bytes), static_cast<double>(a.bytes))});
    }
    head += QStringLiteral("<br>%1 tensors, largest first").arg(alive.size());
  } else {
    head += QStringLiteral("<br><i>The tensors alive need the schedule: open the model (.onnx).</i>");
  }
  alive_label_->setText(head);
  alive_model_->setRows(rows);
  alive_proxy_->sort(2, Qt::DescendingOrder);
}

void MainWindow::refreshLifetimes() {
  ItemPtr item = selectedTimelineItem();
  if (!item || !item->schedule) {
    ItemPtr base = baseItem();
    if (base && base->schedule) item = base;
  }
  if (item && item->schedule) {
    lifetime_view_->setSchedule(item->schedule, item->timeline, item->bottleneck_ids, item->checkpoint_ids,
                                QStringLiteral("Largest tensors of %1 over the schedule").arg(ItemLabel(*item)));
  } else {
    lifetime_view_->setSchedule(nullptr, nullptr, {}, {}, QStringLiteral("Tensor lifetimes"));
  }
}

void MainWindow::refreshPlan() {
  ItemPtr base = baseItem();
  ItemPtr plan = planItem();
  const bool can_plan = PlannerAvailable() && base && base->analysis;
  budget_slider_->setEnabled(can_plan);
  strategy_combo_->setEnabled(can_plan);
  save_plan_->setEnabled(PlannerAvailable() && explorer_plan_ != nullptr);
  int64_t baseline = base ? base->baseline_peak_bytes : plan ? plan->baseline_peak_bytes : -1;
  if (can_plan) {
    int64_t budget = requested_budget_ > 0 ? requested_budget_ : Budget{.percent = 1.0 * budget_slider_->value()}.Resolve(baseline);
    budget_label_->setText(QStringLiteral("%1 (%2% of baseline)").arg(BytesQ(budget)).arg(budget_slider_->value()));
  } else {
    budget_label_->setText(plan ? QStringLiteral("%1").arg(BytesQ(plan->budget_bytes)) : QString());
    if (!PlannerAvailable()) {
      plan_status_->setText(QStringLiteral("<i>Re-planning needs the planner library, which this build does not have. "
                                           "Plans made by <tt>memplan plan --json</tt> can be opened and explored here.</i>"));
    } else if (!base || !base->analysis) {
      plan_status_->setText(QStringLiteral("<i>Open a model (.onnx) to re-plan with the budget slider.</i>"));
    }
  }
  if (plan) {
    std::shared_ptr<const TimelineData> t = plan->timeline;
    plan_chart_->setPrimary(t, QStringLiteral("Plan %1 — peak %2, budget %3").arg(Q(plan->strategy), BytesQ(plan->plan_peak_bytes), BytesQ(plan->budget_bytes)));
    std::vector<Overlay> overlays;
    if (base && base->timeline) overlays.push_back({base->timeline, QStringLiteral("no plan"), QColor(0x55, 0x55, 0x55)});
    plan_chart_->setOverlays(std::move(overlays));
    plan_chart_->setBudget(plan->budget_bytes);
  } else {
    plan_chart_->setPrimary(nullptr, QStringLiteral("No plan yet"));
    plan_chart_->setOverlays({});
    plan_chart_->setBudget(-1);
  }

  // The Pareto curve: peak against recompute overhead, the current plan marked.
  QChart* chart = pareto_chart_->chart();
  chart->removeAllSeries();
  for (QAbstractAxis* a : chart->axes()) {
    chart->removeAxis(a);
    delete a;
  }
  chart->setTitle(QStringLiteral("Pareto curve: peak vs recompute overhead"));
  std::vector<ParetoPoint> sweep = plan ? plan->sweep : std::vector<ParetoPoint>{};
  if (sweep.empty() && !plan) {
    chart->setTitle(QStringLiteral("Pareto curve (open a plan made with --sweep)"));
  } else {
    int64_t max_b = 1;
    for (const ParetoPoint& p : sweep) max_b = std::max(max_b, p.peak_bytes);
    if (plan) max_b = std::max(max_b, plan->plan_peak_bytes);
    ByteUnit unit = UnitFor(max_b);
    std::sort(sweep.begin(), sweep.end(), [](const ParetoPoint& a, const ParetoPoint& b) { return a.peak_bytes < b.peak_bytes; });
    auto* ax = new QValueAxis;
    ax->setTitleText(QStringLiteral("peak (%1)").arg(unit.name));
    auto* ay = new QValueAxis;
    ay->setTitleText(QStringLiteral("recompute overhead (% of forward FLOPs)"));
    chart->addAxis(ax, Qt::AlignBottom);
    chart->addAxis(ay, Qt::AlignLeft);
    double ymax = 1, xmax = static_cast<double>(max_b) / unit.divisor;
    if (!sweep.empty()) {
      auto* line = new QLineSeries;
      auto* dots = new QScatterSeries;
      line->setName(QStringLiteral("sweep"));
      dots->setName(QStringLiteral("plans"));
      dots->setMarkerSize(7);
      for (const ParetoPoint& p : sweep) {
        QPointF pt(static_cast<double>(p.peak_bytes) / unit.divisor, p.overhead * 100);
        line->append(pt);
        dots->append(pt);
        ymax = std::max(ymax, p.overhead * 100);
      }
      for (QAbstractSeries* s : {static_cast<QAbstractSeries*>(line), static_cast<QAbstractSeries*>(dots)}) {
        chart->addSeries(s);
        s->attachAxis(ax);
        s->attachAxis(ay);
      }
    }
    if (plan && plan->plan_peak_bytes >= 0) {
      auto* cur = new QScatterSeries;
      cur->setName(QStringLiteral("current plan"));
      cur->setMarkerSize(13);
      cur->setColor(QColor(0xc0, 0x10, 0x10));
      double ov = plan->overhead < 0 ? 0 : plan->overhead * 100;
      cur->append(static_cast<double>(plan->plan_peak_bytes) / unit.divisor, ov);
      ymax = std::max(ymax, ov);
      chart->addSeries(cur);
      cur->attachAxis(ax);
      cur->attachAxis(ay);
    }
    ax->setRange(0, xmax * 1.1);
    ay->setRange(0, ymax * 1.15);
    ax->applyNiceNumbers();
    ay->applyNiceNumbers();
    ax->setLabelFormat(ax->max() < 10 ? QStringLiteral("%.1f") : QStringLiteral("%.0f"));
    ay->setLabelFormat(QStringLiteral("%.0f"));
  }

  QVector<QVector<Cell>> rows;
  if (plan) {
    for (const StrategyRow& r : plan->strategies) {
      Cell feas = TextCell(r.feasible ? QStringLiteral("yes") : QStringLiteral("no"));
      feas.color = r.feasible ? QColor(0x2a, 0x7a, 0x2a) : QColor(0xc0, 0x10, 0x10);
      rows.push_back({TextCell(Q(r.strategy)), NumberCell(BytesQ(r.peak_bytes), static_cast<double>(r.peak_bytes)),
                      NumberCell(Q(PercentText(r.overhead)), r.overhead),
                      NumberCell(r.checkpoints < 0 ? QStringLiteral("\u2014") : QString::number(r.checkpoints), static_cast<double>(r.checkpoints)),
                      NumberCell(r.sections < 0 ? QStringLiteral("\u2014") : QString::number(r.sections), static_cast<double>(r.sections)),
                      feas, NumberCell(SecondsText(r.solve_seconds), r.solve_seconds)});
    }
  }
  strategies_model_->setRows(rows);
}

void MainWindow::refreshCompare() {
  std::vector<ItemPtr> list = timelineItems();
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

  QVector<QVector<Cell>> rows;
  auto peak = [](const ItemPtr& p) -> int64_t {
    if (!p) return -1;
    if (p->plan_peak_bytes >= 0) return p->plan_peak_bytes;
    return p->timeline ? p->timeline->peak_bytes : p->baseline_peak_bytes;
  };
  auto bytes_row = [&](const QString& k, int64_t va, int64_t vb) {
    rows.push_back({TextCell(k), NumberCell(BytesQ(va), static_cast<double>(va)), NumberCell(BytesQ(vb), static_cast<double>(vb)),
                    TextCell(SignedBytes(va, vb))});
  };
  if (a || b) {
    bytes_row(QStringLiteral("Predicted peak"), peak(a), peak(b));
    bytes_row(QStringLiteral("Measured peak"), a ? a->measured_peak_bytes : -1, b ? b->measured_peak_bytes : -1);
    bytes_row(QStringLiteral("Budget"), a ? a->budget_bytes : -1, b ? b->budget_bytes : -1);
    bytes_row(QStringLiteral("Baseline peak"), a ? a->baseline_peak_bytes : -1, b ? b->baseline_peak_bytes : -1);
    double oa = a ? a->overhead : -1, ob = b ? b->overhead : -1;
    rows.push_back({TextCell(QStringLiteral("Recompute overhead")), NumberCell(Q(PercentText(oa)), oa), NumberCell(Q(PercentText(ob)), ob),
                    TextCell(oa >= 0 && ob >= 0 ? QStringLiteral("%1 points").arg((ob - oa) * 100, 0, 'f', 1) : QStringLiteral("\u2014"))});
    auto count = [](const ItemPtr& p) { return p ? QString::number(p->checkpoints.size()) : QStringLiteral("\u2014"); };
    rows.push_back({TextCell(QStringLiteral("Checkpoints")), TextCell(count(a)), TextCell(count(b)), TextCell(QString())});
    auto strat = [](const ItemPtr& p) { return p && !p->strategy.empty() ? Q(p->strategy) : QStringLiteral("none"); };
    rows.push_back({TextCell(QStringLiteral("Strategy")), TextCell(strat(a)), TextCell(strat(b)), TextCell(QString())});
    auto steps = [](const ItemPtr& p) -> int64_t { return p && p->timeline ? static_cast<int64_t>(p->timeline->size()) : -1; };
    rows.push_back({TextCell(QStringLiteral("Schedule steps")), NumberCell(QString::number(steps(a)), double(steps(a))),
                    NumberCell(QString::number(steps(b)), double(steps(b))), TextCell(QString())});
  }
  compare_model_->setRows(rows);

  QVector<QVector<Cell>> kept;
  if (a && b) {
    std::set<std::string> sa(a->checkpoints.begin(), a->checkpoints.end()), sb(b->checkpoints.begin(), b->checkpoints.end());
    for (const std::string& n : a->checkpoints) {
      if (!sb.count(n)) kept.push_back({TextCell(Q(n)), TextCell(QStringLiteral("A only"))});
    }
    for (const std::string& n : b->checkpoints) {
      if (!sa.count(n)) kept.push_back({TextCell(Q(n)), TextCell(QStringLiteral("B only"))});
    }
    for (const std::string& n : a->checkpoints) {
      if (sb.count(n)) kept.push_back({TextCell(Q(n)), TextCell(QStringLiteral("both"))});
    }
  }
  kept_model_->setRows(kept);
}

// ---------------------------------------------------------------------------------------
// Plan explorer.

void MainWindow::scheduleReplan() {
  ItemPtr base = baseItem();
  if (!PlannerAvailable() || !base || !base->analysis) return;
  // The slider's percentage resolves as `memplan plan --budget N%` does.
  int64_t budget = Budget{.percent = 1.0 * budget_slider_->value()}.Resolve(base->baseline_peak_bytes);
  requestPlan(budget, strategy_combo_->currentText());
}

void MainWindow::requestPlan(int64_t budget_bytes, const QString& strategy) {
  ItemPtr base = baseItem();
  if (!base || !base->analysis) {
    plan_status_->setText(QStringLiteral("<i>Open a model (.onnx) to re-plan.</i>"));
    return;
  }
  {
    // Show the request in the controls without re-triggering them.
    QSignalBlocker b1(budget_slider_), b2(strategy_combo_);
    int i = strategy_combo_->findText(strategy);
    if (i >= 0) strategy_combo_->setCurrentIndex(i);
    if (base->baseline_peak_bytes > 0) {
      budget_slider_->setValue(static_cast<int>(std::llround(100.0 * budget_bytes / base->baseline_peak_bytes)));
    }
  }
  requested_budget_ = budget_bytes;
  PlanRequest r;
  r.analysis = base->analysis;
  r.model_path = base->path;
  r.budget_bytes = budget_bytes;
  r.strategy = strategy.toStdString();
  r.sweep = true;
  plan_status_->setText(QStringLiteral("Planning %1 for %2…").arg(strategy, BytesQ(budget_bytes)));
  plan_worker_->request(std::move(r));
}

void MainWindow::onPlanned(ItemPtr item) {
  explorer_plan_ = std::move(item);
  plan_status_->setText(QStringLiteral("Plan <b>%1</b>: peak %2 for a budget of %3 (%4), recompute overhead %5, verified by replaying its schedule.")
                            .arg(Q(explorer_plan_->strategy), BytesQ(explorer_plan_->plan_peak_bytes), BytesQ(explorer_plan_->budget_bytes),
                                 explorer_plan_->feasible == 1 ? QStringLiteral("fits") : QStringLiteral("<span style='color:#c01010'>does not fit</span>"),
                                 Q(PercentText(explorer_plan_->overhead))));
  refreshAll();
  // The timeline and lifetimes follow the explorer's plan.
  int i = timeline_combo_->findText(ItemLabel(*explorer_plan_));
  if (i >= 0) timeline_combo_->setCurrentIndex(i);
}

void MainWindow::savePlan() {
  if (!explorer_plan_) return;
  QString path = QFileDialog::getSaveFileName(this, QStringLiteral("Save plan"), QStringLiteral("plan.json"), QStringLiteral("JSON (*.json)"));
  if (path.isEmpty()) return;
  try {
    SavePlanJson(*explorer_plan_, path.toStdString());
    statusBar()->showMessage(QStringLiteral("Wrote %1").arg(path), 5000);
  } catch (const std::exception& e) {
    showError(QString::fromStdString(e.what()));
  }
}

// ---------------------------------------------------------------------------------------
// Dialogs and export.

void MainWindow::openDialog() {
  QStringList paths = QFileDialog::getOpenFileNames(this, QStringLiteral("Open models or memplan results"), QString(),
                                                    QStringLiteral("Models and results (*.onnx *.json);;All files (*)"));
  openFiles(paths);
}

void MainWindow::exportDialog(bool svg) {
  QString page = currentPageName();
  QString suffix = svg ? QStringLiteral(".svg") : QStringLiteral(".png");
  QString path = QFileDialog::getSaveFileName(this, QStringLiteral("Export %1").arg(page), QStringLiteral("memplan-") + page + suffix,
                                              svg ? QStringLiteral("SVG (*.svg)") : QStringLiteral("PNG (*.png)"));
  if (path.isEmpty()) return;
  QString error;
  if (!exportPage(page, path, &error)) showError(error);
  else statusBar()->showMessage(QStringLiteral("Wrote %1").arg(path), 5000);
}

bool MainWindow::exportPage(const QString& name, const QString& path, QString* error) {
  QWidget* w = nullptr;
  if (name == QLatin1String("timeline")) w = timeline_chart_;
  else if (name == QLatin1String("lifetimes")) w = lifetime_view_;
  else if (name == QLatin1String("compare")) w = compare_chart_;
  else if (name == QLatin1String("plan")) w = plan_chart_;
  else w = page(name);
  if (!w) {
    if (error) *error = QStringLiteral("no page named '%1' (pages: %2)").arg(name, pageNames().join(", "));
    return false;
  }
  return exportWidget(w, path, error);
}

bool MainWindow::exportWidget(QWidget* w, const QString& path, QString* error) const {
  // Rendered in memory, then written with the atomic writer every memplan output uses.
  QBuffer buffer;
  buffer.open(QIODevice::WriteOnly);
  if (path.endsWith(QStringLiteral(".svg"), Qt::CaseInsensitive)) {
#ifdef MEMPLAN_GUI_HAVE_SVG
    QSvgGenerator gen;
    gen.setOutputDevice(&buffer);
    gen.setSize(w->size());
    gen.setViewBox(QRect(QPoint(0, 0), w->size()));
    gen.setTitle(QStringLiteral("memplan"));
    QPainter painter;
    if (!painter.begin(&gen)) {
      if (error) *error = QStringLiteral("%1: cannot render the SVG file").arg(path);
      return false;
    }
    w->render(&painter);
    painter.end();
#else
    if (error) *error = QStringLiteral("%1: this build has no SVG support (Qt Svg); export to .png instead").arg(path);
    return false;
#endif
  } else {
    QPixmap pm = w->grab();
    if (pm.isNull() || !pm.save(&buffer, "PNG")) {
      if (error) *error = QStringLiteral("%1: cannot render the PNG file").arg(path);
      return false;
    }
  }
  try {
    WriteFileAtomically(path.toStdString(), buffer.data().toStdString());
  } catch (const MemplanError& e) {
    if (error) *error = QString::fromStdString(e.what());
    return false;
  }
  return true;
}

}  // namespace memplan::gui
