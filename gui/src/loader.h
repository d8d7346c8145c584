// Opens files off the UI thread (QtConcurrent) and hands back Items; failures become a
// signal carrying the message, never an exception crossing the event loop.
#pragma once

#include <QObject>
#include <QString>
#include <memory>

#include "document.h"

namespace memplan::gui {

using ItemPtr = std::shared_ptr<const Item>;

class Loader : public QObject {
  Q_OBJECT
 public:
  explicit Loader(QObject* parent = nullptr);

  // Starts loading; `slot` is echoed back so that callers keep their own order.
  // `models`: the models opened with it, where a plan file's model may be found
  // (WithPlanSchedule).
  void load(int slot, const QString& path, const ModelOptions& options,
            const QStringList& models = {});
  int pending() const { return pending_; }
  // Processes events until nothing is pending or `timeout_ms` passed; true when idle.
  bool waitForIdle(int timeout_ms);

 signals:
  void loaded(int slot, memplan::gui::ItemPtr item);
  void failed(int slot, const QString& path, const QString& message);
  void idle();

 private:
  int pending_ = 0;
};

}  // namespace memplan::gui

Q_DECLARE_METATYPE(memplan::gui::ItemPtr)
