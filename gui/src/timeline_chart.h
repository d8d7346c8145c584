// The memory timeline: bytes alive over the schedule's steps, stacked by category, phases
// shaded, a budget line and overlaid timelines (measured, or another plan in compare mode).
// Drawing is downsampled to a few thousand points per series (the peak is always kept);
// hover and clicks read the exact per-step values.
#pragma once

#include <QChartView>
#include <QPoint>
#include <QStringList>
#include <memory>
#include <vector>

#include "document.h"

class QRubberBand;
class QValueAxis;

namespace memplan::gui {

struct Overlay {
  std::shared_ptr<const TimelineData> data;
  QString label;
  QColor color;
};

// A horizontal line at a figure the files give without a per-step series (a measured
// reserved peak, a run's allocated peak), named for the kind of memory it is.
struct Mark {
  int64_t bytes = -1;
  QString label;
  QColor color;
};

class TimelineChart : public QChartView {
  Q_OBJECT
 public:
  explicit TimelineChart(QWidget* parent = nullptr);

  // The stacked timeline (by category when it has them, else the total); null: none.
  void setPrimary(std::shared_ptr<const TimelineData> timeline, const QString& title);
  // Lines drawn over it; an overlay with another number of steps is stretched to the
  // primary's step axis.
  void setOverlays(std::vector<Overlay> overlays);
  void setBudget(int64_t budget_bytes);  // < 0: no budget line
  void setMarks(std::vector<Mark> marks);
  // A legend of the lines only (peaks, overlays, marks, budget): no phases or categories, for
  // charts with little height (the plan explorer's; the timeline page names them).
  void setCompactLegend(bool compact);
  // The series drawn, by name ("reserved, predicted · peak 2.06 GiB", ...), for tests.
  QStringList seriesNames() const;
  void setTitle(const QString& title);
  void setMaxPoints(size_t max_points);

  // Shows steps [first, last] only (what a drag selects); resetRange shows everything.
  void setRange(int64_t first, int64_t last);
  void resetRange();
  int64_t rangeFirst() const { return first_; }
  int64_t rangeLast() const { return last_; }
  int64_t steps() const;

  // What was drawn: the top of the stack's highest point in bytes, and the points drawn.
  double plottedPeakBytes() const { return plotted_peak_; }
  // Offload plans: the highest point of the pinned host memory series drawn (-1: none drawn).
  double plottedHostPeakBytes() const { return plotted_host_peak_; }
  size_t plottedPointCount() const { return plotted_points_; }
  const std::shared_ptr<const TimelineData>& primary() const { return primary_; }

  int64_t stepAt(const QPoint& viewport_pos) const;  // -1 outside the data
  QString describeStep(int64_t step) const;

 signals:
  void stepClicked(qint64 step);
  void rangeChanged(qint64 first, qint64 last);

 protected:
  void mousePressEvent(QMouseEvent* e) override;
  void mouseMoveEvent(QMouseEvent* e) override;
  void mouseReleaseEvent(QMouseEvent* e) override;
  void mouseDoubleClickEvent(QMouseEvent* e) override;
  void resizeEvent(QResizeEvent* e) override;

 private:
  void rebuild();

  std::shared_ptr<const TimelineData> primary_;
  std::vector<Overlay> overlays_;
  std::vector<Mark> marks_;
  QValueAxis* axis_x_ = nullptr;  // owned by the chart
  QValueAxis* axis_y_ = nullptr;
  int tick_width_ = 0;
  bool compact_legend_ = false;  // the plot width the step axis' ticks were chosen for
  QString title_;
  int64_t budget_ = -1;
  size_t max_points_ = 3000;
  int64_t first_ = 0, last_ = -1;
  double plotted_peak_ = 0;
  double plotted_host_peak_ = -1;
  size_t plotted_points_ = 0;
  QRubberBand* rubber_ = nullptr;
  QPoint press_pos_;
  bool dragging_ = false;
};

// The link's occupancy under a timeline of an offload plan: one lane per copy stream (device to
// host, host to device), a bar per copy over the steps its stream moves it (LinkCopy's step
// positions, from the planner's stream replay). Aligned with a TimelineChart's plot area.
class LinkLanes : public QWidget {
  Q_OBJECT
 public:
  explicit LinkLanes(QWidget* parent = nullptr);
  void setCopies(std::vector<LinkCopy> copies, const QString& title);
  // The steps shown and where the chart's plot area is, in this widget's x coordinates.
  void setRange(int64_t first, int64_t last);
  void setPlotArea(double left, double right);
  const std::vector<LinkCopy>& copies() const { return copies_; }
  // The bars drawn: the copies that fall in the steps shown.
  int bars() const;
  QString describeCopy(const LinkCopy& c) const;
  QSize sizeHint() const override;

 protected:
  void paintEvent(QPaintEvent*) override;
  void mouseMoveEvent(QMouseEvent* e) override;

 private:
  QRectF barRect(const LinkCopy& c) const;
  std::vector<LinkCopy> copies_;
  QString title_;
  int64_t first_ = 0, last_ = 0;
  double left_ = 0, right_ = 0;
};

}  // namespace memplan::gui
