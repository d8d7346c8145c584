// memplan gui: the dashboard, or (with --screenshot) a headless render of one page.
#include "memplan/gui.h"

#include <QApplication>
#include <QDir>
#include <QFileInfo>
#include <QStringList>
#include <QTimer>
#include <cstdio>
#include <cstdint>
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

const char* kGuiUsage =
    "usage: memplan gui [--batch N] [--optimizer sgd|momentum|adam]\n"
    "                   [--screenshot OUT.png|OUT.svg [--page summary|timeline|lifetimes|plan|compare]\n"
    "                    [--size WxH]] [--budget SIZE [--strategy S]]\n"
    "                   [MODEL.onnx|analysis.json|plan.json|run.json]...\n"
    "\n"
    "--budget plans the first model for SIZE (or N% of its baseline peak) in the plan explorer.\n"
    "--screenshot renders the dashboard without a display (Qt's offscreen platform), writes\n"
    "the picture and exits: 0 when it was written and every file opened, 1 otherwise.\n";

struct GuiArgs {
  gui::ModelOptions model;
  std::string screenshot;
  std::string page = "summary";
  Budget budget;  // --budget SIZE, or 50%: of the first model's baseline peak
  std::string strategy = "auto";
  int width = 1400, height = 900;
  std::vector<std::string> files;
};

GuiArgs ParseArgs(int argc, char** argv) {
  GuiArgs a;
  for (int i = 2; i < argc; ++i) {
    std::string arg = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) throw MemplanError(arg + " needs a value");
      return argv[++i];
    };
    if (arg == "--batch") a.model.batch = ParseInteger(arg, value(), 1, INT64_MAX);
    else if (arg == "--optimizer") a.model.optimizer = ParseOptimizer(value());
    else if (arg == "--screenshot") a.screenshot = value();
    else if (arg == "--page") a.page = value();
    else if (arg == "--budget") a.budget = ParseBudget(arg, value());
    else if (arg == "--strategy") {
      a.strategy = value();
      if (!gui::PlannerStrategies().contains(QString::fromStdString(a.strategy))) {
        throw MemplanError("--strategy: no strategy '" + a.strategy + "' (" +
                           gui::PlannerStrategies().join(QStringLiteral(", ")).toStdString() + ")");
      }
    }
    else if (arg == "--size") {
      std::string v = value();
      size_t x = v.find('x');
      if (x == std::string::npos) throw MemplanError("--size wants WxH, like 1400x900, not '" + v + "'");
      a.width = static_cast<int>(ParseInteger("--size width", v.substr(0, x), 1, 8000));
      a.height = static_cast<int>(ParseInteger("--size height", v.substr(x + 1), 1, 8000));
    } else if (arg == "--help" || arg == "-h") {
      throw MemplanError("");
    } else if (arg.size() > 1 && arg[0] == '-') {
      throw MemplanError("unknown option '" + arg + "'");
    } else {
      a.files.push_back(arg);
    }
  }
  if (!gui::MainWindow::pageNames().contains(QString::fromStdString(a.page))) {
    throw MemplanError("--page: no page '" + a.page + "' (summary, timeline, lifetimes, plan, compare)");
  }
  return a;
}

}  // namespace

int RunGui(int argc, char** argv) {
  GuiArgs args;
  try {
    args = ParseArgs(argc, argv);
  } catch (const MemplanError& e) {
    if (*e.what()) std::fprintf(stderr, "memplan gui: error: %s\n\n", e.what());
    std::fputs(kGuiUsage, *e.what() ? stderr : stdout);
    return *e.what() ? 1 : 0;
  }
  const bool headless = !args.screenshot.empty();
  if (headless && qEnvironmentVariableIsEmpty("QT_QPA_PLATFORM")) qputenv("QT_QPA_PLATFORM", "offscreen");
  // QApplication keeps references to argc/argv.
  static int qargc = 1;
  static char name[] = "memplan";
  static char* qargv[] = {name, nullptr};
  QApplication app(qargc, qargv);
  QApplication::setApplicationName(QStringLiteral("memplan"));

  gui::MainWindow window;
  window.setModelOptions(args.model);
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
  std::printf("wrote %s (%s page, %dx%d)\n", args.screenshot.c_str(), args.page.c_str(), args.width, args.height);
  for (const QString& e : window.errors()) std::fprintf(stderr, "memplan gui: error: %s\n", e.toStdString().c_str());
  return window.errors().isEmpty() ? 0 : 1;
}

}  // namespace memplan
