// The dashboard's typed table models, each under QAbstractItemModelTester, on small documents
// built here: a few cells checked against values worked out by hand.
#include <gtest/gtest.h>

#include <QAbstractItemModelTester>
#include <QSortFilterProxyModel>
#include <memory>
#include <string>

#include "common.h"
#include "gui_test_profile.h"
#include "gui_test_selective.h"
#include "models/alive_model.h"
#include "models/compare_models.h"
#include "models/storage_model.h"
#include "models/strategy_model.h"
#include "models/summary_models.h"
#include "models/time_models.h"

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
  for (int r = 0; r < m.rowCount(); ++r)
    if (Text(m, r, 0) == quantity) return r;
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
  EXPECT_EQ(Text(model, RowOf(model, "Measured peak"), SummaryModel::kValue),
            "\u2014 (no run open)");
  EXPECT_EQ(Text(model, RowOf(model, "Bottleneck tensors"), SummaryModel::kValue),
            "4: x1, x2, x3…");
  model.setItems(nullptr, nullptr, nullptr);
  EXPECT_EQ(model.rowCount(), 0);
}

TEST(GuiModels, SummaryCountsKeptAndRecomputedTensors) {
  SummaryModel model;
  auto tester = Attach(&model);
  // gui_test_selective.h: of the saved activations a, b, d, d is kept (100 B) and a, b are
  // recomputed (200 B); h0, saved by nobody, is dropped too; h0 is recomputed twice.
  ItemPtr plan = fixtures::SelectiveItem();
  model.setItems(nullptr, plan, nullptr);
  int r = RowOf(model, "Saved activations kept");
  ASSERT_GE(r, 0);
  EXPECT_EQ(Text(model, r, SummaryModel::kValue), "1 of 3 (100 B)");
  EXPECT_EQ(Text(model, r, SummaryModel::kFrom), "selective");
  r = RowOf(model, "Saved activations recomputed");
  ASSERT_GE(r, 0);
  EXPECT_EQ(Text(model, r, SummaryModel::kValue), "2 of 3 (200 B)");
  r = RowOf(model, "Unsaved storages recomputed");
  ASSERT_GE(r, 0);
  EXPECT_EQ(Text(model, r, SummaryModel::kValue), "1 (100 B), only as inputs of other recomputes");
  r = RowOf(model, "Recomputations in the backward");
  ASSERT_GE(r, 0);
  EXPECT_EQ(Text(model, r, SummaryModel::kValue), "4");
  EXPECT_EQ(Text(model, RowOf(model, "Plan strategy"), SummaryModel::kValue), "selective");
  // A plan file names its recomputed tensors; their sizes need the model.
  auto file = std::make_shared<Item>(*TinyPlan());
  file->strategy = "selective";
  file->recomputed = {"h0", "a"};
  file->predicted_recompute_seconds = 0.0125;
  model.setItems(TinyModel(), file, nullptr);
  EXPECT_EQ(Text(model, RowOf(model, "Tensors recomputed"), SummaryModel::kValue), "2");
  EXPECT_EQ(Text(model, RowOf(model, "Tensors recomputed"), SummaryModel::kValue, Qt::ToolTipRole),
            "h0, a");
  EXPECT_EQ(Text(model, RowOf(model, "Saved activations kept"), SummaryModel::kValue), "\u2014");
  EXPECT_EQ(Text(model, RowOf(model, "Predicted recompute time"), SummaryModel::kValue),
            "12.50 ms");
  // Segmented plans have no such rows.
  model.setItems(TinyModel(), TinyPlan(), nullptr);
  EXPECT_EQ(RowOf(model, "Tensors recomputed"), -1);
  EXPECT_EQ(RowOf(model, "Saved activations kept"), -1);
  EXPECT_EQ(RowOf(model, "Saved activations recomputed"), -1);
}

