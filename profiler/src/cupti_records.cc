// CUPTI activity records -> Profile: filled in by the CUPTI backend work.
