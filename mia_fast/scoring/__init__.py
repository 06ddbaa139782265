"""Scoring: the typed run configuration, the Detector over its engines, the pass planner and the file runner."""
