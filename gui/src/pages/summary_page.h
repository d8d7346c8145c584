// The summary page: a headline, the headline quantities, memory at the peak by category (a
// chart and a table) and the opened files.
#pragma once

#include <QWidget>

class QChartView;
class QLabel;

namespace memplan::gui {

class BreakdownModel;
class DocumentSet;
class FilesModel;
class SummaryModel;

class SummaryPage : public QWidget {
  Q_OBJECT
 public:
  explicit SummaryPage(QWidget* parent = nullptr);
  void refresh(const DocumentSet& docs);
  void refreshFiles(const DocumentSet& docs);
  QString headline() const;

  SummaryModel* summaryModel() const { return summary_model_; }
  BreakdownModel* breakdownModel() const { return breakdown_model_; }
  FilesModel* filesModel() const { return files_model_; }

 private:
  void refreshBreakdown(const DocumentSet& docs);

  QLabel* headline_ = nullptr;
  SummaryModel* summary_model_ = nullptr;
  BreakdownModel* breakdown_model_ = nullptr;
  FilesModel* files_model_ = nullptr;
  QChartView* breakdown_chart_ = nullptr;
};

}  // namespace memplan::gui
