#include "summary_page.h"

#include <QBarCategoryAxis>
#include <QBarSet>
#include <QChart>
#include <QChartView>
#include <QFileInfo>
#include <QHorizontalBarSeries>
#include <QLabel>
#include <QPainter>
#include <QSplitter>
#include <QTableView>
#include <QVBoxLayout>
#include <QValueAxis>
#include <algorithm>

#include "common.h"
#include "document_set.h"
#include "models/summary_models.h"
#include "pages/page_util.h"

namespace memplan::gui {

SummaryPage::SummaryPage(QWidget* parent) : QWidget(parent) {
  auto* v = new QVBoxLayout(this);
  headline_ = new QLabel;
  headline_->setTextFormat(Qt::RichText);
  headline_->setWordWrap(true);
  QFont f = headline_->font();
  f.setPointSizeF(f.pointSizeF() * 1.25);
  headline_->setFont(f);
  v->addWidget(headline_);

  auto* split = new QSplitter(Qt::Horizontal);
  summary_model_ = new SummaryModel(this);
  QTableView* st = MakeTable(summary_model_, split);
  st->setColumnWidth(SummaryModel::kQuantity, 190);
  st->setColumnWidth(SummaryModel::kValue, 330);
  split->addWidget(st);

  auto* right = new QWidget;
  auto* rv = new QVBoxLayout(right);
  rv->setContentsMargins(0, 0, 0, 0);
  breakdown_chart_ = new QChartView(new QChart);
  breakdown_chart_->setRenderHint(QPainter::Antialiasing);
  breakdown_chart_->setMinimumHeight(260);
  breakdown_chart_->chart()->legend()->hide();
  rv->addWidget(breakdown_chart_, 3);
  breakdown_model_ = new BreakdownModel(this);
  QTableView* bt = MakeTable(breakdown_model_, right);
  bt->setColumnWidth(BreakdownModel::kCategory, 180);
  bt->setColumnWidth(BreakdownModel::kBytes, 150);
  rv->addWidget(bt, 2);
  split->addWidget(right);
  split->setStretchFactor(0, 1);
  split->setStretchFactor(1, 1);
  v->addWidget(split, 4);

  files_model_ = new FilesModel(this);
  QTableView* ft = MakeTable(files_model_, this);
  ft->setColumnWidth(FilesModel::kFile, 420);
  ft->setColumnWidth(FilesModel::kKind, 90);
  ft->setMaximumHeight(150);
  v->addWidget(new QLabel(QStringLiteral("<b>Opened files</b>")));
  v->addWidget(ft, 1);
}

void SummaryPage::refreshFiles(const DocumentSet& docs) { files_model_->setRows(docs.fileRows()); }

QString SummaryPage::headline() const { return headline_->text(); }

void SummaryPage::refresh(const DocumentSet& docs) {
  ItemPtr base = docs.baseItem(), plan = docs.planItem(), run = docs.runItem();
  std::vector<ItemPtr> profiles = docs.profileItems();
  ItemPtr profile = profiles.empty() ? nullptr : profiles.back();
  ItemPtr any = base ? base : plan ? plan : run ? run : profile;
  if (!any) {
    headline_->setText(QStringLiteral(
        "<b>No file open.</b> Open a model (.onnx) or a memplan analysis, plan, run or "
        "profile JSON file (toolbar: Open…, or <tt>memplan gui FILE...</tt>)."));
    summary_model_->setRows({});
    breakdown_model_->setRows({});
    breakdown_chart_->chart()->removeAllSeries();
    return;
  }
  summary_model_->setItems(base, plan, run, profile);

  QString model = Q(any->model);
  ItemPtr baseline_src = BaselineSource(base, plan);
  // Every file shown was made with the window's settings (the others are marked below).
  const ModelOptions& settings = docs.settings();
  QString head = QStringLiteral("<b>%1</b>").arg(QFileInfo(model).fileName().toHtmlEscaped());
  head += QStringLiteral(" · batch %1 · %2")
              .arg(settings.batch)
              .arg(QString::fromLatin1(OptimizerName(settings.optimizer)));
  if (!settings.device.empty()) head += QStringLiteral(" · %1").arg(Q(settings.device));
  // On a GPU each figure names its kind: allocated (the caching allocator's blocks) or reserved
  // (its segments); the device memory CUPTI saw is a third.
  const bool gpu = !settings.device.empty();
  auto kinds = [gpu](int64_t allocated, int64_t reserved) {
    QString t = QStringLiteral("<b>%1</b>").arg(BytesQ(allocated));
    if (gpu) t += QStringLiteral(" allocated");
    if (reserved >= 0) t += QStringLiteral(", <b>%1</b> reserved").arg(BytesQ(reserved));
    return t;
  };
  head += QStringLiteral(" · baseline peak %1")
              .arg(kinds(baseline_src ? baseline_src->baseline_peak_bytes : -1,
                         base ? base->predicted_reserved_peak_bytes : -1));
  if (plan) {
    head += QStringLiteral(" · plan (%1) %2 for a budget of %3")
                .arg(Q(plan->strategy),
                     kinds(plan->plan_peak_bytes, plan->predicted_reserved_peak_bytes),
                     BytesQ(plan->budget_bytes));
    if (!plan->budget_of.empty()) head += QStringLiteral(" (of %1 memory)").arg(Q(plan->budget_of));
  }
  if (plan && IsSelective(*plan)) {
    const int64_t recomputed = plan->storages.empty()
                                   ? static_cast<int64_t>(plan->recomputed.size())
                                   : CountSelective(plan->storages).recomputed();
    head += QStringLiteral(", %1 tensors recomputed").arg(recomputed);
  }
  ItemPtr measured = run ? run : profile;
  if (measured && measured->measured_peak_bytes >= 0) {
    head += QStringLiteral(" · %1 %2")
                .arg(run ? QStringLiteral("measured") : QStringLiteral("profiled"),
                     kinds(measured->measured_peak_bytes, measured->measured_reserved_peak_bytes));
  }
  if (profile && profile->device_memory_peak_bytes >= 0)
    head += QStringLiteral(" · device memory (CUPTI) <b>%1</b>")
                .arg(BytesQ(profile->device_memory_peak_bytes));
  headline_->setText(head);
  refreshBreakdown(docs);
}

void SummaryPage::refreshBreakdown(const DocumentSet& docs) {
  ItemPtr bsrc = BreakdownSource(docs.baseItem(), docs.planItem());
  QChart* chart = breakdown_chart_->chart();
  ClearChart(chart);
  if (!bsrc) {
    chart->setTitle(QStringLiteral("No per-category breakdown in the open files"));
    breakdown_model_->setRows({});
    return;
  }
  const int64_t peak = BreakdownPeakBytes(*bsrc);
  breakdown_model_->setBreakdown(bsrc->breakdown, peak);
  int64_t max_b = 1;
  for (int64_t b : bsrc->breakdown) max_b = std::max(max_b, b);
  ByteUnit unit = UnitFor(max_b);
  auto* set = new QBarSet(QStringLiteral("bytes"));
  QStringList cats;
  // Largest at the top of a horizontal bar chart: append smallest first.
  for (MemoryCategory c : CategoriesBySize(bsrc->breakdown)) {
    int64_t b = bsrc->breakdown[static_cast<int>(c)];
    if (b <= 0) continue;
    cats << CategoryLabel(c);
    set->append(static_cast<double>(b) / unit.divisor);
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
  chart->setTitle(QStringLiteral("Memory at the peak by category (%1, from %2)")
                      .arg(BytesQ(peak), Q(bsrc->title)));
}

}  // namespace memplan::gui
