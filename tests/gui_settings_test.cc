// One set of training settings per window (issue 25): a model opened beside a plan, run or
// profile is analysed with their batch, optimizer and loss; files that disagree are marked in
// "Opened files" with the reason and left out of the pages; on a GPU the memory is shown by
// kind (allocated, reserved, device memory from CUPTI). The GPU files are recorded ones
// (tests/data/gpu/: `memplan plan/run --batch 32 --device cuda` and a CUPTI profile of
// resnet50 on an H200, LibTorch 2.11), so no GPU is needed.
#include <gtest/gtest.h>

#include <QAbstractItemModel>
#include <QApplication>
#include <QChart>
#include <QChartView>
#include <QDir>
#include <QImage>
#include <QSet>
#include <QValueAxis>
#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>

#include "main_window.h"
#include "memplan/plan.h"
#include "memplan/planner.h"
#include "models/compare_models.h"
#include "pages/compare_page.h"
#include "pages/plan_page.h"
#include "pages/timeline_page.h"
#include "testing/corpus.h"
#include "testing/graph_builder.h"
#include "timeline_chart.h"

namespace memplan::gui {
namespace {

QString TempPath(const std::string& name) {
  return QString::fromStdString(::testing::TempDir() + "gui_s_" + name);
}

QString GpuFile(const char* name) {
  return QString::fromStdString(std::string(MEMPLAN_SOURCE_DIR) + "/tests/data/gpu/" + name);
}

// The row of the opened file whose path ends in `name`.
const FileRow* RowOf(const std::vector<FileRow>& rows, const QString& name) {
  for (const FileRow& r : rows)
    if (r.path.endsWith(name)) return &r;
  return nullptr;
}

ItemPtr ModelItem(const MainWindow& w) {
  for (const ItemPtr& p : w.items())
    if (p->kind == SourceKind::kModel) return p;
  return nullptr;
}

// The value of the compare table's row `quantity` in `column`.
QString CompareCell(QAbstractItemModel* m, const QString& quantity, int column) {
  for (int r = 0; r < m->rowCount(); ++r) {
    if (m->index(r, CompareModel::kQuantity).data().toString() == quantity)
      return m->index(r, column).data().toString();
  }
  return QStringLiteral("(no row)");
}

class GuiGpuFiles : public ::testing::Test {
 protected:
  // resnet50 with the recorded batch-32 plan, run and CUPTI profile (what issue 25 opened).
  void Open(MainWindow& w, bool with_profile = true) {
    QStringList files = {QString::fromStdString(testing::CorpusModel("resnet50")),
                         GpuFile("resnet50-plan.json"), GpuFile("resnet50-run.json")};
    if (with_profile) files << GpuFile("resnet50-profile.json");
    w.openFiles(files);
    ASSERT_TRUE(w.waitForIdle(600000));
    ASSERT_TRUE(w.errors().isEmpty()) << w.errors().join("\n").toStdString();
  }
};

TEST_F(GuiGpuFiles, AModelTakesTheBatchOfItsPlanAndRun) {
  MainWindow window;  // no settings chosen: the files give them
  ASSERT_EQ(window.batchBoxValue(), 1);
  Open(window, /*with_profile=*/false);
  // The plan and the run say "batch": 32, "optimizer": "sgd", "loss": "cross_entropy"
  // (read from the recorded files by hand).
  EXPECT_EQ(window.batchBoxValue(), 32);
  EXPECT_EQ(window.optimizerBoxText(), "sgd");
  EXPECT_EQ(window.settingsSource(), "resnet50-plan.json");
  ItemPtr model = ModelItem(window);
  ASSERT_TRUE(model);
  ASSERT_TRUE(model->analysis);
  EXPECT_EQ(model->analysis->graph.batch, 32);
  EXPECT_EQ(model->analysis->graph.optimizer, Optimizer::kSgd);
  EXPECT_EQ(model->analysis->graph.loss_kind, LossKind::kCrossEntropy);
  // The run was on cuda:0: the model is predicted for a CUDA device too.
  EXPECT_EQ(model->predicted_for, "cuda");
  EXPECT_GT(model->predicted_reserved_peak_bytes, model->baseline_peak_bytes);
  // Every file agrees: none is marked, all three are shown.
  for (const FileRow& r : window.fileRows())
    EXPECT_TRUE(r.mismatch.isEmpty()) << r.mismatch.toStdString();
  EXPECT_EQ(window.items().size(), 3u);
  const QString head = window.summaryHeadline();
  EXPECT_TRUE(head.contains("resnet50.onnx")) << head.toStdString();
  EXPECT_TRUE(head.contains(" · batch 32 · sgd · cuda")) << head.toStdString();
  EXPECT_FALSE(head.contains("batch 1 ")) << head.toStdString();
  // The plan's 1,489,403,456 B allocated for a budget of 1,489,714,976 B (both 1.39 GiB), the
  // run's allocated peak 1,562,918,400 B = 1.46 GiB and reserved 2,210,398,208 B = 2.06 GiB,
  // each named for its kind.
  EXPECT_TRUE(head.contains("plan (selective) <b>1.39 GiB</b> allocated for a budget of 1.39 GiB"))
      << head.toStdString();
  EXPECT_TRUE(head.contains("measured <b>1.46 GiB</b> allocated, <b>2.06 GiB</b> reserved"))
      << head.toStdString();
}

TEST_F(GuiGpuFiles, TheRunsAllocatorModeIsTheOnePredicted) {
  // The recorded run with the field a newer `memplan run` writes: "allocator_mode": "default".
  std::ifstream in(GpuFile("resnet50-run.json").toStdString());
  nlohmann::json run = nlohmann::json::parse(in);
  ASSERT_FALSE(run.contains("allocator_mode"));
  run["allocator_mode"] = "default";
  const QString path = TempPath("run_default_mode.json");
  std::ofstream(path.toStdString()) << run.dump();
  MainWindow window;
  window.openFiles({QString::fromStdString(testing::CorpusModel("resnet50")), path});
  ASSERT_TRUE(window.waitForIdle(600000));
  ASSERT_TRUE(ModelItem(window));
  EXPECT_EQ(ModelItem(window)->predicted_for, "cuda");
  EXPECT_EQ(ModelItem(window)->allocator_mode, "default");  // not the environment's expandable
}

TEST_F(GuiGpuFiles, EveryPageShowsOneBatchAndTheKindsOfMemory) {
  MainWindow window;
  window.resize(1400, 900);
  window.show();
  Open(window);
  // Screenshots for docs/screenshots when MEMPLAN_GUI_SCREENSHOTS names a folder.
  const char* out = std::getenv("MEMPLAN_GUI_SCREENSHOTS");
  auto shoot = [&](const QString& page, const QString& suffix = {}) {
    ASSERT_TRUE(window.setPage(page));
    ASSERT_TRUE(window.waitForIdle(600000));
    for (int i = 0; i < 5; ++i) QApplication::processEvents();
    const QImage image = window.grab().toImage();
    ASSERT_FALSE(image.isNull());
    QSet<QRgb> colors;
    for (int y = 0; y < image.height(); y += 4)
      for (int x = 0; x < image.width(); x += 4) colors.insert(image.pixel(x, y));
    EXPECT_GT(colors.size(), 40) << page.toStdString() << ": blank?";
    if (out)
      image.save(QDir(QString::fromLocal8Bit(out))
                     .filePath(QStringLiteral("gpu-%1%2.png").arg(page, suffix)));
  };
  for (const QString& page : MainWindow::pageNames()) shoot(page);
  // The model's own timeline (no plan) does not draw the profile of the plan's run.
  window.setPage("timeline");
  EXPECT_EQ(window.timelinePage()->selectedItem()->kind, SourceKind::kModel);
  for (const QString& n : window.timelineChart()->seriesNames())
    EXPECT_FALSE(n.startsWith("device memory")) << n.toStdString();

  // The timeline of the plan the run executed (replayed on the model for CUDA): the allocated
  // prediction, the CUPTI profile's device memory and the reserved prediction, each under its
  // own name; the run's measured peaks as figures of their kind.
  window.setPage("timeline");
  window.timelinePage()->chooseItem(QStringLiteral("resnet50-plan.json (plan) · selective"));
  const QStringList names = window.timelineChart()->seriesNames();
  auto has = [&](const QString& prefix) {
    for (const QString& n : names)
      if (n.startsWith(prefix)) return true;
    return false;
  };
  EXPECT_TRUE(has("device memory (CUPTI) · peak 2.04 GiB")) << names.join(" | ").toStdString();
  EXPECT_TRUE(has("reserved, predicted · peak")) << names.join(" | ").toStdString();
  // 2,210,398,208 B: the run's last step (the profile's cuda_reserved_peak_bytes is the same).
  EXPECT_TRUE(names.contains("reserved peak, measured 2.06 GiB"))
      << names.join(" | ").toStdString();
  EXPECT_TRUE(names.contains("allocated peak, measured 1.46 GiB"))
      << names.join(" | ").toStdString();
  for (const QString& n : names)
    EXPECT_FALSE(n.startsWith("measured (resnet50-profile")) << n.toStdString();
  shoot("timeline", "-plan");

  // Compare: the model against the run, at one batch (no "stretched" series), reserved
  // measured beside reserved predicted.
  window.setPage("compare");
  window.comparePage()->choose(QStringLiteral("resnet50.onnx (model)"),
                               QStringLiteral("resnet50-run.json (run)"));
  QAbstractItemModel* cm = window.comparePage()->compareModel();
  EXPECT_EQ(CompareCell(cm, "CUDA reserved peak", CompareModel::kB), "2.06 GiB");
  EXPECT_NE(CompareCell(cm, "Predicted reserved peak", CompareModel::kA), "\u2014");
  // One batch: the model's baseline beside the run's plan's (2,979,429,952 B = 2.77 GiB, made
  // at batch 32 by an earlier memplan), not a batch-1 baseline a tenth of it.
  EXPECT_EQ(CompareCell(cm, "Baseline peak", CompareModel::kB), "2.77 GiB");
  EXPECT_TRUE(CompareCell(cm, "Baseline peak", CompareModel::kA).startsWith("2.7"))
      << CompareCell(cm, "Baseline peak", CompareModel::kA).toStdString();

  // The plan explorer: the slider spans the plan's own baseline (2,979,429,952 B); the plan's
  // budget 1,489,714,976 B is 50% of it. The sweep ran in the background.
  window.setPage("plan");
  ASSERT_TRUE(window.waitForIdle(600000));
  EXPECT_EQ(window.planPage()->sliderBaselineBytes(), 2979429952);
  EXPECT_EQ(window.planPage()->sliderPercent(), 50);
  EXPECT_TRUE(window.planPage()->budgetText().contains("of the plan's baseline 2.77 GiB"))
      << window.planPage()->budgetText().toStdString();
  EXPECT_FALSE(window.planPage()->statusText().contains("Open a model"))
      << window.planPage()->statusText().toStdString();
  EXPECT_FALSE(window.planPage()->sweeping());
  EXPECT_GT(window.planPage()->sweepPoints().size(), 1u);
  // Readable charts at 1400x900 and at 1024x768: plots wide enough for their tick labels.
  for (QSize size : {QSize(1400, 900), QSize(1024, 768)}) {
    window.resize(size);
    for (int i = 0; i < 5; ++i) QApplication::processEvents();
    EXPECT_GT(window.planChart()->chart()->plotArea().width(), 400) << size.width();
    EXPECT_GT(window.planPage()->paretoChart()->chart()->plotArea().width(), 200) << size.width();
    EXPECT_GT(window.planPage()->paretoChart()->chart()->plotArea().height(), 100) << size.width();
  }
  shoot("plan", "-1024x768");
}

// A tiny model, and a plan of it written as `memplan plan --json` writes it.
class GuiMismatch : public ::testing::Test {
 protected:
  void SetUp() override {
    prefix_ =
        std::string("mm_") + ::testing::UnitTest::GetInstance()->current_test_info()->name() + "_";
    model_ = Save("tiny.onnx", 4);
    other_ = Save("other.onnx", 6);  // another structure: a wider weight
  }
  std::string Save(const std::string& name, int64_t width) {
    testing::GraphBuilder b;
    b.Input("x", {-1, 8}).Param("w", {8, width}).Node("MatMul", {"x", "w"}, {"y"}).Output("y");
    const std::string path = TempPath(prefix_ + name).toStdString();
    b.Save(path);
    return path;
  }
  QString PlanJson(const std::string& model, int64_t batch, const std::string& name) {
    LoadOptions o;
    o.batch = batch;
    const TrainingGraph g = LoadTrainingGraph(model, o);
    PlanOptions po;
    po.strategy = "none";
    const Plan p = MakePlan(g, CostModel{}, po);
    const QString path = TempPath(prefix_ + name);
    std::ofstream(path.toStdString()) << PlanToJson(p, g).dump();
    return path;
  }
  QString AnalysisJson(int64_t batch, const std::string& name,
                       GradientLifetime grads = GradientLifetime::kNone) {
    LoadOptions o;
    o.batch = batch;
    o.grads = grads;
    const QString path = TempPath(prefix_ + name);
    std::ofstream(path.toStdString())
        << AnalysisToJson(Analyze(LoadTrainingGraph(model_, o))).dump();
    return path;
  }
  std::string prefix_, model_, other_;
};

TEST_F(GuiMismatch, FilesThatDisagreeAreMarkedWithTheReason) {
  MainWindow window;
  const QString plan = PlanJson(model_, 4, "plan_b4.json");
  const QString analysis = AnalysisJson(2, "analysis_b2.json");
  const QString foreign = PlanJson(other_, 4, "other_plan_b4.json");
  const QString kept = AnalysisJson(4, "analysis_kept.json", GradientLifetime::kKept);
  window.openFiles({QString::fromStdString(model_), plan, analysis, foreign, kept});
  ASSERT_TRUE(window.waitForIdle(120000));
  ASSERT_TRUE(window.errors().isEmpty()) << window.errors().join("\n").toStdString();
  // The first file that records settings (the plan, batch 4) sets them; the model follows.
  EXPECT_EQ(window.batchBoxValue(), 4);
  EXPECT_EQ(window.settingsSource(),
            QStringLiteral("gui_s_") + QString::fromStdString(prefix_) + "plan_b4.json");
  ItemPtr model = ModelItem(window);
  ASSERT_TRUE(model);
  EXPECT_EQ(model->analysis->graph.batch, 4);
  const std::vector<FileRow> rows = window.fileRows();
  ASSERT_TRUE(RowOf(rows, "analysis_b2.json"));
  ASSERT_TRUE(RowOf(rows, "other_plan_b4.json"));
  EXPECT_TRUE(RowOf(rows, "tiny.onnx")->mismatch.isEmpty());
  EXPECT_TRUE(rows.at(1).mismatch.isEmpty()) << rows.at(1).mismatch.toStdString();  // the plan
  const QString batch_reason = RowOf(rows, "analysis_b2.json")->mismatch;
  EXPECT_TRUE(batch_reason.startsWith(
      "not combined: batch 2, not 4 (the window's settings, batch 4 · sgd · cross_entropy"))
      << batch_reason.toStdString();
  // Gradients kept between steps, where the plan (memplan's default) sets them to None.
  EXPECT_TRUE(
      RowOf(rows, "analysis_kept.json")->mismatch.startsWith("not combined: grads kept, not none"))
      << RowOf(rows, "analysis_kept.json")->mismatch.toStdString();
  const QString model_reason = RowOf(rows, "other_plan_b4.json")->mismatch;
  EXPECT_TRUE(model_reason.startsWith("not combined: made for another model (structure "))
      << model_reason.toStdString();
  // Neither is combined with the model: the summary names the model and the matching plan
  // only, and the analysis, chosen on the timeline, is drawn alone and says why.
  QAbstractItemModel* summary = window.itemModels().at(0);
  for (int r = 0; r < summary->rowCount(); ++r) {
    const QString from = summary->index(r, 2).data().toString();
    EXPECT_FALSE(from.contains("analysis_b2") || from.contains("other_plan")) << from.toStdString();
  }
  window.timelinePage()->chooseItem(
      QStringLiteral("gui_s_%1analysis_b2.json (analysis)").arg(QString::fromStdString(prefix_)));
  ASSERT_EQ(window.timelinePage()->selectedItem()->kind, SourceKind::kAnalysis);
  const QString title = window.timelineChart()->chart()->title();
  EXPECT_TRUE(title.contains("⚠ batch 2, not 4: not the window's settings, drawn alone"))
      << title.toStdString();
  EXPECT_FALSE(title.contains("budget")) << title.toStdString();
  // Choosing batch 2 turns it round: the model is analysed again, the analysis is shown and
  // both plans are marked.
  ModelOptions two;
  two.batch = 2;
  window.setModelOptions(two);
  window.openFiles({});
  ASSERT_TRUE(window.waitForIdle(120000));
  EXPECT_EQ(window.batchBoxValue(), 2);
  EXPECT_EQ(window.settingsSource(), "the toolbar");
  ASSERT_TRUE(ModelItem(window));
  EXPECT_EQ(ModelItem(window)->analysis->graph.batch, 2);
  const std::vector<FileRow> after = window.fileRows();
  EXPECT_TRUE(RowOf(after, "analysis_b2.json")->mismatch.isEmpty());
  EXPECT_TRUE(after.at(1).mismatch.startsWith(
      "not combined: batch 4, not 2 (the window's settings, batch 2 · sgd · "
      "cross_entropy, come from the toolbar)"))
      << after.at(1).mismatch.toStdString();
}

}  // namespace
}  // namespace memplan::gui
