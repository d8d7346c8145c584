#include "plan_worker.h"

#include <QCoreApplication>
#include <QDeadlineTimer>
#include <QFutureWatcher>
#include <QThread>
#include <QtConcurrent/QtConcurrentRun>

namespace memplan::gui {

namespace {
struct PlanResult {
  ItemPtr item;
  QString error;
};
}  // namespace

#ifndef MEMPLAN_GUI_HAVE_PLANNER
bool PlannerAvailable() { return false; }
QStringList PlannerStrategies() { return {}; }
Item MakePlanItem(const PlanRequest&) {
  throw MemplanError("re-planning needs the planner library, which this build of memplan does not have");
}
void SavePlanJson(const Item&, const std::string&) {
  throw MemplanError("saving a plan needs the planner library, which this build of memplan does not have");
}
#endif

PlanWorker::PlanWorker(QObject* parent) : QObject(parent) { qRegisterMetaType<ItemPtr>(); }

void PlanWorker::request(PlanRequest r) {
  if (busy_) {
    next_ = std::move(r);
    return;
  }
  start(std::move(r));
}

void PlanWorker::start(PlanRequest r) {
  busy_ = true;
  auto* watcher = new QFutureWatcher<PlanResult>(this);
  connect(watcher, &QFutureWatcher<PlanResult>::finished, this, [this, watcher] {
    PlanResult res = watcher->result();
    watcher->deleteLater();
    busy_ = false;
    if (next_) {
      PlanRequest n = std::move(*next_);
      next_.reset();
      start(std::move(n));  // a newer request supersedes this result
      return;
    }
    if (res.item) emit planned(res.item);
    else emit failed(res.error);
  });
  watcher->setFuture(QtConcurrent::run([r = std::move(r)]() -> PlanResult {
    try {
      return {std::make_shared<const Item>(MakePlanItem(r)), {}};
    } catch (const std::exception& e) {
      return {nullptr, QString::fromStdString(e.what())};
    } catch (...) {
      return {nullptr, QStringLiteral("the planner failed")};
    }
  }));
}

bool PlanWorker::waitForIdle(int timeout_ms) {
  QDeadlineTimer deadline(timeout_ms);
  while (busy_ && !deadline.hasExpired()) {
    QCoreApplication::processEvents(QEventLoop::AllEvents, 50);
    if (busy_) QThread::msleep(5);
  }
  return !busy_;
}

}  // namespace memplan::gui