TEST(GuiModels, StoragesSayKeptOrRecomputedNTimes) {
  StorageModel model;
  auto tester = Attach(&model);
  ItemPtr plan = fixtures::SelectiveItem();
  model.setRows(plan->storages);
  ASSERT_EQ(model.columnCount(), StorageModel::kColumnCount);
  ASSERT_EQ(model.rowCount(), 4);  // h0, a, b, d in TensorId order
  auto row = [&](const std::string& name) {
    for (int r = 0; r < model.rowCount(); ++r)
      if (Text(model, r, StorageModel::kTensor) == name) return r;
    return -1;
  };
  int r = row("h0");
  ASSERT_GE(r, 0);
  EXPECT_EQ(Text(model, r, StorageModel::kDecision), "recomputed (2 times)");
  EXPECT_EQ(Text(model, r, StorageModel::kBytes), "100 B");
  EXPECT_EQ(Text(model, r, StorageModel::kForward), "1–3");
  EXPECT_EQ(Text(model, r, StorageModel::kRecomputed), "10–11, 13–14");
  EXPECT_EQ(model.index(r, StorageModel::kDecision).data(Qt::ForegroundRole).value<QColor>(),
            SelectiveColor());
  r = row("a");
  EXPECT_EQ(Text(model, r, StorageModel::kDecision), "recomputed (1 time)");
  EXPECT_EQ(Text(model, r, StorageModel::kForward), "2–4");
  EXPECT_EQ(Text(model, r, StorageModel::kRecomputed), "14–15");
  r = row("b");
  EXPECT_EQ(Text(model, r, StorageModel::kRecomputed), "11–12");
  r = row("d");
  EXPECT_EQ(Text(model, r, StorageModel::kDecision), "kept");
  EXPECT_EQ(Text(model, r, StorageModel::kForward), "5–8");
  EXPECT_EQ(Text(model, r, StorageModel::kRecomputed), "\u2014");
  // Sorting by the decision puts kept first, then by how often a storage is recomputed.
  QSortFilterProxyModel proxy;
  proxy.setSourceModel(&model);
  proxy.setSortRole(Qt::UserRole);
  auto proxy_tester = Attach(&proxy);
  proxy.sort(StorageModel::kDecision, Qt::DescendingOrder);
  EXPECT_EQ(Text(proxy, 0, StorageModel::kTensor), "h0");
  EXPECT_EQ(Text(proxy, 3, StorageModel::kTensor), "d");
}

TEST(GuiModels, StrategiesShowSelectivePlansRecomputedTensorsAndSeconds) {
  StrategyModel model;
  auto tester = Attach(&model);
  StrategyRow selective{
      "selective",       /*peak_bytes=*/3 << 20, /*overhead=*/0.5,  /*checkpoints=*/0,
      /*sections=*/1,
      /*feasible=*/true, /*solve_seconds=*/0.5,  /*recomputed=*/12, /*recompute_seconds=*/0.004};
  StrategyRow sqrt{"sqrt", 3 << 20, 0.25, 3, 2, true, 0.5};  // a file without the seconds
  model.setRows({selective, sqrt});
  EXPECT_EQ(Text(model, 0, StrategyModel::kRecomputed), "12");
  EXPECT_EQ(Text(model, 0, StrategyModel::kRecomputeTime), "4.00 ms");
  EXPECT_EQ(Text(model, 1, StrategyModel::kRecomputed), "\u2014");
  EXPECT_EQ(Text(model, 1, StrategyModel::kRecomputeTime), "\u2014");
  EXPECT_EQ(model.headerData(StrategyModel::kRecomputed, Qt::Horizontal).toString(),
            "Recomputed tensors");
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
  FileRow failed{"/data/b.onnx", FileRow::Status::kFailed, SourceKind::kModel,
                 "b.onnx: not a model"};
  FileRow loading{"/data/c.onnx", FileRow::Status::kLoading, SourceKind::kModel, {}};
  model.setRows({loaded, failed, loading});
  ASSERT_EQ(model.rowCount(), 3);
  EXPECT_EQ(Text(model, 0, FilesModel::kFile), "a.json");
  EXPECT_EQ(Text(model, 0, FilesModel::kFile, Qt::ToolTipRole), "/data/a.json");
  EXPECT_EQ(Text(model, 0, FilesModel::kKind), "analysis");
  EXPECT_EQ(Text(model, 0, FilesModel::kStatus), "loaded");
  EXPECT_EQ(Text(model, 1, FilesModel::kKind), "");
  EXPECT_EQ(Text(model, 1, FilesModel::kStatus), "b.onnx: not a model");
  EXPECT_EQ(model.index(1, FilesModel::kStatus).data(Qt::ForegroundRole).value<QColor>(),
            QColor(0xc0, 0x10, 0x10));
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
  EXPECT_EQ(model.index(2, AliveModel::kBytes).data(Qt::TextAlignmentRole).toInt(),
            int(Qt::AlignRight | Qt::AlignVCenter));
}

