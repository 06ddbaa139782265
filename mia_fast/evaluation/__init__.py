"""What the scores are worth: metrics, decision thresholds, reports, and the controlled-contamination
experiment."""
