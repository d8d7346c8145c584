// The dashboard's widgets on Qt's offscreen platform: every page renders a real model, the
// plotted peak is the analysis peak, bad files show a visible error, every item model passes
// QAbstractItemModelTester, and the headless screenshot mode works.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <QAbstractItemModelTester>
#include <QApplication>
#include <QElapsedTimer>
#include <QFile>
#include <QImage>
#include <QSet>
#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>

#include "lifetime_view.h"
#include "main_window.h"
#include "plan_worker.h"
#include "timeline_chart.h"
#include "testing/corpus.h"
#include "testing/graph_builder.h"

namespace memplan::gui {
namespace {

QString TempPath(const std::string& name) { return QString::fromStdString(::testing::TempDir() + "gui_w_" + name); }

// Not blank: many colors, and a good share of the pixels differ from the background.
void ExpectNotBlank(const QImage& image, const std::string& what) {
  ASSERT_FALSE(image.isNull()) << what;
  QSet<QRgb> colors;
  int64_t non_bg = 0, total = 0;
  const QRgb bg = image.pixel(image.width() - 1, image.height() - 1);
  for (int y = 0; y < image.height(); y += 2) {
    for (int x = 0; x < image.width(); x += 2) {
      QRgb p = image.pixel(x, y);
      colors.insert(p);
      non_bg += p != bg;
      ++total;
    }
  }
  EXPECT_GT(colors.size(), 40) << what << ": too few colors, blank?";
  EXPECT_GT(static_cast<double>(non_bg) / total, 0.05) << what;
}

std::string AnalysisJson(const std::string& model, int64_t batch) {
  Item item = LoadItem(model, {batch});
  std::string path = TempPath("analysis_b" + std::to_string(batch) + ".json").toStdString();
  std::ofstream(path) << AnalysisToJson(*item.analysis).dump();
  return path;
}

class GuiWindow : public ::testing::Test {
 protected:
  void SetUp() override {
    model_ = QString::fromStdString(testing::CorpusModel("resnet18"));
    window_ = std::make_unique<MainWindow>();
    window_->setModelOptions({/*batch=*/8});
    window_->resize(1400, 900);
    window_->show();
  }
  std::unique_ptr<MainWindow> window_;
  QString model_;
};

TEST_F(GuiWindow, EveryPageRendersTheModel) {
  window_->openFiles({model_});
  ASSERT_TRUE(window_->waitForIdle(300000));
  EXPECT_TRUE(window_->errors().isEmpty()) << window_->errors().join("\n").toStdString();
  ASSERT_EQ(window_->items().size(), 1u);
  for (const QString& page : MainWindow::pageNames()) {
    ASSERT_TRUE(window_->setPage(page));
    QApplication::processEvents();
    ExpectNotBlank(window_->grab().toImage(), page.toStdString());
    QString png = TempPath(page.toStdString() + ".png");
    QString error;
    ASSERT_TRUE(window_->exportPage(page, png, &error)) << error.toStdString();
    ExpectNotBlank(QImage(png), "exported " + page.toStdString());
  }
  ExpectNotBlank(window_->timelineChart()->grab().toImage(), "timeline chart");
  ExpectNotBlank(window_->lifetimeView()->grab().toImage(), "lifetimes");
  EXPECT_GT(window_->lifetimeView()->rows(), 10);
}

TEST_F(GuiWindow, PlottedPeakIsTheAnalysisPeak) {
  window_->openFiles({model_});
  ASSERT_TRUE(window_->waitForIdle(300000));
  ItemPtr item = window_->items().at(0);
  const int64_t peak = item->analysis->timeline.peak_bytes;
  TimelineChart* chart = window_->timelineChart();
  EXPECT_EQ(chart->plottedPeakBytes(), static_cast<double>(peak));
  // Downsampled to a few points, the peak is still drawn exactly.
  chart->setMaxPoints(20);
  EXPECT_LE(chart->plottedPointCount(), 30u);
  EXPECT_EQ(chart->plottedPeakBytes(), static_cast<double>(peak));
  chart->setMaxPoints(3000);
  // The same for the analysis JSON of the same model (total only).
  MainWindow other;
  other.setModelOptions({8});
  other.openFiles({QString::fromStdString(AnalysisJson(model_.toStdString(), 8))});
  ASSERT_TRUE(other.waitForIdle(300000));
  EXPECT_EQ(other.timelineChart()->plottedPeakBytes(), static_cast<double>(peak));
}

TEST_F(GuiWindow, ClickListsTensorsAliveLargestFirst) {
  window_->openFiles({model_});
  ASSERT_TRUE(window_->waitForIdle(300000));
  ItemPtr item = window_->items().at(0);
  window_->selectStep(item->analysis->timeline.peak_step);
  QAbstractItemModel* alive = window_->itemModels().at(4);  // the sorted view of the alive list
  ASSERT_EQ(alive->rowCount(), static_cast<int>(item->analysis->timeline.alive_at_peak.size()));
  double previous = 1e300, sum = 0;
  for (int r = 0; r < alive->rowCount(); ++r) {
    double b = alive->index(r, 2).data(Qt::UserRole).toDouble();
    EXPECT_LE(b, previous);
    previous = b;
    sum += b;
  }
  EXPECT_EQ(sum, static_cast<double>(item->analysis->timeline.peak_bytes));
  QString hover = window_->timelineChart()->describeStep(item->analysis->timeline.peak_step);
  EXPECT_TRUE(hover.contains("(peak)")) << hover.toStdString();
  EXPECT_TRUE(hover.contains("activations")) << hover.toStdString();
}

TEST_F(GuiWindow, RangeSelectionFiltersLifetimes) {
  window_->openFiles({model_});
  ASSERT_TRUE(window_->waitForIdle(300000));
  window_->timelineChart()->setRange(20, 30);
  EXPECT_EQ(window_->timelineChart()->rangeFirst(), 20);
  EXPECT_EQ(window_->timelineChart()->rangeLast(), 30);
  ASSERT_FALSE(window_->lifetimeView()->spans().empty());
  for (const LifetimeSpan& s : window_->lifetimeView()->spans()) {
    EXPECT_TRUE(s.end >= 20 && s.begin <= 30) << s.name;
  }
  window_->timelineChart()->resetRange();
  EXPECT_EQ(window_->timelineChart()->rangeFirst(), 0);
}

TEST_F(GuiWindow, BadFilesShowAVisibleError) {
  QString garbage = TempPath("garbage.onnx");
  {
    QFile f(garbage);
    ASSERT_TRUE(f.open(QIODevice::WriteOnly));
    f.write("not an onnx model at all");
  }
  QString bad_json = TempPath("bad.json");
  {
    QFile f(bad_json);
    ASSERT_TRUE(f.open(QIODevice::WriteOnly));
    f.write("{\"kind\": \"plan\", \"predicted_peak_bytes\": [}");
  }
  QString missing = TempPath("missing.onnx");
  window_->openFiles({garbage, bad_json, missing, model_});
  ASSERT_TRUE(window_->waitForIdle(300000));
  EXPECT_EQ(window_->errors().size(), 3);
  EXPECT_TRUE(window_->bannerShown());
  for (const QString& p : {garbage, bad_json, missing}) EXPECT_TRUE(window_->bannerText().contains(p.toHtmlEscaped())) << p.toStdString();
  EXPECT_EQ(window_->items().size(), 1u);  // the good model still opened
  ExpectNotBlank(window_->grab().toImage(), "window with errors");
}

TEST_F(GuiWindow, ItemModelsPassTheTester) {
  nlohmann::json plan = {{"kind", "plan"}, {"strategy", "sqrt"}, {"budget_bytes", 100 << 20},
                         {"predicted_peak_bytes", 90 << 20}, {"baseline_peak_bytes", 200 << 20},
                         {"recompute_flops", 1e9}, {"forward_flops", 4e9}, {"checkpoints", {"a", "b"}},
                         {"sections", {{"n1"}, {"n2"}}}, {"feasible", true},
                         {"strategies", {{{"strategy", "sqrt"}, {"predicted_peak_bytes", 90 << 20}, {"feasible", true}}}},
                         {"sweep", {{{"budget_bytes", 100 << 20}, {"predicted_peak_bytes", 90 << 20}, {"overhead", 0.25}}}}};
  QString plan_path = TempPath("plan.json");
  std::ofstream(plan_path.toStdString()) << plan.dump();
  std::vector<std::unique_ptr<QAbstractItemModelTester>> testers;
  for (QAbstractItemModel* m : window_->itemModels()) {
    testers.push_back(std::make_unique<QAbstractItemModelTester>(m, QAbstractItemModelTester::FailureReportingMode::Fatal));
  }
  window_->openFiles({model_, plan_path, QString::fromStdString(AnalysisJson(model_.toStdString(), 8)), TempPath("nope.json")});
  ASSERT_TRUE(window_->waitForIdle(300000));
  window_->selectStep(3);
  for (QAbstractItemModel* m : window_->itemModels()) {
    for (int r = 0; r < m->rowCount(); ++r) {
      for (int c = 0; c < m->columnCount(); ++c) (void)m->index(r, c).data(Qt::ToolTipRole);
    }
  }
  EXPECT_GT(window_->itemModels().at(0)->rowCount(), 5);  // the summary
  EXPECT_EQ(window_->itemModels().at(5)->rowCount(), 1);  // the plan's strategy table
}

TEST_F(GuiWindow, ExportsPngAndSvg) {
  window_->openFiles({model_});
  ASSERT_TRUE(window_->waitForIdle(300000));
  QString error;
  QString png = TempPath("timeline.png"), svg = TempPath("timeline.svg");
  ASSERT_TRUE(window_->exportWidget(window_->timelineChart(), png, &error)) << error.toStdString();
  EXPECT_EQ(QImage(png).size(), window_->timelineChart()->size());
#ifdef MEMPLAN_GUI_HAVE_SVG
  ASSERT_TRUE(window_->exportWidget(window_->timelineChart(), svg, &error)) << error.toStdString();
  QFile f(svg);
  ASSERT_TRUE(f.open(QIODevice::ReadOnly));
  QByteArray text = f.readAll();
  EXPECT_TRUE(text.contains("<svg"));
  EXPECT_TRUE(text.contains("schedule step"));
#endif
  EXPECT_FALSE(window_->exportPage("nonsense", png, &error));
}

TEST_F(GuiWindow, PlanExplorerReplansInAWorker) {
  if (!PlannerAvailable()) GTEST_SKIP() << "built without the planner library";
  window_->openFiles({model_});
  ASSERT_TRUE(window_->waitForIdle(300000));
  const int64_t baseline = window_->items().at(0)->baseline_peak_bytes;
  const int64_t budget = baseline / 10 * 9;
  window_->requestPlan(budget, "optimal");
  ASSERT_TRUE(window_->waitForIdle(300000));
  ASSERT_EQ(window_->items().size(), 2u);
  ItemPtr plan = window_->items().back();
  EXPECT_EQ(plan->kind, SourceKind::kPlan);
  EXPECT_EQ(plan->budget_bytes, budget);
  // 90% of the baseline fits resnet18 with segments alone, the segment-border margin included.
  ASSERT_EQ(plan->feasible, 1);
  EXPECT_LE(plan->plan_peak_bytes, budget);
  EXPECT_EQ(window_->planChart()->plottedPeakBytes(), static_cast<double>(plan->plan_peak_bytes));
  EXPECT_FALSE(plan->sweep.empty());
  EXPECT_GE(window_->itemModels().at(5)->rowCount(), 4);  // strategies at this budget
  ASSERT_TRUE(window_->setPage("plan"));
  ExpectNotBlank(window_->grab().toImage(), "plan explorer");
  // "Save plan" writes the planner's JSON, which opens again as the same plan.
  std::string path = TempPath("saved_plan.json").toStdString();
  SavePlanJson(*plan, path);
  Item reloaded = LoadItem(path);
  EXPECT_EQ(reloaded.kind, SourceKind::kPlan);
  EXPECT_EQ(reloaded.plan_peak_bytes, plan->plan_peak_bytes);
  EXPECT_EQ(reloaded.checkpoints, plan->checkpoints);
}

// The batch box shows the batch of what is open, not the batch the window started with.
class GuiBatchBox : public ::testing::Test {
 protected:
  void SetUp() override {
    testing::GraphBuilder b;
    b.Input("x", {-1, 8}).Param("w", {8, 4}).Node("MatMul", {"x", "w"}, {"y"}).Output("y");
    model_ = TempPath("batch_box_tiny.onnx").toStdString();
    b.Save(model_);
  }
  // The analysis JSON of the tiny model at `batch`, as `memplan analyze --json` writes it.
  std::string AnalysisAt(int64_t batch) {
    LoadOptions o;
    o.batch = batch;
    std::string path = TempPath("batch_box_b" + std::to_string(batch) + ".json").toStdString();
    std::ofstream(path) << AnalysisToJson(Analyze(LoadTrainingGraph(model_, o))).dump();
    return path;
  }
  std::string model_;
};

TEST_F(GuiBatchBox, ShowsTheBatchOfAnOpenAnalysis) {
  MainWindow window;  // models open at batch 1
  ASSERT_EQ(window.batchBoxValue(), 1);
  window.openFiles({QString::fromStdString(AnalysisAt(16))});
  ASSERT_TRUE(window.waitForIdle(60000));
  ASSERT_EQ(window.items().size(), 1u);
  EXPECT_EQ(window.items().at(0)->batch, 16);
  EXPECT_EQ(window.batchBoxValue(), 16);
  EXPECT_EQ(window.modelOptions().batch, 16);
  // A model opened next is analyzed at the batch the box shows.
  window.openFiles({QString::fromStdString(model_)});
  ASSERT_TRUE(window.waitForIdle(60000));
  ASSERT_EQ(window.items().size(), 2u);
  EXPECT_EQ(window.items().at(1)->kind, SourceKind::kModel);
  EXPECT_EQ(window.items().at(1)->batch, 16);
  EXPECT_EQ(window.batchBoxValue(), 16);
}

TEST_F(GuiBatchBox, ShowsBatchesAboveTheOldLimitOf65536) {
  MainWindow window;
  window.openFiles({QString::fromStdString(AnalysisAt(100000))});
  ASSERT_TRUE(window.waitForIdle(60000));
  EXPECT_EQ(window.batchBoxValue(), 100000);
}

TEST_F(GuiBatchBox, AModelOpenedAtABatchShowsIt) {
  MainWindow window;
  window.setModelOptions({/*batch=*/4});
  EXPECT_EQ(window.batchBoxValue(), 4);
  window.openFiles({QString::fromStdString(model_)});
  ASSERT_TRUE(window.waitForIdle(60000));
  ASSERT_EQ(window.items().size(), 1u);
  EXPECT_EQ(window.items().at(0)->batch, 4);
  EXPECT_EQ(window.batchBoxValue(), 4);
}

TEST(GuiScale, DeepTransformerTimelineIsDownsampledExactly) {
  // gpt_deep: thousands of nodes, over ten thousand schedule steps.
  MainWindow window;
  window.setModelOptions({/*batch=*/2});
  window.resize(1400, 900);
  window.show();
  window.openFiles({QString::fromStdString(testing::CorpusModel("gpt_deep"))});
  ASSERT_TRUE(window.waitForIdle(300000));
  ASSERT_EQ(window.items().size(), 1u);
  ItemPtr item = window.items().at(0);
  ASSERT_GT(item->timeline->size(), 5000u);
  TimelineChart* chart = window.timelineChart();
  EXPECT_LE(chart->plottedPointCount(), 3100u);
  EXPECT_EQ(chart->plottedPeakBytes(), static_cast<double>(item->analysis->timeline.peak_bytes));
  QElapsedTimer timer;
  timer.start();
  chart->setRange(100, 4000);  // a drag: redraws the chart and the lifetimes
  chart->resetRange();
  window.selectStep(item->analysis->timeline.peak_step);
  window.setPage("lifetimes");
  window.grab();
  EXPECT_LT(timer.elapsed(), 3000);
}

TEST(GuiTimeline, LargeTimelineStaysCheap) {
  auto t = std::make_shared<TimelineData>();
  const size_t n = 60000;
  for (size_t i = 0; i < n; ++i) {
    int64_t b = static_cast<int64_t>(1000 + (i * 2654435761u) % 5000);
    t->bytes.push_back(b);
    t->phases.push_back(i < n / 2 ? Phase::kForward : Phase::kBackward);
    t->events.push_back("step " + std::to_string(i));
    t->nodes.push_back("");
  }
  t->bytes[45678] = 9'000'000;
  t->peak_bytes = 9'000'000;
  t->peak_step = 45678;
  TimelineChart chart;
  chart.resize(1200, 600);
  QElapsedTimer timer;
  timer.start();
  chart.setPrimary(t, "large");
  chart.grab();
  EXPECT_LT(timer.elapsed(), 5000);
  EXPECT_LE(chart.plottedPointCount(), 3100u);
  EXPECT_EQ(chart.plottedPeakBytes(), 9'000'000.0);
  EXPECT_TRUE(chart.describeStep(45678).contains("(peak)"));
  chart.setRange(45000, 46000);  // zoomed in: every step drawn
  EXPECT_EQ(chart.plottedPointCount(), 1001u);
}

#ifdef MEMPLAN_CLI
TEST(GuiHeadless, ScreenshotWritesAPngAndExits) {
  std::string model = testing::CorpusModel("resnet18");
  std::string out = TempPath("headless.png").toStdString();
  std::remove(out.c_str());
  std::string cmd = std::string("QT_QPA_PLATFORM=offscreen ") + MEMPLAN_CLI + " gui --batch 4 --screenshot '" + out +
                    "' --page timeline --size 1000x700 '" + model + "' > /dev/null 2>&1";
  ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
  QImage image(QString::fromStdString(out));
  EXPECT_EQ(image.size(), QSize(1000, 700));
  ExpectNotBlank(image, "headless");
  // A bad file: the picture (with the error) is still written, and the exit status says so.
  std::string bad = TempPath("headless_bad.json").toStdString();
  std::ofstream(bad) << "{ nope";
  cmd = std::string("QT_QPA_PLATFORM=offscreen ") + MEMPLAN_CLI + " gui --screenshot '" + out + "' '" + bad + "' > /dev/null 2>&1";
  int rc = std::system(cmd.c_str());
  EXPECT_TRUE(WIFEXITED(rc) && WEXITSTATUS(rc) == 1) << rc;
  cmd = std::string(MEMPLAN_CLI) + " gui --page nope --screenshot x.png > /dev/null 2>&1";
  rc = std::system(cmd.c_str());
  EXPECT_TRUE(WIFEXITED(rc) && WEXITSTATUS(rc) == 1) << rc;
}

// Arguments are parsed as strictly as the command line's: exit 1 before any window opens.
TEST(GuiHeadless, BadArgumentsExitOne) {
  for (const char* args : {"--strategy bogus", "--size 2147483648x900", "--size 0x900", "--budget ..5",
                           "--budget 1e30%", "--batch 1.5"}) {
    std::string cmd = std::string(MEMPLAN_CLI) + " gui " + args + " --screenshot x.png > /dev/null 2>&1";
    int rc = std::system(cmd.c_str());
    EXPECT_TRUE(WIFEXITED(rc) && WEXITSTATUS(rc) == 1) << args << ": " << rc;
  }
}

TEST(GuiDocument, ADirectoryIsNotAnEmptyFile) {
  std::string dir = TempPath("a_directory").toStdString();
  ::mkdir(dir.c_str(), 0755);
  try {
    LoadItem(dir, {});
    ADD_FAILURE() << "loaded a directory";
  } catch (const MemplanError& e) {
    EXPECT_NE(std::string(e.what()).find("is a directory"), std::string::npos) << e.what();
  }
}
#endif

}  // namespace
}  // namespace memplan::gui