TEST(GuiModels, StrategiesShowThePlannersNumbers) {
  StrategyModel model;
  auto tester = Attach(&model);
  StrategyRow sqrt{"sqrt",
                   /*peak_bytes=*/3 << 20,
                   /*overhead=*/0.25,
                   /*checkpoints=*/3,
                   /*sections=*/-1,
                   /*feasible=*/true,
                   /*solve_seconds=*/0.5};
  StrategyRow none{"none",
                   /*peak_bytes=*/8 << 20,
                   /*overhead=*/0,
                   /*checkpoints=*/0,
                   /*sections=*/1,
                   /*feasible=*/false,
                   /*solve_seconds=*/2.25};
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
  EXPECT_EQ(Text(model, r, CompareModel::kDelta),
            "+1.00 KiB (+33.3%)");  // 4096 - 3072 = 1024 = 1/3 of 3072
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

ItemPtr ProfileItem(Profile p, const std::string& path) {
  return std::make_shared<const Item>(ItemFromProfile(std::move(p), path));
}

// The row of a node (or "" for a phase-level row) in a phase.
int RowOfNode(const NodeTimeModel& m, const std::string& name, Phase phase) {
  for (int r = 0; r < m.rowCount(); ++r) {
    const NodeProfile& n = m.rows()[r].node;
    if (n.name == name && n.phase == phase) return r;
  }
  return -1;
}

TEST(GuiModels, NodeTimeShowsMeasuredAgainstPredicted) {
  NodeTimeModel model;
  auto tester = Attach(&model);
  model.setProfile(std::make_shared<const Profile>(fixtures::HandMadeProfile()));
  ASSERT_EQ(model.rowCount(), 8);  // every NodeProfile, the phase-level ones included
  ASSERT_EQ(model.columnCount(), NodeTimeModel::kColumnCount);
  int r = RowOfNode(model, "mm1", Phase::kForward);
  EXPECT_EQ(Text(model, r, NodeTimeModel::kNode), "mm1");
  EXPECT_EQ(Text(model, r, NodeTimeModel::kOp), "MatMul");
  EXPECT_EQ(Text(model, r, NodeTimeModel::kPhase), "forward");
  EXPECT_EQ(Text(model, r, NodeTimeModel::kMeasured), "4.00 ms");
  EXPECT_EQ(Text(model, r, NodeTimeModel::kPredicted), "5.00 ms");
  EXPECT_EQ(Text(model, r, NodeTimeModel::kDifference), "−1.00 ms");  // 4 - 5
  EXPECT_DOUBLE_EQ(model.index(r, NodeTimeModel::kMeasured).data(Qt::UserRole).toDouble(), 0.004);
  r = RowOfNode(model, "mm2", Phase::kForward);  // 6 ms measured, 3 ms predicted: twice as slow
  EXPECT_EQ(Text(model, r, NodeTimeModel::kSegment), "1");
  EXPECT_EQ(Text(model, r, NodeTimeModel::kDifference), "+3.00 ms");
  EXPECT_EQ(Text(model, r, NodeTimeModel::kRatio), "2.00×");
  EXPECT_EQ(model.index(r, NodeTimeModel::kRatio).data(Qt::ForegroundRole).value<QColor>(),
            QColor(0xb0, 0x10, 0x10));
  r = RowOfNode(model, "relu", Phase::kForward);  // predicted 0: unknown
  EXPECT_EQ(Text(model, r, NodeTimeModel::kPredicted), "—");
  EXPECT_EQ(Text(model, r, NodeTimeModel::kDifference), "—");
  EXPECT_EQ(Text(model, r, NodeTimeModel::kRatio), "—");
  r = RowOfNode(model, "", Phase::kBackward);
  EXPECT_EQ(Text(model, r, NodeTimeModel::kNode), "(the phase, outside nodes)");
  EXPECT_EQ(Text(model, r, NodeTimeModel::kMeasured), "500.0 µs");
  // Sorted by measured time through a proxy, as the page shows it: the backward mm2 first.
  QSortFilterProxyModel proxy;
  auto proxy_tester = Attach(&proxy);
  proxy.setSourceModel(&model);
  proxy.setSortRole(Qt::UserRole);
  proxy.sort(NodeTimeModel::kMeasured, Qt::DescendingOrder);
  EXPECT_EQ(Text(proxy, 0, NodeTimeModel::kNode), "mm2");
  EXPECT_EQ(Text(proxy, 0, NodeTimeModel::kPhase), "backward");
  EXPECT_EQ(Text(proxy, 7, NodeTimeModel::kMeasured), "500.0 µs");
  // Unknown predictions sort below every known one.
  proxy.sort(NodeTimeModel::kPredicted, Qt::DescendingOrder);
  EXPECT_EQ(Text(proxy, 0, NodeTimeModel::kPredicted), "8.00 ms");
  EXPECT_EQ(Text(proxy, 7, NodeTimeModel::kPredicted), "—");
  // On CUDA the measured time is the kernels' (CUPTI) time.
  Profile cuda = fixtures::HandMadeProfile();
  cuda.backend = "cupti";
  cuda.nodes[0].device_seconds = 0.0035;
  model.setProfile(std::make_shared<const Profile>(cuda));
  r = RowOfNode(model, "mm1", Phase::kForward);
  EXPECT_EQ(Text(model, r, NodeTimeModel::kMeasured), "3.50 ms");
  EXPECT_EQ(Text(model, r, NodeTimeModel::kMeasured, Qt::ToolTipRole),
            "kernels 3.50 ms (CUPTI) · host 4.00 ms");
  EXPECT_EQ(Text(model, r, NodeTimeModel::kDifference), "−1.50 ms");  // 3.5 - 5
  model.setProfile(nullptr);
  EXPECT_EQ(model.rowCount(), 0);
}

TEST(GuiModels, RecomputeTimePerSegment) {
  RecomputeTimeModel model;
  auto tester = Attach(&model);
  Profile p = fixtures::HandMadeProfile();
  p.nodes.push_back({/*node=*/2, "mm2", "MatMul", Phase::kRecompute, /*segment=*/1, /*calls=*/1,
                     /*seconds=*/0.002,
                     /*device_seconds=*/0, /*predicted_seconds=*/0.004, 0, 0});
  model.setProfile(std::make_shared<const Profile>(p));
  ASSERT_EQ(model.rowCount(), 3);  // segments 0 and 1, then all
  // Segment 0: mm1 3 ms + relu 1 ms measured, 2.5 ms + 0.5 ms predicted
  // (Profile::RecomputeSeconds(0)).
  EXPECT_EQ(Text(model, 0, RecomputeTimeModel::kSegment), "segment 0");
  EXPECT_EQ(Text(model, 0, RecomputeTimeModel::kMeasured), "4.00 ms");
  EXPECT_EQ(Text(model, 0, RecomputeTimeModel::kPredicted), "3.00 ms");
  EXPECT_EQ(Text(model, 0, RecomputeTimeModel::kDifference), "+1.00 ms");
  EXPECT_EQ(Text(model, 0, RecomputeTimeModel::kRatio), "1.33×");
  EXPECT_EQ(Text(model, 1, RecomputeTimeModel::kSegment), "segment 1");
  EXPECT_EQ(Text(model, 1, RecomputeTimeModel::kRatio), "0.50×");  // 2 ms of a predicted 4 ms
  // All: 6 ms measured, 7 ms predicted.
  EXPECT_EQ(Text(model, 2, RecomputeTimeModel::kSegment), "all segments");
  EXPECT_EQ(Text(model, 2, RecomputeTimeModel::kMeasured), "6.00 ms");
  EXPECT_EQ(Text(model, 2, RecomputeTimeModel::kPredicted), "7.00 ms");
  // A plain step recomputes nothing: no rows.
  Profile plain = fixtures::HandMadeProfile();
  std::erase_if(plain.nodes, [](const NodeProfile& n) { return n.phase == Phase::kRecompute; });
  model.setProfile(std::make_shared<const Profile>(plain));
  EXPECT_EQ(model.rowCount(), 0);
}

TEST(GuiModels, CompareTwoProfiles) {
  // B: the same step with a slower backward mm2 (10 ms instead of 8) and a 36 ms step.
  Profile slower = fixtures::HandMadeProfile();
  slower.step_seconds = 0.036;
  slower.peak_bytes = 4 << 20;
  for (NodeProfile& n : slower.nodes) {
    if (n.name == "mm2" && n.phase == Phase::kBackward) n.seconds = 0.010;
  }
  CompareModel model;
  auto tester = Attach(&model);
  model.setItems(ProfileItem(fixtures::HandMadeProfile(), "a.json"), ProfileItem(slower, "b.json"));
  int r = RowOf(model, "Step time");
  ASSERT_GE(r, 0);
  EXPECT_EQ(Text(model, r, CompareModel::kA), "30.00 ms");
  EXPECT_EQ(Text(model, r, CompareModel::kB), "36.00 ms");
  EXPECT_EQ(Text(model, r, CompareModel::kDelta), "+6.00 ms (+20.0%)");
  r = RowOf(model, "Measured peak");
  EXPECT_EQ(Text(model, r, CompareModel::kA), "3.00 MiB");
  EXPECT_EQ(Text(model, r, CompareModel::kDelta), "+1.00 MiB (+33.3%)");
  // Backward: 0.5 ms outside nodes + mm2 (Profile::PhaseSeconds): 8.5 ms, then 10.5 ms.
  r = RowOf(model, "Backward time");
  EXPECT_EQ(Text(model, r, CompareModel::kA), "8.50 ms");
  EXPECT_EQ(Text(model, r, CompareModel::kB), "10.50 ms");
  EXPECT_EQ(Text(model, r, CompareModel::kDelta), "+2.00 ms (+23.5%)");
  EXPECT_EQ(Text(model, RowOf(model, "Forward time"), CompareModel::kA), "11.00 ms");  // 4 + 1 + 6
  EXPECT_EQ(Text(model, RowOf(model, "Recompute time"), CompareModel::kA), "4.00 ms");
  EXPECT_EQ(Text(model, RowOf(model, "Predicted recompute time"), CompareModel::kA), "3.00 ms");
  EXPECT_EQ(Text(model, RowOf(model, "Optimizer time"), CompareModel::kB), "2.00 ms");
  EXPECT_EQ(RowOf(model, "CUDA reserved peak"), -1);  // CPU profiles
  // CUDA: the phases' times are the host's; the caching allocator's reserved peak is there.
  Profile cuda = slower;
  cuda.backend = "cupti";
  cuda.cuda_reserved_peak_bytes = 6 << 20;
  model.setItems(ProfileItem(fixtures::HandMadeProfile(), "a.json"), ProfileItem(cuda, "b.json"));
  EXPECT_EQ(Text(model, RowOf(model, "Backward time (host)"), CompareModel::kB), "10.50 ms");
  EXPECT_EQ(Text(model, RowOf(model, "CUDA reserved peak"), CompareModel::kB), "6.00 MiB");
  EXPECT_EQ(Text(model, RowOf(model, "CUDA reserved peak"), CompareModel::kA),
            "\u2014");  // A ran on the CPU
  // A plan beside a model has no time rows.
  model.setItems(TinyPlan(), TinyModel());
  EXPECT_EQ(RowOf(model, "Step time"), -1);
  EXPECT_EQ(RowOf(model, "Forward time"), -1);
}

TEST(GuiModels, NodeTimeDiffMatchesNodesAcrossSegmentations) {
  // B: a plain step of the same model: no recompute, one segment, backward mm2 10 ms.
  Profile plain = fixtures::HandMadeProfile();
  std::erase_if(plain.nodes, [](const NodeProfile& n) { return n.phase == Phase::kRecompute; });
  for (NodeProfile& n : plain.nodes) {
    n.segment = 0;
    if (n.name == "mm2" && n.phase == Phase::kBackward) n.seconds = 0.010;
  }
  NodeTimeDiffModel model;
  auto tester = Attach(&model);
  model.setItems(ProfileItem(fixtures::HandMadeProfile(), "a.json"), ProfileItem(plain, "b.json"));
  // A's 8 rows; B's backward phase-level row is of segment 0, A's of segment 1: one more row.
  ASSERT_EQ(model.rowCount(), 9);
  auto row = [&](const std::string& name, const std::string& phase) {
    for (int r = 0; r < model.rowCount(); ++r) {
      if (Text(model, r, NodeTimeDiffModel::kNode) == name &&
          Text(model, r, NodeTimeDiffModel::kPhase) == phase)
        return r;
    }
    return -1;
  };
  int r = row("mm2", "backward");  // matched though its segment differs (1 in A, 0 in B)
  ASSERT_GE(r, 0);
  EXPECT_EQ(Text(model, r, NodeTimeDiffModel::kA), "8.00 ms");
  EXPECT_EQ(Text(model, r, NodeTimeDiffModel::kB), "10.00 ms");
  EXPECT_EQ(Text(model, r, NodeTimeDiffModel::kDelta), "+2.00 ms");
  EXPECT_EQ(Text(model, r, NodeTimeDiffModel::kRatio), "1.25×");
  r = row("mm2", "forward");
  EXPECT_EQ(Text(model, r, NodeTimeDiffModel::kDelta), "+0");
  r = row("mm1", "recompute");  // only in A
  EXPECT_EQ(Text(model, r, NodeTimeDiffModel::kB), "—");
  EXPECT_EQ(Text(model, r, NodeTimeDiffModel::kDelta), "—");
  EXPECT_GE(row("(the phase, segment 1)", "backward"), 0);
  EXPECT_GE(row("(the phase, segment 0)", "backward"), 0);
  model.setItems(ProfileItem(plain, "b.json"), TinyPlan());
  EXPECT_EQ(model.rowCount(), 0);  // needs two profiles
}

TEST(GuiModels, SummaryShowsTheProfile) {
  SummaryModel model;
  auto tester = Attach(&model);
  model.setItems(nullptr, nullptr, nullptr,
                 ProfileItem(fixtures::HandMadeProfile(), "/data/p.json"));
  EXPECT_EQ(Text(model, RowOf(model, "Model"), SummaryModel::kValue), "toy.onnx");
  EXPECT_EQ(Text(model, RowOf(model, "Profile"), SummaryModel::kValue),
            "step 3 on cpu (cpu backend)");
  EXPECT_EQ(Text(model, RowOf(model, "Profiled peak"), SummaryModel::kValue), "3.00 MiB");
  EXPECT_EQ(Text(model, RowOf(model, "Profiled step time"), SummaryModel::kValue), "30.00 ms");
  EXPECT_EQ(Text(model, RowOf(model, "Recompute measured / predicted"), SummaryModel::kValue),
            "4.00 ms / 3.00 ms");
  EXPECT_EQ(Text(model, RowOf(model, "Profile"), SummaryModel::kFrom), "p.json");
  EXPECT_EQ(RowOf(model, "Measured peak"), -1);  // no run: the profile says it
}

}  // namespace
}  // namespace memplan::gui
