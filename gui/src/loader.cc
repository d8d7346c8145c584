#include "loader.h"

#include <QCoreApplication>
#include <QDeadlineTimer>
#include <QFutureWatcher>
#include <QThread>
#include <QtConcurrent/QtConcurrentRun>
#include <exception>
#include <new>

#include "plan_worker.h"

namespace memplan::gui {

namespace {
struct LoadResult {
  ItemPtr item;
  QString error;
};
}  // namespace

Loader::Loader(QObject* parent) : QObject(parent) { qRegisterMetaType<ItemPtr>(); }

void Loader::load(int slot, const QString& path, const ModelOptions& options,
                  const QStringList& models) {
  ++pending_;
  auto* watcher = new QFutureWatcher<LoadResult>(this);
  connect(watcher, &QFutureWatcher<LoadResult>::finished, this, [this, watcher, slot, path] {
    LoadResult r = watcher->result();
    watcher->deleteLater();
    --pending_;
    if (r.item)
      emit loaded(slot, r.item);
    else
      emit failed(slot, path, r.error);
    if (pending_ == 0) emit idle();
  });
  std::string p = path.toStdString();
  std::vector<std::string> opened;
  for (const QString& m : models) opened.push_back(m.toStdString());
  watcher->setFuture(QtConcurrent::run([p, options, opened]() -> LoadResult {
    // Everything is caught here: nothing may escape into Qt's thread pool.
    try {
      // A plan file is replayed on its model, when the model is there, for its schedule.
      return {
          std::make_shared<const Item>(WithPlanSchedule(p, LoadItem(p, options), opened, options)),
          {}};
    } catch (const MemplanError& e) {
      return {nullptr, QString::fromStdString(e.what())};
    } catch (const std::bad_alloc&) {
      return {nullptr, QString::fromStdString(p) + QStringLiteral(": out of memory while loading")};
    } catch (const std::exception& e) {
      return {nullptr, QString::fromStdString(p) + QStringLiteral(": internal error: ") +
                           QString::fromStdString(e.what())};
    } catch (...) {
      return {nullptr, QString::fromStdString(p) + QStringLiteral(": internal error")};
    }
  }));
}

bool Loader::waitForIdle(int timeout_ms) {
  QDeadlineTimer deadline(timeout_ms);
  while (pending_ > 0 && !deadline.hasExpired()) {
    QCoreApplication::processEvents(QEventLoop::AllEvents, 50);
    if (pending_ > 0) QThread::msleep(5);
  }
  return pending_ == 0;
}

}  // namespace memplan::gui
