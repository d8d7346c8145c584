#include "main_window.h"

#include <QAction>
#include <QApplication>
#include <QBuffer>
#include <QComboBox>
#include <QDeadlineTimer>
#include <QFileDialog>
#include <QHBoxLayout>
#include <QLabel>
#include <QPainter>
#include <QPushButton>
#include <QSortFilterProxyModel>
#include <QSpinBox>
#include <QStatusBar>
#include <QTabWidget>
#include <QThread>
#include <QToolBar>
#include <QVBoxLayout>
#include <algorithm>
#include <climits>
#include <optional>

#ifdef MEMPLAN_GUI_HAVE_SVG
#include <QSvgGenerator>
#endif

#include "common.h"
#include "lifetime_view.h"
#include "memplan/parse.h"
#include "models/alive_model.h"
#include "models/compare_models.h"
#include "models/storage_model.h"
#include "models/strategy_model.h"
#include "models/summary_models.h"
#include "models/time_models.h"
#include "pages/compare_page.h"
#include "pages/lifetimes_page.h"
#include "pages/plan_page.h"
#include "pages/summary_page.h"
#include "pages/time_page.h"
#include "pages/timeline_page.h"
#include "timeline_chart.h"

namespace memplan::gui {

namespace {
const char* kPages[] = {"summary", "timeline", "time", "lifetimes", "plan", "compare"};

// A batch as the box can show it (a QSpinBox holds an int).
int SpinBatch(int64_t batch) { return static_cast<int>(std::clamp<int64_t>(batch, 1, INT_MAX)); }
}  // namespace

MainWindow::MainWindow(QWidget* parent) : QMainWindow(parent) {
  setWindowTitle(QStringLiteral("memplan — training memory dashboard"));
  loader_ = new Loader(this);
  connect(loader_, &Loader::loaded, this, &MainWindow::onLoaded);
  connect(loader_, &Loader::failed, this, &MainWindow::onFailed);
  connect(loader_, &Loader::idle, this,
          [this] { statusBar()->showMessage(QStringLiteral("Ready"), 3000); });

  // Toolbar: open, model options, export.
  QToolBar* tb = addToolBar(QStringLiteral("main"));
  tb->setMovable(false);
  QAction* open = tb->addAction(QStringLiteral("Open…"), this, &MainWindow::openDialog);
  open->setShortcut(QKeySequence::Open);
  tb->addSeparator();
  tb->addWidget(new QLabel(QStringLiteral(" Batch ")));
  batch_spin_ = new QSpinBox;
  batch_spin_->setRange(1, INT_MAX);
  batch_spin_->setValue(SpinBatch(options_.batch));
  tb->addWidget(batch_spin_);
  tb->addWidget(new QLabel(QStringLiteral(" Optimizer ")));
  optimizer_combo_ = new QComboBox;
  optimizer_combo_->addItems(
      {QStringLiteral("sgd"), QStringLiteral("momentum"), QStringLiteral("adam")});
  tb->addWidget(optimizer_combo_);
  tb->addWidget(new QLabel(QStringLiteral(" Device ")));
  device_combo_ = new QComboBox;
  device_combo_->addItems({QStringLiteral("cpu"), QStringLiteral("cuda")});
  device_combo_->setToolTip(QStringLiteral(
      "cuda: predict as memplan analyze --device cuda does (cuBLAS workspaces, the caching "
      "allocator's reserved memory)"));
  tb->addWidget(device_combo_);
  tb->addAction(QStringLiteral("Re-analyze"), this, &MainWindow::reanalyze)
      ->setToolTip(QStringLiteral(
          "Analyze the opened models again with these settings; files made with others are "
          "then marked and left out"));
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
  banner_->setStyleSheet(QStringLiteral(
      "#errorBanner { background: #fde2e1; border: 1px solid #c01010; border-radius: 3px; }"));
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

  summary_ = new SummaryPage;
  timeline_ = new TimelinePage(docs_);
  time_ = new TimePage(docs_);
  lifetimes_ = new LifetimesPage;
  plan_ = new PlanPage(docs_);
  compare_ = new ComparePage(docs_);
  tabs_->addTab(summary_, QStringLiteral("Summary"));
  tabs_->addTab(timeline_, QStringLiteral("Timeline"));
  tabs_->addTab(time_, QStringLiteral("Time"));
  tabs_->addTab(lifetimes_, QStringLiteral("Lifetimes"));
  tabs_->addTab(plan_, QStringLiteral("Plan explorer"));
  tabs_->addTab(compare_, QStringLiteral("Compare"));
  connect(timeline_, &TimelinePage::itemChosen, this, &MainWindow::refreshLifetimes);
  connect(timeline_, &TimelinePage::rangeChanged, lifetimes_->view(), &LifetimeView::setRange);
  connect(plan_, &PlanPage::planned, this, &MainWindow::onPlanned);
  connect(plan_, &PlanPage::saved, this, [this](const QString& path) {
    statusBar()->showMessage(QStringLiteral("Wrote %1").arg(path), 5000);
  });
  connect(plan_, &PlanPage::error, this, &MainWindow::showError);
  resize(1400, 900);
  refreshAll();
}

MainWindow::~MainWindow() {
  // Let workers finish before their results' receivers go away.
  loader_->waitForIdle(600000);
  plan_->waitForIdle(600000);
}

void MainWindow::setMachineRates(const std::string& rates) { plan_->setMachineRates(rates); }

void MainWindow::setModelOptions(const ModelOptions& options, bool chosen) {
  options_ = options;
  chosen_options_ = options;
  settings_chosen_ = chosen;
  docs_.setSettings(options_, QStringLiteral("the toolbar"));
  showSettings();
}

void MainWindow::showSettings() {
  batch_spin_->setValue(SpinBatch(options_.batch));
  optimizer_combo_->setCurrentText(QString::fromLatin1(OptimizerName(options_.optimizer)));
  device_combo_->setCurrentText(options_.device.empty() ? QStringLiteral("cpu")
                                                        : QStringLiteral("cuda"));
}

QString MainWindow::optimizerBoxText() const { return optimizer_combo_->currentText(); }

QString MainWindow::summaryHeadline() const { return summary_->headline(); }

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

TimelineChart* MainWindow::timelineChart() const { return timeline_->chart(); }
TimelineChart* MainWindow::planChart() const { return plan_->chart(); }
TimelineChart* MainWindow::compareChart() const { return compare_->chart(); }
LifetimeView* MainWindow::lifetimeView() const { return lifetimes_->view(); }

QList<QAbstractItemModel*> MainWindow::itemModels() const {
  return {summary_->summaryModel(),  summary_->breakdownModel(), summary_->filesModel(),
          timeline_->aliveModel(),   timeline_->aliveProxy(),    plan_->strategyModel(),
          compare_->compareModel(),  compare_->keptModel(),      time_->nodeModel(),
          time_->nodeProxy(),        time_->recomputeModel(),    compare_->nodeTimeModel(),
          compare_->nodeTimeProxy(), lifetimes_->storageModel(), lifetimes_->storageProxy()};
}

// ---------------------------------------------------------------------------------------
// Documents.

void MainWindow::openFiles(const QStringList& paths) {
  QStringList models;  // where a plan file made elsewhere finds its model
  for (const QString& p : paths)
    if (!p.endsWith(QStringLiteral(".json"), Qt::CaseInsensitive)) models << p;
  for (int i = 0; i < docs_.size(); ++i)
    if (docs_.slot(i) && docs_.slot(i)->kind == SourceKind::kModel) models << docs_.path(i);
  for (const QString& p : paths) {
    const int slot = docs_.add(p);
    if (p.endsWith(QStringLiteral(".json"), Qt::CaseInsensitive)) {
      json_loading_.insert(slot);
      json_with_[slot] = {options_.device + "/" + options_.allocator_mode, models};
      loader_->load(slot, p, options_, models);
    } else {
      waiting_models_.push_back(slot);  // a model: analysed with the settings the files give
    }
  }
  if (!paths.isEmpty())
    statusBar()->showMessage(QStringLiteral("Loading %1 file(s)…").arg(paths.size()));
  settle();
  summary_->refreshFiles(docs_);
}

void MainWindow::loadModel(int slot) {
  docs_.setLoading(slot);
  model_loading_.insert(slot);
  loaded_with_[slot] = options_;
  loader_->load(slot, docs_.path(slot), options_);
}

// One set of settings per window: the toolbar's when chosen, else the first opened file's
// that records them. Models are (re)analysed with them once no JSON file is still being read;
// a model is analysed again only when the settings differ from those of its last load.
void MainWindow::settle() {
  QString source = QStringLiteral("the toolbar");
  if (!settings_chosen_) {
    // From the chosen defaults, not from the settings of a file read earlier: files arrive in
    // any order, and one's dims must not stay when another one comes first.
    options_ = docs_.fileSettings(chosen_options_, &source).value_or(chosen_options_);
  }
  docs_.setSettings(options_, source);
  showSettings();
  // A plan file is replayed on its model for the device the window predicts for (on a GPU
  // with the cuBLAS workspaces and the reserved bytes): again when that device changes.
  for (int i = 0; i < docs_.size(); ++i) {
    auto it = json_with_.find(i);
    if (it == json_with_.end() || json_loading_.count(i) || !docs_.slot(i)) continue;
    const std::string device = options_.device + "/" + options_.allocator_mode;
    if (docs_.slot(i)->kind != SourceKind::kPlan || it->second.first == device) continue;
    it->second.first = device;
    json_loading_.insert(i);
    loader_->load(i, docs_.path(i), options_, it->second.second);
  }
  if (!json_loading_.empty()) return;
  std::vector<int> start;
  start.swap(waiting_models_);
  for (int i = 0; i < docs_.size(); ++i) {
    auto it = loaded_with_.find(i);
    if (it != loaded_with_.end() && !model_loading_.count(i) && it->second != options_)
      start.push_back(i);
  }
  if (start.empty()) return;
  for (int slot : start) loadModel(slot);
  docs_.setExplorerPlan(nullptr);  // a plan of the model at other settings
  statusBar()->showMessage(QStringLiteral("Analyzing with %1…").arg(Q(SettingsText(options_))));
}

void MainWindow::reanalyze() {
  options_.batch = batch_spin_->value();
  options_.optimizer = ParseOptimizer(optimizer_combo_->currentText().toStdString());
  options_.device = device_combo_->currentText() == QLatin1String("cuda") ? "cuda" : "";
  chosen_options_ = options_;
  settings_chosen_ = true;
  settle();
  refreshAll();
}

bool MainWindow::waitForIdle(int timeout_ms) {
  QDeadlineTimer deadline(timeout_ms);
  while ((loader_->pending() > 0 || plan_->busy()) && !deadline.hasExpired()) {
    QCoreApplication::processEvents(QEventLoop::AllEvents, 50);
    QThread::msleep(5);
  }
  QCoreApplication::processEvents();
  return loader_->pending() == 0 && !plan_->busy();
}

void MainWindow::onLoaded(int slot, ItemPtr item) {
  if (slot < 0 || slot >= docs_.size()) return;
  json_loading_.erase(slot);
  model_loading_.erase(slot);
  // A file whose content is a model (whatever its name) is a model slot from now on.
  if (item->kind == SourceKind::kModel && !loaded_with_.count(slot)) loaded_with_[slot] = options_;
  if (item->kind != SourceKind::kModel) loaded_with_.erase(slot);
  docs_.setLoaded(slot, std::move(item));
  settle();
  refreshAll();
  emit itemsChanged();
}

void MainWindow::onFailed(int slot, const QString& path, const QString& message) {
  json_loading_.erase(slot);
  model_loading_.erase(slot);
  if (slot >= 0 && slot < docs_.size()) docs_.setFailed(slot, message);
  showError(message.startsWith(path) ? message : path + QStringLiteral(": ") + message);
  settle();
  refreshAll();
  emit itemsChanged();
}

void MainWindow::onPlanned(ItemPtr item) {
  docs_.setExplorerPlan(item);
  refreshAll();
  // The timeline and lifetimes follow the explorer's plan.
  timeline_->chooseItem(ItemLabel(*item));
}

int MainWindow::batchBoxValue() const { return batch_spin_->value(); }

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

std::vector<ItemPtr> MainWindow::items() const { return docs_.items(); }

void MainWindow::selectStep(int64_t step) { timeline_->selectStep(step); }

void MainWindow::requestPlan(int64_t budget_bytes, const QString& strategy) {
  plan_->requestPlan(budget_bytes, strategy);
}

// ---------------------------------------------------------------------------------------
// Refreshing the pages from the documents.

void MainWindow::refreshAll() {
  summary_->refreshFiles(docs_);
  summary_->refresh(docs_);
  timeline_->refresh();
  time_->refresh();
  refreshLifetimes();
  plan_->refresh();
  compare_->refresh();
}

void MainWindow::refreshLifetimes() {
  lifetimes_->refresh(timeline_->selectedItem(), docs_.baseItem());
}

// ---------------------------------------------------------------------------------------
// Dialogs and export.

void MainWindow::openDialog() {
  QStringList paths = QFileDialog::getOpenFileNames(
      this, QStringLiteral("Open models or memplan results"), QString(),
      QStringLiteral("Models, results and profiles (*.onnx *.json);;All files (*)"));
  openFiles(paths);
}

void MainWindow::exportDialog(bool svg) {
  QString page = currentPageName();
  QString suffix = svg ? QStringLiteral(".svg") : QStringLiteral(".png");
  QString path = QFileDialog::getSaveFileName(
      this, QStringLiteral("Export %1").arg(page), QStringLiteral("memplan-") + page + suffix,
      svg ? QStringLiteral("SVG (*.svg)") : QStringLiteral("PNG (*.png)"));
  if (path.isEmpty()) return;
  QString error;
  if (!exportPage(page, path, &error))
    showError(error);
  else
    statusBar()->showMessage(QStringLiteral("Wrote %1").arg(path), 5000);
}

bool MainWindow::exportPage(const QString& name, const QString& path, QString* error) {
  QWidget* w = nullptr;
  if (name == QLatin1String("timeline"))
    w = timelineChart();
  else if (name == QLatin1String("lifetimes"))
    w = lifetimeView();
  else if (name == QLatin1String("compare"))
    w = compare_->shownChart();
  else if (name == QLatin1String("time"))
    w = time_->charts();
  else if (name == QLatin1String("plan"))
    w = planChart();
  else
    w = page(name);
  if (!w) {
    if (error)
      *error = QStringLiteral("no page named '%1' (pages: %2)").arg(name, pageNames().join(", "));
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
    if (error)
      *error = QStringLiteral("%1: this build has no SVG support (Qt Svg); export to .png instead")
                   .arg(path);
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
