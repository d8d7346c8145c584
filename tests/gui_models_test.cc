// The dashboard's typed table models, each under QAbstractItemModelTester, on small documents
// built here: a few cells checked against values worked out by hand.
#include <gtest/gtest.h>

#include <QAbstractItemModelTester>
#include <memory>
#include <string>

#include "models/alive_model.h"
#include "models/compare_models.h"
#include "models/strategy_model.h"
#include "models/summary_models.h"

namespace memplan::gui {
namespace {

using Tester = QAbstractItemModelTester;

std::unique_ptr<Tester> Attach(QAbstractItemModel* m) {
  return std::make_unique<Tester>(m, Tester::FailureReportingMode::Fatal);
}

std::string Text(const QAbstractItemModel& m, int row, int column, int role = Qt::DisplayRole) {
  return m.index(row, column).data(role).toString().toStdString();
}

// The row whose first column reads `quantity`, or -1.
int RowOf(const QAbstractItemModel& m, const std::string& quantity) {
  for (int r = 0; r < m.rowCount(); ++r) if (Text(m, r, 0) == quantity) return r;
  return -1;
}

std::shared_ptr<TimelineData> Timeline(std::vector<int64_t> bytes) {
  auto t = std::make_shared<TimelineData>();
  t->bytes = std::move(bytes);
  for (size_t i = 0; i < t->bytes.size(); ++i) {
    t->phases.push_back(Phase::kForward);
    t->events.push_back("step " + std::to_string(i));
    t->nodes.push_back("");
    if (t->bytes[i] > t->peak_bytes) {
      t->peak_bytes = t->bytes[i];
      t->peak_step = static_cast<int64_t>(i);
    }
  }
  return t;
}

// A model of 1 KiB of parameters whose plain step peaks at 4 KiB.
ItemPtr TinyModel() {
  auto m = std::make_shared<Item>();
  m->kind = SourceKind::kModel;
  m->title = "tiny.onnx";
  m->model = "/models/tiny.onnx";
  m->batch = 4;
  m->optimizer = "sgd";
  m->num_nodes = 3;
  m->param_bytes = 1024;
  m->forward_flops = 2e6;
  m->baseline_peak_bytes = 4096;
  m->peak_event = "backward /fc (Gemm)";
  m->bottlenecks = {"x1", "x2", "x3", "x4"};
  m->timeline = Timeline({1024, 4096, 2048});
  return m;
}

// A sqrt plan of the tiny model: 3 KiB peak for a 3500 B budget, recomputing 5e5 of 2e6 FLOPs.
ItemPtr TinyPlan() {
  auto p = std::make_shared<Item>(*TinyModel());
  p->kind = SourceKind::kPlan;
  p->title = "plan.json";
  p->strategy = "sqrt";
  p->budget_bytes = 3500;
  p->plan_peak_bytes = 3072;
  p->recompute_flops = 5e5;
  p->overhead = 0.25;  // as the planner wrote it: 5e5 / 2e6
  p->feasible = 1;
  p->checkpoints = {"t1", "t2"};
  p->num_sections = 2;
  p->timeline = Timeline({1024, 3072, 2048, 1024});
  return p;
}

TEST(GuiModels, SummaryShowsTheItemsQuantities) {
  SummaryModel model;
  auto tester = Attach(&model);
  model.setItems(TinyModel(), TinyPlan(), nullptr);
  ASSERT_EQ(model.columnCount(), SummaryModel::kColumnCount);
  int r = RowOf(model, "Baseline peak");
  ASSERT_GE(r, 0);
  EXPECT_EQ(Text(model, r, SummaryModel::kValue), "4.00 KiB");  // 4096 B
  EXPECT_EQ(Text(model, r, SummaryModel::kFrom), "tiny.onnx");
  r = RowOf(model, "Model");
  EXPECT_EQ(Text(model, r, SummaryModel::kValue), "tiny.onnx");
  EXPECT_EQ(Text(model, r, SummaryModel::kValue, Qt::ToolTipRole), "/models/tiny.onnx");
  r = RowOf(model, "Recompute overhead");
  EXPECT_EQ(Text(model, r, SummaryModel::kValue), "25.0% of the forward FLOPs (5.00e+05 FLOPs)");
  EXPECT_EQ(Text(model, r, SummaryModel::kFrom), "plan.json");
  EXPECT_EQ(Text(model, RowOf(model, "Plan peak"), SummaryModel::kValue), "3.00 KiB");  // 3072 B
  EXPECT_EQ(Text(model, RowOf(model, "Fits the budget"), SummaryModel::kValue), "yes");
  EXPECT_EQ(Text(model, RowOf(model, "Checkpoints / sections"), SummaryModel::kValue), "2 / 2");
  EXPECT_EQ(Text(model, RowOf(model, "Measured peak"), SummaryModel::kValue), "\u2014 (no run open)");
  EXPECT_EQ(Text(model, RowOf(model, "Bottleneck tensors"), SummaryModel::kValue), "4: x1, x2, x3…");
  model.setItems(nullptr, nullptr, nullptr);
  EXPECT_EQ(model.rowCount(), 0);
}

TEST(GuiModels, BreakdownListsCategoriesLargestFirstWithShares) {
  BreakdownModel model;
  auto tester = Attach(&model);
  CategoryBytes b{};
  b[static_cast<int>(MemoryCategory::kParameter)] = 100;
  b[static_cast<int>(MemoryCategory::kGradient)] = 100;
  b[static_cast<int>(MemoryCategory::kActivation)] = 300;
  model.setBreakdown(b, /*peak_bytes=*/500);  // 100 + 100 + 300
  ASSERT_EQ(model.rowCount(), kNumMemoryCategories);
  EXPECT_EQ(Text(model, 0, BreakdownModel::kCategory), "activations");
  EXPECT_EQ(Text(model, 0, BreakdownModel::kBytes), "300 B");
  EXPECT_EQ(Text(model, 0, BreakdownModel::kShare), "60.0%");  // 300 / 500
  // Equal shares: reverse stacking order, as the chart stacks them.
  EXPECT_EQ(Text(model, 1, BreakdownModel::kCategory), "gradients");
  EXPECT_EQ(Text(model, 2, BreakdownModel::kCategory), "parameters");
  EXPECT_EQ(Text(model, 2, BreakdownModel::kShare), "20.0%");  // 100 / 500
  EXPECT_EQ(model.index(0, BreakdownModel::kBytes).data(Qt::UserRole).toDouble(), 300.0);
  EXPECT_TRUE(model.index(0, BreakdownModel::kCategory).data(Qt::DecorationRole).isValid());
  model.setBreakdown(b, /*peak_bytes=*/-1);  // peak unknown: no shares
  EXPECT_EQ(Text(model, 0, BreakdownModel::kShare), "\u2014");
}

TEST(GuiModels, FilesShowTheirStatus) {
  FilesModel model;
  auto tester = Attach(&model);
  FileRow loaded{"/data/a.json", FileRow::Status::kLoaded, SourceKind::kAnalysis, {}};
  FileRow failed{"/data/b.onnx", FileRow::Status::kFailed, SourceKind::kModel, "b.onnx: not a model"};
  FileRow loading{"/data/c.onnx", FileRow::Status::kLoading, SourceKind::kModel, {}};
  model.setRows({loaded, failed, loading});
  ASSERT_EQ(model.rowCount(), 3);
  EXPECT_EQ(Text(model, 0, FilesModel::kFile), "a.json");
  EXPECT_EQ(Text(model, 0, FilesModel::kFile, Qt::ToolTipRole), "/data/a.json");
  EXPECT_EQ(Text(model, 0, FilesModel::kKind), "analysis");
  EXPECT_EQ(Text(model, 0, FilesModel::kStatus), "loaded");
  EXPECT_EQ(Text(model, 1, FilesModel::kKind), "");
  EXPECT_EQ(Text(model, 1, FilesModel::kStatus), "b.onnx: not a model");
  EXPECT_EQ(model.index(1, FilesModel::kStatus).data(Qt::ForegroundRole).value<QColor>(), QColor(0xc0, 0x10, 0x10));
  EXPECT_EQ(Text(model, 2, FilesModel::kStatus), "loading…");
}

TEST(GuiModels, AliveListsTheBuffersOfAStep) {
  // What AliveAt returns during a step: parameter p (100 B) and activations b (60 B), a (40 B).
  std::vector<AliveBuffer> alive = {{0, "p", MemoryCategory::kParameter, 100},
                                    {2, "b", MemoryCategory::kActivation, 60},
                                    {1, "a", MemoryCategory::kActivation, 40}};
  AliveModel model;
  auto tester = Attach(&model);
  model.setRows(alive);
  ASSERT_EQ(model.rowCount(), 3);
  EXPECT_EQ(Text(model, 0, AliveModel::kTensor), "p");
  EXPECT_EQ(Text(model, 0, AliveModel::kCategory), "parameters");
  EXPECT_EQ(Text(model, 1, AliveModel::kTensor), "b");
  EXPECT_EQ(Text(model, 1, AliveModel::kBytes), "60 B");
  EXPECT_EQ(model.index(2, AliveModel::kBytes).data(Qt::UserRole).toDouble(), 40.0);
  EXPECT_EQ(model.index(2, AliveModel::kBytes).data(Qt::TextAlignmentRole).toInt(), int(Qt::AlignRight | Qt::AlignVCenter));
}

TEST(GuiModels, StrategiesShowThePlannersNumbers) {
  StrategyModel model;
  auto tester = Attach(&model);
  StrategyRow sqrt{"sqrt", /*peak_bytes=*/3 << 20, /*overhead=*/0.25, /*checkpoints=*/3, /*sections=*/-1,
                   /*feasible=*/true, /*solve_seconds=*/0.5};
  StrategyRow none{"none", /*peak_bytes=*/8 << 20, /*overhead=*/0, /*checkpoints=*/0, /*sections=*/1,
                   /*feasible=*/false, /*solve_seconds=*/2.25};
  model.setRows({sqrt, none});
  ASSERT_EQ(model.columnCount(), StrategyModel::kColumnCount);
  EXPECT_EQ(Text(model, 0, StrategyModel::kPeak), "3.00 MiB");
  EXPECT_EQ(Text(model, 0, StrategyModel::kOverhead), "25.0%");
  EXPECT_EQ(Text(model, 0, StrategyModel::kSections), "\u2014");
  EXPECT_EQ(Text(model, 0, StrategyModel::kFeasible), "yes");
  EXPECT_EQ(Text(model, 0, StrategyModel::kSolveTime), "500.0 ms");
  EXPECT_EQ(Text(model, 1, StrategyModel::kFeasible), "no");
  EXPECT_EQ(Text(model, 1, StrategyModel::kSolveTime), "2.25 s");
  EXPECT_EQ(model.headerData(StrategyModel::kSolveTime, Qt::Horizontal).toString(), "Solve time");
}

TEST(GuiModels, CompareShowsBothItemsAndTheirDifference) {
  CompareModel model;
  auto tester = Attach(&model);
  model.setItems(TinyPlan(), TinyModel());
  int r = RowOf(model, "Predicted peak");
  ASSERT_GE(r, 0);
  EXPECT_EQ(Text(model, r, CompareModel::kA), "3.00 KiB");  // the plan's peak
  EXPECT_EQ(Text(model, r, CompareModel::kB), "4.00 KiB");  // the model's timeline peak
  EXPECT_EQ(Text(model, r, CompareModel::kDelta), "+1.00 KiB (+33.3%)");  // 4096 - 3072 = 1024 = 1/3 of 3072
  r = RowOf(model, "Budget");
  EXPECT_EQ(Text(model, r, CompareModel::kB), "\u2014");
  EXPECT_EQ(Text(model, r, CompareModel::kDelta), "\u2014");
  r = RowOf(model, "Recompute overhead");
  EXPECT_EQ(Text(model, r, CompareModel::kA), "25.0%");
  EXPECT_EQ(Text(model, r, CompareModel::kDelta), "\u2014");  // the model has no overhead
  EXPECT_EQ(Text(model, RowOf(model, "Checkpoints"), CompareModel::kA), "2");
  EXPECT_EQ(Text(model, RowOf(model, "Strategy"), CompareModel::kB), "none");
  r = RowOf(model, "Schedule steps");
  EXPECT_EQ(Text(model, r, CompareModel::kA), "4");
  EXPECT_EQ(Text(model, r, CompareModel::kB), "3");
  model.setItems(TinyPlan(), TinyPlan());
  EXPECT_EQ(Text(model, RowOf(model, "Recompute overhead"), CompareModel::kDelta), "0.0 points");
  model.setItems(nullptr, nullptr);
  EXPECT_EQ(model.rowCount(), 0);
}

TEST(GuiModels, KeptSaysWhichPlanKeepsEachCheckpoint) {
  KeptModel model;
  auto tester = Attach(&model);
  auto a = std::make_shared<Item>(*TinyPlan());  // t1, t2
  auto b = std::make_shared<Item>(*TinyPlan());
  b->checkpoints = {"t2", "t3"};
  model.setItems(a, b);
  ASSERT_EQ(model.rowCount(), 3);
  EXPECT_EQ(Text(model, 0, KeptModel::kTensor), "t1");
  EXPECT_EQ(Text(model, 0, KeptModel::kKeptBy), "A only");
  EXPECT_EQ(Text(model, 1, KeptModel::kTensor), "t3");
  EXPECT_EQ(Text(model, 1, KeptModel::kKeptBy), "B only");
  EXPECT_EQ(Text(model, 2, KeptModel::kTensor), "t2");
  EXPECT_EQ(Text(model, 2, KeptModel::kKeptBy), "both");
  model.setItems(a, nullptr);
  EXPECT_EQ(model.rowCount(), 0);
}

}  // namespace
}  // namespace memplan::gui
