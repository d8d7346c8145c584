// An offload plan on the dashboard (plan.h, "Offload"): the lifetimes draw each offloaded
// storage's host span apart from device memory, the timeline draws the pinned host memory and
// the link's copies, and the plan explorer replans with a host budget. Every expected number is
// read from the plan JSON `memplan plan` wrote, not from what the GUI drew.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <QApplication>
#include <QImage>
#include <cstdlib>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <string>

#include "common.h"
#include "lifetime_view.h"
#include "main_window.h"
#include "models/summary_models.h"
#include "pages/lifetimes_page.h"
#include "pages/plan_page.h"
#include "pages/timeline_page.h"
#include "plan_worker.h"
#include "testing/corpus.h"
#include "testing/graph_builder.h"
#include "timeline_chart.h"

namespace memplan::gui {
namespace {

// The explorer's budget for the MLP below, in percent of its baseline.
constexpr int kExplorerPercent = 60;

#ifdef MEMPLAN_CLI
// gpt at batch 8 and 70% of its baseline in one micro-batch: the plan offloads (about 32 saved
// activations, with the machine's default host budget). Whether it fits does not matter here
// (`memplan plan` exits 2 then, and still writes the plan).
nlohmann::json OffloadPlanJson(const std::string& model, const std::string& path) {
  const std::string cmd = std::string(MEMPLAN_CLI) + " plan '" + model +
                          "' --batch 8 --budget 70% --micro-batches 1 --strategy offload --json '" +
                          path + "' > /dev/null 2>&1";
  const int rc = std::system(cmd.c_str());
  EXPECT_TRUE(WIFEXITED(rc) && (WEXITSTATUS(rc) == 0 || WEXITSTATUS(rc) == 2)) << cmd;
  std::ifstream in(path);
  return nlohmann::json::parse(in);
}

TEST(GuiOffload, LifetimesTimelineAndLinkShowTheOffloadPlan) {
  const std::string model = testing::CorpusModel("gpt");
  const std::string path = ::testing::TempDir() + "gui_offload_plan.json";
  const nlohmann::json j = OffloadPlanJson(model, path);
  ASSERT_EQ(j["micro_batches"], 1);
  const std::set<std::string> offloaded(j["offloaded"].begin(), j["offloaded"].end());
  ASSERT_FALSE(offloaded.empty());
  const int64_t host_peak = j["predicted_host_peak_bytes"];
  // Each offloaded storage is copied twice: its offload and its prefetch.
  size_t copies = 0;
  for (const nlohmann::json& s : j["offload"]["storages"])
    copies += s.contains("offload_step") + s.contains("prefetch_step");
  EXPECT_EQ(copies, 2 * offloaded.size());

  MainWindow window;
  window.setModelOptions({/*batch=*/8});
  window.resize(1400, 900);
  window.show();
  window.openFiles({QString::fromStdString(model), QString::fromStdString(path)});
  ASSERT_TRUE(window.waitForIdle(300000));
  ItemPtr base, plan;
  for (const ItemPtr& i : window.items()) (i->kind == SourceKind::kPlan ? plan : base) = i;
  ASSERT_TRUE(base && plan && base->analysis);
  ASSERT_TRUE(plan->schedule) << "the plan file was not replayed on its model";
  const TrainingGraph& g = base->analysis->graph;
  EXPECT_TRUE(plan->offload);
  EXPECT_EQ(plan->predicted_host_peak_bytes, host_peak);

  // Lifetimes: host spans for exactly the offloaded storages, none of them device memory.
  ASSERT_TRUE(window.setPage("lifetimes"));
  window.lifetimesPage()->refresh(plan, nullptr);
  LifetimeView* view = window.lifetimeView();
  view->setMaxBuffers(500);
  QApplication::processEvents();
  std::set<std::string> host_spans;
  size_t host_count = 0, prefetched = 0;
  for (const LifetimeSpan& s : view->spans()) {
    const Buffer& b = plan->schedule->buffers[s.buffer];
    EXPECT_EQ(s.host, b.host) << s.name;
    if (s.host) {
      ++host_count;
      host_spans.insert(g.tensors[b.tensor].name);
      EXPECT_TRUE(s.offloaded) << s.name;
    }
    prefetched += s.prefetched;
  }
  EXPECT_EQ(host_spans, offloaded);
  EXPECT_EQ(host_count, offloaded.size());
  EXPECT_EQ(prefetched, offloaded.size());
  window.grab().save(QString::fromStdString(::testing::TempDir() + "gui_offload_lifetimes.png"));

  // Timeline: the pinned host memory's series peaks at the plan's host peak, also the highest
  // of the file's per-step host bytes; the link has one bar per copy.
  int64_t file_max = 0;
  for (const nlohmann::json& p : j["timeline"])
    file_max = std::max<int64_t>(file_max, p.value("host_bytes", 0));
  EXPECT_EQ(file_max, host_peak);
  ASSERT_TRUE(window.setPage("timeline"));
  TimelinePage* page = window.timelinePage();
  page->chooseItem(ItemLabel(*plan));
  QApplication::processEvents();
  ASSERT_EQ(page->selectedItem(), plan);
  EXPECT_EQ(page->chart()->plottedHostPeakBytes(), static_cast<double>(host_peak));
  EXPECT_TRUE(page->chart()->seriesNames().join("|").contains("pinned host memory"));
  LinkLanes* link = page->linkLanes();
  EXPECT_TRUE(link->isVisible());
  EXPECT_EQ(link->copies().size(), copies);
  EXPECT_EQ(link->bars(), static_cast<int>(copies));
  window.grab().save(QString::fromStdString(::testing::TempDir() + "gui_offload_timeline.png"));
  // The summary names the host peak and the stall, as the file has them.
  std::map<QString, QString> summary;
  for (const SummaryRow& r : SummaryRows(base, plan, nullptr, nullptr))
    summary[r.quantity] = r.value;
  EXPECT_TRUE(summary["Host peak"].startsWith(BytesQ(host_peak)))
      << summary["Host peak"].toStdString();
  EXPECT_EQ(summary["Predicted copy stall"],
            DurationText(j["predicted_stall_seconds"].get<double>()));
  EXPECT_TRUE(summary["Offloaded to host memory"].startsWith(
      QStringLiteral("%1 storages").arg(offloaded.size())));
}
#endif

// The explorer plans `offload` with a host budget read as `memplan plan --host-budget` reads
// it. x [64, 32] -> MatMul -> Relu, Sigmoid, Tanh, Relu, Sigmoid, Tanh -> MatMul -> cross
// entropy: six saved activations of 8 KiB. A 1 KiB host budget holds none of them: the plan
// offloads nothing, and the status shows the planner's own words (the plan JSON's notes); with
// the default host budget it offloads; a size that is not one is refused.
TEST(GuiOffload, PlanExplorerReplansWithAHostBudget) {
  if (!PlannerAvailable()) GTEST_SKIP() << "built without the planner library";
  testing::GraphBuilder b = testing::ActivationChainMlp();
  const std::string model = ::testing::TempDir() + "gui_offload_mlp.onnx";
  b.Save(model);
  MainWindow window;
  window.setModelOptions({/*batch=*/64});
  window.resize(1400, 900);
  window.show();
  window.openFiles({QString::fromStdString(model)});
  ASSERT_TRUE(window.waitForIdle(60000));
  const int64_t baseline = window.items().at(0)->baseline_peak_bytes;
  const int64_t budget = baseline * kExplorerPercent / 100;
  ASSERT_TRUE(window.setPage("plan"));
  PlanPage* page = window.planPage();

  // No host budget: the machine's default; the plan offloads, and says how much.
  window.requestPlan(budget, QStringLiteral("offload"));
  ASSERT_TRUE(window.waitForIdle(300000));
  ItemPtr plan = window.items().back();
  ASSERT_EQ(plan->kind, SourceKind::kPlan);
  const nlohmann::json k = nlohmann::json::parse(plan->plan_json);
  ASSERT_FALSE(k["offloaded"].empty()) << k["notes"].dump();
  EXPECT_GT(k["offload"]["host_budget_bytes"].get<int64_t>(), 1024);
  EXPECT_TRUE(page->statusText().contains(
      QStringLiteral("Offloaded %1 storages").arg(k["offloaded"].size())))
      << page->statusText().toStdString();
  EXPECT_EQ(window.planChart()->plottedHostPeakBytes(),
            static_cast<double>(k["predicted_host_peak_bytes"].get<int64_t>()));

  page->setHostBudgetText(QStringLiteral("1KiB"));
  window.requestPlan(budget, QStringLiteral("offload"));
  ASSERT_TRUE(window.waitForIdle(300000));
  plan = window.items().back();
  const nlohmann::json j = nlohmann::json::parse(plan->plan_json);
  EXPECT_EQ(j["offload"]["host_budget_bytes"], 1024);
  EXPECT_EQ(j["offloaded"], nlohmann::json::array());
  EXPECT_EQ(j["predicted_host_peak_bytes"], 0);
  EXPECT_EQ(plan->host_budget_bytes, 1024);
  bool said = false;
  for (const nlohmann::json& note : j["notes"]) {
    const QString text = QString::fromStdString(note.get<std::string>()).toHtmlEscaped();
    said = true;
    EXPECT_TRUE(page->statusText().contains(text)) << page->statusText().toStdString();
  }
  EXPECT_TRUE(said) << j.dump();
  EXPECT_TRUE(page->statusText().contains(QStringLiteral("host budget of 1.00 KiB")))
      << page->statusText().toStdString();

  // Not a size: the command line's parser's message, and no plan requested.
  page->setHostBudgetText(QStringLiteral("lots"));
  window.requestPlan(budget, QStringLiteral("offload"));
  EXPECT_TRUE(page->statusText().contains(QStringLiteral("Host budget:")))
      << page->statusText().toStdString();
  EXPECT_FALSE(page->busy());
  window.grab().save(QString::fromStdString(::testing::TempDir() + "gui_offload_explorer.png"));
}

}  // namespace
}  // namespace memplan::gui
