// Measured memory against time: each profile's memory events (bytes alive after each) as a
// step line from the start of the step, its peak marked. Used to compare two profiles, whose
// steps need not have the same schedule. Downsampled like the timeline (the peak is kept).
#pragma once

#include <QChartView>
#include <memory>
#include <vector>

#include "document.h"

namespace memplan::gui {

struct ProfileLine {
  std::shared_ptr<const Profile> profile;
  QString label;
  QColor color;
};

class ProfileMemoryChart : public QChartView {
  Q_OBJECT
 public:
  explicit ProfileMemoryChart(QWidget* parent = nullptr);
  void setLines(std::vector<ProfileLine> lines, const QString& title);
  void setMaxPoints(size_t max_points);

  // What was drawn: the highest bytes of any line, and the points drawn.
  double plottedPeakBytes() const { return plotted_peak_; }
  size_t plottedPointCount() const { return plotted_points_; }

 private:
  void rebuild();

  std::vector<ProfileLine> lines_;
  QString title_;
  size_t max_points_ = 3000;
  double plotted_peak_ = 0;
  size_t plotted_points_ = 0;
};

}  // namespace memplan::gui
