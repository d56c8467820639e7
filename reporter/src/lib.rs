//! Enables crash reporting at launch and uploads pending reports. Work in progress.
