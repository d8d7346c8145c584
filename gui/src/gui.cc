// memplan gui: the dashboard, or (with --screenshot) a headless render of one page.
#include "memplan/gui.h"

#include <CLI/CLI.hpp>
#include <QApplication>
#include <QDir>
#include <QFileInfo>
#include <QStringList>
#include <QTimer>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <string>
#include <vector>

#include "main_window.h"
#include "memplan/parse.h"
#include "plan_worker.h"

namespace memplan {

namespace {

struct GuiArgs {
  gui::ModelOptions model;
  // --batch or --optimizer given: the window keeps them, and files made with other settings
  // are marked. Otherwise the opened files' settings are followed.
  bool chosen = false;
  std::string screenshot;
  std::string page = "summary";
  Budget budget;  // --budget SIZE, or 50%: of the first model's baseline peak
  std::string strategy = "auto";
  int width = 1400, height = 900;
  std::vector<std::string> files;
};

// The options after "memplan gui", parsed with CLI11 like the rest of memplan; the values go
// through memplan/parse.h as on the command line. Throws CLI::CallForHelp for --help and
// MemplanError on bad input.
GuiArgs ParseArgs(CLI::App& app, int argc, char** argv) {
  GuiArgs a;
  std::string batch, optimizer, budget, size;
  app.add_option("--batch", batch,
                 "the batch size of the models opened (default: the opened plan's, run's or "
                 "profile's, else 1)")
      ->type_name("N");
  app.add_option("--optimizer", optimizer, "the optimizer of the models opened (default sgd)")
      ->type_name("sgd|momentum|adam");
  app.add_option("--screenshot", a.screenshot,
                 "render without a display (Qt's offscreen platform), write the picture and exit: "
                 "0 when it was written and every file opened, 1 otherwise")
      ->type_name("OUT.png|OUT.svg");
  app.add_option("--page", a.page, "the page to show (default summary)")
      ->type_name("summary|timeline|time|lifetimes|plan|compare");
  app.add_option("--size", size, "the window's size (default 1400x900)")->type_name("WxH");
  app.add_option("--budget", budget,
                 "plan the first model for SIZE (or N% of its baseline peak) in the plan explorer")
      ->type_name("SIZE|PERCENT%");
  app.add_option("--strategy", a.strategy, "the planner for --budget (default auto)")
      ->type_name("S");
  app.add_option("files", a.files, "models and memplan JSON files to open")
      ->type_name("MODEL.onnx|analysis.json|plan.json|run.json|profile.json");
  for (CLI::Option* o : app.get_options()) o->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  app.get_option("files")->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  try {
    app.parse(argc - 1, argv + 1);  // after "memplan": "gui" is the app's name
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == static_cast<int>(CLI::ExitCodes::Success)) throw;  // --help
    throw MemplanError(e.what());
  }
  if (app.count("--batch")) a.model.batch = ParseInteger("--batch", batch, 1, INT64_MAX);
  if (app.count("--optimizer")) a.model.optimizer = ParseOptimizer(optimizer);
  a.chosen = app.count("--batch") > 0 || app.count("--optimizer") > 0;
  if (app.count("--budget")) a.budget = ParseBudget("--budget", budget);
  if (app.count("--strategy") &&
      !gui::PlannerStrategies().contains(QString::fromStdString(a.strategy))) {
    throw MemplanError("--strategy: no strategy '" + a.strategy + "' (" +
                       gui::PlannerStrategies().join(QStringLiteral(", ")).toStdString() + ")");
  }
  if (app.count("--size")) {
    size_t x = size.find('x');
    if (x == std::string::npos)
      throw MemplanError("--size wants WxH, like 1400x900, not '" + size + "'");
    a.width = static_cast<int>(ParseInteger("--size width", size.substr(0, x), 1, 8000));
    a.height = static_cast<int>(ParseInteger("--size height", size.substr(x + 1), 1, 8000));
  }
  if (!gui::MainWindow::pageNames().contains(QString::fromStdString(a.page))) {
    throw MemplanError("--page: no page '" + a.page + "' (" +
                       gui::MainWindow::pageNames().join(", ").toStdString() + ")");
  }
  return a;
}

}  // namespace

int RunGui(int argc, char** argv, const std::function<std::string()>& machine_rates) {
  CLI::App parser("the dashboard: models and memplan JSON files side by side", "memplan gui");
  GuiArgs args;
  try {
    args = ParseArgs(parser, argc, argv);
  } catch (const CLI::ParseError&) {  // --help
    std::fputs(parser.help().c_str(), stdout);
    return 0;
  } catch (const MemplanError& e) {
    std::fprintf(stderr, "memplan gui: error: %s (see memplan gui --help)\n", e.what());
    return 1;
  }
  const bool headless = !args.screenshot.empty();
  if (headless && qEnvironmentVariableIsEmpty("QT_QPA_PLATFORM"))
    qputenv("QT_QPA_PLATFORM", "offscreen");
  // QApplication keeps references to argc/argv.
  static int qargc = 1;
  static char name[] = "memplan";
  static char* qargv[] = {name, nullptr};
  QApplication app(qargc, qargv);
  QApplication::setApplicationName(QStringLiteral("memplan"));

  gui::MainWindow window;
  window.setModelOptions(args.model, args.chosen);
  if (machine_rates) window.setMachineRates(machine_rates());
  QStringList files;
  for (const std::string& f : args.files) files << QString::fromStdString(f);
  window.openFiles(files);

  auto plan_if_asked = [&window, &args] {
    int64_t budget = args.budget.bytes;
    if (args.budget.percent > 0) {
      for (const auto& item : window.items()) {
        if (item->analysis) {
          budget = args.budget.Resolve(item->baseline_peak_bytes);
          break;
        }
      }
    }
    if (budget > 0) window.requestPlan(budget, QString::fromStdString(args.strategy));
  };
  if (!headless) {
    window.show();
    if (args.budget.bytes > 0 || args.budget.percent > 0) {
      QTimer::singleShot(0, &window, [&window, plan_if_asked] {
        window.waitForIdle(10 * 60 * 1000);
        plan_if_asked();
      });
    }
    return app.exec();
  }
  window.resize(args.width, args.height);
  window.setPage(QString::fromStdString(args.page));
  window.show();
  if (!window.waitForIdle(10 * 60 * 1000)) {
    std::fprintf(stderr, "memplan gui: loading did not finish in 10 minutes\n");
    return 1;
  }
  plan_if_asked();
  window.waitForIdle(10 * 60 * 1000);
  // Let layouts settle at the final size before grabbing.
  for (int i = 0; i < 5; ++i) QApplication::processEvents();
  QString out = QString::fromStdString(args.screenshot);
  QString error;
  if (!window.exportWidget(&window, out, &error)) {
    std::fprintf(stderr, "memplan gui: error: %s\n", error.toStdString().c_str());
    return 1;
  }
  std::printf("wrote %s (%s page, %dx%d)\n", args.screenshot.c_str(), args.page.c_str(), args.width,
              args.height);
  for (const QString& e : window.errors())
    std::fprintf(stderr, "memplan gui: error: %s\n", e.toStdString().c_str());
  return window.errors().isEmpty() ? 0 : 1;
}

}  // namespace memplan
