// Tensor lifetimes as a Gantt chart: the largest buffers as bars over the schedule steps,
// colored by category; bottleneck tensors outlined, checkpoints marked, recomputed spans
// hatched. A storage a selective plan drops is one row: its forward span outlined, a dashed
// gap, then each recomputed span in the backward. A storage an offload plan moves to pinned host
// memory is one row too: its device span outlined in the host color, its host span (pinned host
// memory, never device memory) hatched in the lower half of the row, then its prefetched device
// span. Painted directly (a chart library would
// draw thousands of bars slowly).
#pragma once

#include <QWidget>
#include <memory>
#include <vector>

#include "document.h"

namespace memplan::gui {

class LifetimeView : public QWidget {
  Q_OBJECT
 public:
  explicit LifetimeView(QWidget* parent = nullptr);

  // The schedule to show (null: none) and the tensors to mark.
  void setSchedule(std::shared_ptr<const Schedule> schedule,
                   std::shared_ptr<const TimelineData> timeline, LifetimeMarks marks,
                   const QString& title);
  void setRange(int64_t first, int64_t last);  // last < 0: everything
  void setMaxBuffers(int n);
  void setIncludePersistent(bool on);
  void setEmptyMessage(const QString& text);

  const std::vector<LifetimeSpan>& spans() const { return spans_; }
  int rows() const { return static_cast<int>(row_of_.size()); }
  // The hover text of a span (what the tooltip shows).
  QString describeSpan(const LifetimeSpan& s) const;
  QSize sizeHint() const override;

 protected:
  void paintEvent(QPaintEvent*) override;
  void mouseMoveEvent(QMouseEvent* e) override;

 private:
  void recompute();
  QRectF barRect(const LifetimeSpan& s, int row) const;

  std::shared_ptr<const Schedule> schedule_;
  std::shared_ptr<const TimelineData> timeline_;
  LifetimeMarks marks_;
  QString title_, empty_message_;
  LifetimeOptions options_;
  std::vector<LifetimeSpan> spans_;
  std::vector<int> span_row_;
  std::vector<BufferId> row_of_;  // row -> buffer
  int64_t first_ = 0, last_ = -1;
};

}  // namespace memplan::gui
